"""The trust boundary: where a run's files from a store become data bench may act on.

A VM runs code nobody reviewed, and anyone with access to the bucket can write a run, so
manifest.json, status.json, the CSVs and logs are untrusted until they pass here. Every
refusal is a ResultsError (exit 5) that names the run. Its parts:

- `limits`: every bound (`LIMITS`), the result files a run may list, strict JSON;
- `manifest`: the manifest and status read and held to the registry and to the payload
  launch built (plan, trees, digests), the cost the controller reckons;
- `files`: a fetched run's folders and files, each row checked against the plan.

What is printed from a run goes through `orchestrator.text.printable` or `markup_safe`
(re-exported here for the callers that took them from the boundary).
"""

from orchestrator.boundary.files import (
    CHECK_FILES,
    DRAFT_REPORT_PREFIX,
    IDENTITY_ROWS,
    REPORT_SUBDIR,
    RUN_ID_START,
    STAGING_PREFIX,
    checked_rows,
    private_dir,
    remove_abandoned,
    result_target,
    verify_result_file,
)
from orchestrator.boundary.limits import (
    LIMITS,
    OPTIONAL_PATHS,
    RESULT_PATHS,
    Limits,
    is_profile_report,
    parse_json,
    result_name,
)
from orchestrator.boundary.manifest import (
    UNKNOWN_PAYLOADS,
    LaunchedPayload,
    billed_cost,
    fetched_manifest,
    launched_payload,
    manifest_from,
    read_manifest,
    read_payload,
    read_status,
    with_launched_payload,
)
from orchestrator.text import markup_safe, printable

__all__ = [
    "CHECK_FILES",
    "DRAFT_REPORT_PREFIX",
    "IDENTITY_ROWS",
    "LIMITS",
    "OPTIONAL_PATHS",
    "REPORT_SUBDIR",
    "RESULT_PATHS",
    "RUN_ID_START",
    "STAGING_PREFIX",
    "UNKNOWN_PAYLOADS",
    "LaunchedPayload",
    "Limits",
    "billed_cost",
    "checked_rows",
    "fetched_manifest",
    "is_profile_report",
    "launched_payload",
    "manifest_from",
    "markup_safe",
    "parse_json",
    "printable",
    "private_dir",
    "read_manifest",
    "read_payload",
    "read_status",
    "remove_abandoned",
    "result_name",
    "result_target",
    "verify_result_file",
    "with_launched_payload",
]
