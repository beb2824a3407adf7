"""The batch backend's rules read from Google's documents, as pure functions: job states as
`status` shows them, each attempt's VM time from the task's status events, what doctor
judges of IAM's answers, and the attempts a budget buys as `bench prices` states them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from orchestrator.backends.batch.adaptor import batch_v1
from orchestrator.backends.batch.backend import _STATES, BatchBackend
from orchestrator.backends.batch.builder import build_job
from orchestrator.backends.batch.doctor import (
    default_account_check,
    job_rights_check,
    vm_roles_check,
)
from orchestrator.backends.batch.iam import JOB_PERMISSIONS, VM_ROLES
from orchestrator.backends.batch.money import attempt_seconds, plan_attempts
from orchestrator.backends.gce import pricing
from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError
from tests.unit.test_gce_builder import make_spec

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
ACCOUNT = "bench-vm@my-project-1.iam.gserviceaccount.com"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_every_job_state_google_documents_has_its_meaning():
    documented = {s.name for s in batch_v1.JobStatus.State} - {"STATE_UNSPECIFIED"}
    assert documented <= set(_STATES)
    waiting = {state for state, ours in _STATES.items() if ours == "WAITING"}
    assert waiting == {"QUEUED", "SCHEDULED"}  # "waiting for resources" / allocation not yet
    assert _STATES["RUNNING"] == "RUNNING"  # "Resource allocation has been successful"


def test_each_attempt_is_its_time_on_a_vm_and_queueing_is_none():
    # An hour QUEUED (no task event), then an attempt preempted after 5 min and a retry of
    # 4 min: 9 minutes of VM, not the 69 of the run's life.
    events = [
        (at(3600), "ASSIGNED"),
        (at(3660), "RUNNING"),
        (at(3900), "FAILED"),  # exit code 50001
        (at(3900), "PENDING"),
        (at(3960), "ASSIGNED"),
        (at(3970), "RUNNING"),
        (at(4200), "SUCCEEDED"),
    ]
    assert attempt_seconds(events, at(5000)) == [300.0, 240.0]
    # A retry whose events skip ASSIGNED still starts when it runs; order is by time.
    shuffled = [(at(10), "RUNNING"), (at(0), "ASSIGNED"), (at(70), "FAILED"), (at(80), "RUNNING")]
    assert attempt_seconds(shuffled, at(100)) == [70.0, 20.0]  # the live one counts till now
    assert attempt_seconds([(at(0), "PENDING")], at(100)) == []


def test_doctor_names_the_missing_job_rights_and_only_unconditional_vm_grants_count():
    everything = job_rights_check("my-project-1", set(JOB_PERMISSIONS))
    assert everything.ok
    short = job_rights_check("my-project-1", set(JOB_PERMISSIONS) - {"batch.jobs.delete"})
    assert not short.ok and "batch.jobs.delete" in short.detail
    assert "roles/batch.jobsEditor" in short.fix
    member = f"serviceAccount:{ACCOUNT}"
    policy = {
        "bindings": [
            {"role": "roles/batch.agentReporter", "members": [member]},
            {
                "role": "roles/logging.logWriter",
                "members": [member],
                "condition": {"title": "t", "expression": "false"},
            },
        ]
    }
    check = vm_roles_check("my-project-1", ACCOUNT, policy)
    assert not check.ok and "lacks roles/logging.logWriter" in check.detail
    assert "--role=roles/logging.logWriter --condition=None" in check.fix
    policy["bindings"][1].pop("condition")
    assert vm_roles_check("my-project-1", ACCOUNT, policy).ok
    assert set(VM_ROLES) == {"roles/batch.agentReporter", "roles/logging.logWriter"}


def test_the_terms_prices_shows_are_the_plan_launch_configures():
    config = BenchConfig()
    rate = pricing.hourly_rate(config, spot=True)
    cap = pricing.max_run_seconds_for(1.0, rate)
    terms = BatchBackend.budget_terms(config, 1.0, rate, 214, cap)
    plan = plan_attempts(1.0, rate, 214, cap)
    assert (terms.attempt_seconds, terms.attempts) == (plan.attempt_seconds, plan.attempts)
    assert terms.worst_case_usd == pytest.approx(plan.worst_case_usd) and terms.worst_case_usd <= 1
    # docs/batch.md's figure: $1.00 buys 4 attempts of 7m04s at the bundled L4 rates (spot
    # machine and GPUs priced at on-demand in the worst case: spot prices may change daily).
    assert terms.summary.startswith("4 attempts of ≤ 7m04s each (maxRunDuration; 3 retries")
    assert f"({rate.region}, the dearest allowed region)" in terms.summary


def test_a_job_runs_as_bench_s_own_account_with_storage_scope_never_the_default_account():
    """Batch adds the cloud-platform scope to a job's VM (builder.JOB_SCOPES): with the
    project's default account (Editor, on most projects) a run's code could reach the whole
    project, so no job is built for it, and doctor fails it."""
    rate = pricing.hourly_rate(BenchConfig(), spot=True)
    attempts = plan_attempts(1.0, rate, 214, 3600)
    with pytest.raises(ConfigError, match="bench's own service account only"):
        build_job(make_spec(backend="batch"), BenchConfig(), "true", 50, attempts)
    assert not default_account_check().ok
    job = build_job(
        make_spec(backend="batch"), BenchConfig(service_account=ACCOUNT), "true", 50, attempts
    )
    assert job.allocation_policy.service_account.email == ACCOUNT
    assert list(job.allocation_policy.service_account.scopes) == [
        "https://www.googleapis.com/auth/devstorage.read_only"
    ]
    assert job.allocation_policy.instances[0].install_gpu_drivers is False


def test_doctor_fails_a_batch_vm_account_holding_any_role_but_bench_s():
    member = f"serviceAccount:{ACCOUNT}"
    bench_roles = [
        *({"role": role, "members": [member]} for role in VM_ROLES),
        {
            "role": "projects/my-project-1/roles/benchSelfDelete",
            "members": [member],
            "condition": {"title": "bench instances only", "expression": "true"},
        },
    ]
    assert vm_roles_check("my-project-1", ACCOUNT, {"bindings": bench_roles}).ok
    policy = {"bindings": [*bench_roles, {"role": "roles/editor", "members": [member]}]}
    check = vm_roles_check("my-project-1", ACCOUNT, policy)
    assert not check.ok and "roles/editor" in check.detail and "cloud-platform" in check.detail
    assert check.fix == (
        f"gcloud projects remove-iam-policy-binding my-project-1 --member={member} "
        "--role=roles/editor --all"
    )
