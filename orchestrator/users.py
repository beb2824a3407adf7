"""Who launched a run, as a GCE label value."""

from __future__ import annotations

import getpass
import re


def sanitize_label_value(value: str) -> str:
    """Turn anything (a user name, an email) into a valid GCE label value: at most 63 of
    lowercase letters, digits, '_' and '-'; never empty."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", value.lower()).strip("-")[:63].rstrip("-")
    return cleaned or "unknown"


def owner_label(configured: str | None) -> str:
    if configured:
        return sanitize_label_value(configured)
    try:
        return sanitize_label_value(getpass.getuser())
    except (KeyError, OSError):
        return "unknown"
