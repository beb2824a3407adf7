"""The batch backend's pure parts: what the budget buys (attempts and retries), the retry
rule the stand-in applies, and the rendered script (one script: gce's, with the batch
partial), shellcheck-clean and committing only the last attempt."""

from __future__ import annotations

import subprocess

import pytest

from orchestrator.backends.batch.backend import BatchBackend
from orchestrator.backends.batch.money import (
    VM_SETUP_SECONDS,
    attempt_usd,
    plan_attempts,
)
from orchestrator.backends.gce import pricing
from orchestrator.config import BenchConfig
from orchestrator.errors import RefusedError
from orchestrator.render import render_startup
from tests.fakes.batch_tasks import retried
from tests.unit.test_render import shellcheck, spec_for

RATE = pricing.hourly_rate(BenchConfig(), spot=True)


@pytest.mark.parametrize("budget_usd", [0.25, 0.5, 1.0, 5.0])
def test_every_attempt_of_every_task_fits_the_budget_and_covers_the_estimate(budget_usd):
    cap = pricing.max_run_seconds_for(budget_usd, RATE)
    plan = plan_attempts(budget_usd, RATE, 214, cap)
    assert plan.attempt_seconds >= 214
    assert plan.attempts * attempt_usd(RATE, plan.attempt_seconds) <= budget_usd
    assert plan.worst_case_usd <= budget_usd
    if plan.retries < 3:  # fewer than wanted: one more attempt would not have fitted
        assert (plan.attempts + 1) * attempt_usd(RATE, 214) > budget_usd


def test_the_vm_setup_is_priced_in_each_attempt():
    assert attempt_usd(RATE, 600) == pricing.worst_case_usd(RATE, 600 + VM_SETUP_SECONDS)


def test_a_budget_short_of_one_attempt_is_refused_with_the_figure():
    with pytest.raises(RefusedError, match=r"cannot pay for one Batch attempt.*\$0\.\d\d at"):
        plan_attempts(0.05, RATE, 214, pricing.max_run_seconds_for(0.05, RATE))


def test_two_tasks_share_the_budget():
    one = plan_attempts(3.0, RATE, 214, 3600)
    two = plan_attempts(3.0, RATE, 214, 3600, task_count=2)
    assert two.worst_case_usd <= 3.0 and two.attempts == 2 * (1 + two.retries)
    assert two.attempt_seconds < one.attempt_seconds


@pytest.mark.parametrize(
    ("code", "attempt", "expected"),
    [(50001, 0, True), (50006, 2, True), (50001, 3, False), (50005, 0, False), (1, 0, False)],
)
def test_the_stand_in_retries_only_what_the_lifecycle_policy_names(code, attempt, expected):
    spec = {
        "maxRetryCount": 3,
        "lifecyclePolicies": [
            {"action": "RETRY_TASK", "actionCondition": {"exitCodes": [50001, 50006]}}
        ],
    }
    assert retried(spec, code, attempt) is expected
    assert retried({"maxRetryCount": 1}, code, 0) is True  # no policy: every failure


def batch_script(tmp_path) -> str:
    spec = spec_for("default", "batch")
    config = BenchConfig(project="my-project-1", bucket="my-bucket")
    return render_startup(spec, "/var/lib/bench/run", BatchBackend(config).template_vars())


def test_the_batch_script_is_gces_with_its_partial_and_shellcheck_clean(tmp_path):
    script = batch_script(tmp_path)
    result = shellcheck(script)
    # The batch partial ends the machine its own way by redefining three of gce's functions
    # (store_put, stop_machine, machine_watchdog): shellcheck notes the first definitions
    # as never invoked (SC2329), and nothing else.
    notes = [line for line in result.stdout.splitlines() if line.startswith("In - line")]
    assert len(notes) == 3 and result.stdout.count("^-- SC") == 3, result.stdout
    assert result.stdout.count("^-- SC2329") == 3
    names = [script.splitlines()[int(n.split()[3].rstrip(":")) - 1] for n in notes]
    assert [n.split("(")[0] for n in names] == ["store_put", "stop_machine", "machine_watchdog"]
    assert "# ---- backend: gce." in script and "# ---- backend: batch." in script
    assert "readonly SELF_DELETE=false" in script


@pytest.mark.parametrize(
    ("preempted", "attempt", "retries", "uploaded"),
    [("TRUE", "0", "3", False), ("TRUE", "3", "3", True), ("FALSE", "0", "3", True)],
)
def test_only_a_preempted_attempt_with_a_retry_to_come_leaves_the_manifest(
    tmp_path, preempted, attempt, retries, uploaded
):
    script = batch_script(tmp_path)
    # The partial's functions, with the metadata server and the upload stubbed.
    partial = script[script.index("# ---- backend: gce.") : script.index("# ---- backend: batch.")]
    batch_part = script[script.index("# ---- backend: batch.") :].split("\n# ----", 1)[0]
    probe = f"""
set -u
log() {{ echo "log: $*"; }}
{partial}
_gce_metadata() {{ [[ $1 == instance/preempted ]] && echo {preempted}; }}
store_put() {{ echo "uploaded $2"; }}
{batch_part}
store_put /tmp/m runs/x/manifest.json
"""
    env = {
        "BATCH_TASK_RETRY_ATTEMPT": attempt,
        "BENCH_BATCH_MAX_RETRIES": retries,
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env).stdout
    assert ("uploaded runs/x/manifest.json" in out) is uploaded, out
