"""The bounds on what a run may hand bench, and strict JSON within them.

Every limit is in `LIMITS`; the only result files a manifest may list are the schema's
(`result_name`); JSON is parsed with duplicate keys and non-numbers refused, its depth,
container sizes and strings bounded, then validated against its model (`validated`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.text import printable
from results_schema.record import PROFILE_FILES, PROFILE_REPORT_NAME, RESULT_FILES

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Limits:
    """Bounds on what a run may hand us. The default plan (12 configs × 50 samples × 4
    identities, the A/A control included: 2,400 measurement rows, ≈ 270 kB; 96 timed-check
    rows) sits two orders of magnitude below every one of them."""

    manifest_bytes: int = 1 << 20
    status_bytes: int = 64 << 10
    log_bytes: int = 32 << 20  # logs/startup.log as fetched
    csv_bytes: tuple[tuple[str, int], ...] = (
        ("measurements.csv", 64 << 20),
        ("summary.csv", 4 << 20),
        ("correctness.csv", 4 << 20),
        ("timed_checks.csv", 4 << 20),
        ("profile.csv", 1 << 20),
    )
    csv_rows: tuple[tuple[str, int], ...] = (
        ("measurements.csv", 250_000),
        ("summary.csv", 4_096),
        ("correctness.csv", 4_096),
        ("timed_checks.csv", 8_192),
        ("profile.csv", 1_024),
    )
    # One Nsight Compute report (a profiled call's few kernels, 5 sections: ~1 MB) and all
    # of a run's together; they are binary and never parsed here.
    profile_report_bytes: int = 32 << 20
    profile_reports_bytes: int = 256 << 20
    configs: int = 256  # a plan's configs: `bench report` draws a panel per config
    json_depth: int = 16  # a manifest nests 5 deep (manifest → plan → configs → config → value)
    json_items: int = 4_096  # entries of one JSON list or object
    string_chars: int = 4_096  # one JSON string or CSV cell
    clock_skew: timedelta = timedelta(minutes=10)  # the VM's clock against this machine's
    # The script times each phase in whole seconds (`date +%s`) and its start truncated to
    # the second: each phase may read up to a second longer than it ran.
    phase_rounding_seconds: float = 1.0
    payload_bytes: int = 256 << 20  # payload.tar.gz, read back for the plan launch put in it

    def bytes_of(self, name: str) -> int:
        if PROFILE_REPORT_NAME.fullmatch(name):
            return self.profile_report_bytes
        return dict(self.csv_bytes)[name]

    def rows_of(self, name: str) -> int:
        return dict(self.csv_rows)[name]


LIMITS = Limits()
# The only files a manifest may list: the names the schema defines, nothing else. Every
# complete run holds RESULT_PATHS; a profiled one also profile.csv and numbered reports.
RESULT_PATHS = {f"results/{name}": name for name in RESULT_FILES}
OPTIONAL_PATHS = {f"results/{name}": name for name in PROFILE_FILES}


def result_name(path: str) -> str | None:
    """The schema's name for a manifest path, or None when the schema names no such file."""
    known = RESULT_PATHS.get(path) or OPTIONAL_PATHS.get(path)
    if known:
        return known
    name = path.removeprefix("results/")
    return name if path.startswith("results/") and PROFILE_REPORT_NAME.fullmatch(name) else None


def is_profile_report(name: str) -> bool:
    return PROFILE_REPORT_NAME.fullmatch(name) is not None


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {printable(key, 60)!r}")
        data[key] = value
    return data


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(raw: bytes, max_bytes: int, limits: Limits = LIMITS) -> Any:
    """Parse bounded, strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, bounded
    depth, list lengths and string lengths. ValueError says what was wrong."""
    if len(raw) > max_bytes:
        raise ValueError(f"{len(raw)} bytes, more than the {max_bytes} allowed")
    try:
        text = raw.decode("utf-8")
        data = json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {limits.json_depth} levels") from None
    _check_shape(data, limits)
    return data


def _check_shape(data: Any, limits: Limits) -> None:
    """Walk without recursion: depth, container sizes and string lengths."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > limits.json_depth:
            raise ValueError(f"nested deeper than {limits.json_depth} levels")
        if isinstance(value, str):
            if len(value) > limits.string_chars:
                raise ValueError(
                    f"a string of {len(value)} characters (most {limits.string_chars})"
                )
        elif isinstance(value, (list, dict)):
            if len(value) > limits.json_items:
                raise ValueError(f"a list or object of {len(value)} entries")
            children = value.values() if isinstance(value, dict) else value
            if isinstance(value, dict):
                pending.extend((key, depth + 1) for key in value)
            pending.extend((child, depth + 1) for child in children)


def validated(data: Any, model: type[Model]) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ValueError(f"{where}: {first['msg']}") from None
