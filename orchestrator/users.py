"""Who launched a run, as a GCE label value."""

from __future__ import annotations

import getpass
import re


def sanitize_label_value(value: str) -> str:
    """GCE label values: at most 63 of lowercase letters, digits, '_' and '-'."""
    cleaned = re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]
    return cleaned or "unknown"


def owner_label(configured: str | None) -> str:
    if configured:
        return sanitize_label_value(configured)
    try:
        return sanitize_label_value(getpass.getuser())
    except (KeyError, OSError):
        return "unknown"
