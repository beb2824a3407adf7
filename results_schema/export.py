"""Exports every model's JSON Schema to results_schema/jsonschema/ (a test keeps them in sync).

python -m results_schema.export          # rewrite the files
python -m results_schema.export --check  # exit 1 if any file is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from results_schema.gate_report import GateReport
from results_schema.kernel_contract import ContractFile
from results_schema.models import (
    CorrectnessRow,
    Manifest,
    Measurement,
    Plan,
    ProfileRow,
    Status,
    SummaryRow,
)
from results_schema.program_output import FetchOutput, LaunchOutput, SweepReportOutput
from results_schema.ranking import Ranking

SCHEMA_DIR = Path(__file__).parent / "jsonschema"
EXPORTED = {
    "plan.schema.json": Plan,
    "measurement.schema.json": Measurement,
    "summary.schema.json": SummaryRow,
    "correctness.schema.json": CorrectnessRow,
    "profile.schema.json": ProfileRow,
    "status.schema.json": Status,
    "manifest.schema.json": Manifest,
    "kernel-contract.schema.json": ContractFile,  # bench-kernel.toml, for editors' checks
    "gate-report.schema.json": GateReport,  # `bench report --format json`, gate.json
    "ranking.schema.json": Ranking,  # ranking.json, in the manifest and gate.json
    "launch-output.schema.json": LaunchOutput,  # `bench launch --json` (docs/json.md)
    "fetch-output.schema.json": FetchOutput,  # `bench fetch --json`
    "sweep-report.schema.json": SweepReportOutput,  # `bench report SWEEP --format json`
}


def rendered() -> dict[str, str]:
    return {
        name: json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        for name, model in EXPORTED.items()
    }


def stale_files() -> list[str]:
    return [
        name
        for name, text in rendered().items()
        if not (SCHEMA_DIR / name).is_file() or (SCHEMA_DIR / name).read_text() != text
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_files()
        for name in stale:
            print(f"stale: {SCHEMA_DIR / name}; run python -m results_schema.export")
        return 1 if stale else 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, text in rendered().items():
        (SCHEMA_DIR / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
