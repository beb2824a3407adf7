"""The contract between the controller and the payload: one model for every file a run writes.

Both halves import this package; it needs only pydantic. `results_schema.record` is the
stdlib-only subset the startup script uses to write status.json and manifest.json even
when the payload's Python environment never came up.
"""

from results_schema.models import (
    AttentionConfig,
    Comparison,
    CorrectnessRow,
    Cost,
    EnvironmentFingerprint,
    FileEntry,
    IntervalMethod,
    KernelBuild,
    Manifest,
    Measurement,
    OverallSpeedup,
    PhaseRecord,
    Plan,
    ProfileRequest,
    ProfileRow,
    Status,
    SummaryRow,
)
from results_schema.record import PHASES, SCHEMA_VERSION

# file name in results/ -> the model of one of its rows
CSV_MODELS = {
    "measurements.csv": Measurement,
    "summary.csv": SummaryRow,
    "correctness.csv": CorrectnessRow,
    "timed_checks.csv": CorrectnessRow,
    "profile.csv": ProfileRow,
}

__all__ = [
    "CSV_MODELS",
    "PHASES",
    "SCHEMA_VERSION",
    "AttentionConfig",
    "Comparison",
    "CorrectnessRow",
    "Cost",
    "EnvironmentFingerprint",
    "FileEntry",
    "IntervalMethod",
    "KernelBuild",
    "Manifest",
    "Measurement",
    "OverallSpeedup",
    "PhaseRecord",
    "Plan",
    "ProfileRequest",
    "ProfileRow",
    "Status",
    "SummaryRow",
]
