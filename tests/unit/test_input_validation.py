"""Everything a user sends out is validated before it is used (issue 28), and every refusal
is one line with a clear exit code: never a write outside the store, never a hostile
string in an instance request or a startup script, never exit 1 for input bench can judge.

Each test is named after the finding it holds, runs the command as a user would (`main`,
in-process, with its own state dir: conftest's bench_env) and checks that nothing was
created or lost.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator import budget, registry
from orchestrator.backends.gce import pricing
from orchestrator.cli import main
from orchestrator.config import load_config
from orchestrator.errors import CloudError, NoCapacityError, ResultsError
from orchestrator.registry import RunRecord, RunRegistry
from orchestrator.service.context import Context
from orchestrator.service.launch import LaunchRequest, launch
from orchestrator.spec import new_run_id
from orchestrator.stores.local import LocalStore

GCE = {"BENCH_PROJECT": "my-project-1", "BENCH_BUCKET": "my-bench-results"}


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(out: str, err: str, *expected: str) -> None:
    assert out == "", f"expected only the error line, stdout had: {out!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: "), err
    for text in expected:
        assert text in lines[0], (text, lines[0])


def set_env(monkeypatch, values: dict[str, str]) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)


# --- CRITICAL: a store prefix that leads out of the store -----------------------------------


def test_a_prefix_leading_out_of_the_store_is_refused_before_anything_is_written(
    bench_env, capsys, monkeypatch
):
    # Deep enough that ../../.. from <state>/store stays inside this test's tmp dir.
    state = bench_env / "a" / "b" / "state"
    monkeypatch.setenv("BENCH_STATE_DIR", str(state))
    monkeypatch.setenv("BENCH_PREFIX", "../../..")
    from orchestrator.backends.local import LocalBackend

    def never_start(*args, **kwargs):  # had the launch got this far, nothing goes on running
        raise CloudError("test: the run was not started")

    monkeypatch.setattr(LocalBackend, "start", never_start)
    before = files_under(bench_env)
    code, out, err = run_cli(
        capsys, "launch", "--backend", "local", "--budget", "1", "--plan", "cpu-smoke"
    )
    assert code == 2, err
    assert_one_error_line(out, err, "invalid setting prefix", "BENCH_PREFIX", "'..'")
    assert files_under(bench_env) == before, "nothing may be created, inside or outside"


@pytest.mark.parametrize(
    "key", ["../outside", "runs/../../outside", "/abs", "runs//x", "runs/./x", "a\\b", "a\nb"]
)
def test_the_local_store_refuses_any_key_that_leads_outside_its_root(tmp_path, key):
    store = LocalStore(tmp_path / "store" / "bench")
    with pytest.raises(Exception, match="invalid store key"):
        store.put_bytes(key, b"x")
    assert files_under(tmp_path) <= {Path("store"), Path("store/bench")}


def test_the_local_store_refuses_a_write_through_a_link_leading_out_of_it(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "store"
    (root / "runs").mkdir(parents=True)
    (root / "runs" / "r1").symlink_to(outside)  # as a local run's script could plant it
    with pytest.raises(ResultsError, match="leads out of the store"):
        LocalStore(root).put_bytes("runs/r1/payload.tar.gz", b"x")
    assert list(outside.iterdir()) == []


# --- CRITICAL: strings that reach the instance request or the startup script -----------------


@pytest.mark.parametrize(
    "name, value, where",
    [
        ("SERVICE_ACCOUNT", "bench-vm@my-project-1.iam.gserviceaccount.com\n$(id)", "--instance"),
        ("SERVICE_ACCOUNT", "x\n$(touch /tmp/owned)", "--instance"),
        ("IMAGE_PROJECT", "deeplearning-platform-release\n$(id)", "--instance"),
        ("IMAGE_FAMILY", "pytorch-2-9-cu129-ubuntu-2204-nvidia-580\n", "--instance"),
        ("MACHINE_TYPE", "g2-standard-4\n", "--instance"),
        ("PROJECT", "my-project-1\n", "--instance"),
        ("METADATA_ENDPOINT", 'http://m"`id`', "--shutdown"),
        ("VM_WORK_DIR", "/var/lib/bench\n$(id)", "--shutdown"),
        ("OWNER", "ada\n$(id)", "--instance"),
    ],
)
def test_hostile_settings_never_reach_the_instance_request_or_a_script(
    bench_env, capsys, monkeypatch, name, value, where
):
    set_env(monkeypatch, GCE)
    monkeypatch.setenv(f"BENCH_{name}", value)
    before = files_under(bench_env)
    code, out, err = run_cli(capsys, "render", "--backend", "gce", "--plan", "default", where)
    assert code == 2, f"exit {code}; it reached the output:\n{out}"
    assert_one_error_line(out, err, f"invalid setting {name.lower()}", f"BENCH_{name}")
    assert files_under(bench_env) == before


@pytest.mark.parametrize(
    "account",
    [
        "default",
        "bench-vm@my-project-1.iam.gserviceaccount.com",
        "123456789012-compute@developer.gserviceaccount.com",
    ],
)
def test_the_service_accounts_gce_takes_are_accepted(bench_env, monkeypatch, account):
    monkeypatch.setenv("BENCH_SERVICE_ACCOUNT", account)
    assert load_config().service_account == account


# --- MINOR: exit 1 where a clear code belongs --------------------------------------------------


@pytest.mark.slow
def test_a_locked_registry_is_exit_2_naming_the_file_and_creates_no_run(
    bench_env, capsys, monkeypatch
):
    # Wait briefly: the lock below is held for the whole command.
    monkeypatch.setattr(registry, "LOCK_WAIT_SECONDS", 0.2, raising=False)
    path = bench_env / "state" / "runs.sqlite"
    with closing(RunRegistry(path)._connect()):  # the file exists, with its schema
        pass
    before = files_under(bench_env)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another bench, mid-transaction
    try:
        code, out, err = run_cli(
            capsys, "launch", "--backend", "local", "--budget", "1", "--plan", "cpu-smoke"
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 2, err
    assert_one_error_line(out, err, str(path), "locked by another bench process")
    assert RunRegistry(path).all() == []
    assert files_under(bench_env) == before


@pytest.mark.parametrize("amount", ["1e306", "10001", "１", "inf", "nan", "-1"])
def test_a_budget_beyond_the_maximum_is_exit_2_not_a_crash(bench_env, capsys, monkeypatch, amount):
    set_env(monkeypatch, GCE)
    before = files_under(bench_env)
    code, out, err = run_cli(capsys, "launch", "--backend", "gce", "--budget", amount)
    assert code == 2, err
    assert_one_error_line(out, err, "--budget")
    assert "at most $10,000" in err or "not an amount" in err
    assert files_under(bench_env) == before


@pytest.mark.parametrize(
    "duration, expected",
    [("１２m", "not a duration"), ("1２m", "not a duration"), ("99999999h", "at most 24h00m")],
)
def test_durations_take_ascii_digits_only_and_at_most_a_day(
    bench_env, capsys, monkeypatch, duration, expected
):
    set_env(monkeypatch, GCE)
    before = files_under(bench_env)
    # A budget too small for the plan: an accepted duration would end in exit 3 instead.
    code, out, err = run_cli(
        capsys, "launch", "--backend", "gce", "--budget", "0.01", "--max-runtime", duration
    )
    assert code == 2, err
    assert_one_error_line(out, err, "--max-runtime", expected)
    assert files_under(bench_env) == before


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("MONTHLY_CAP", "inf", "finite"),
        ("MONTHLY_CAP", "1e300", "less than or equal to 100000"),
        ("POLL_SECONDS", "1e-300", "greater than or equal to 0.1"),
        ("POLL_SECONDS", "inf", "finite"),
    ],
)
def test_monthly_cap_and_poll_seconds_are_finite_and_bounded(
    bench_env, capsys, monkeypatch, name, value, expected
):
    monkeypatch.setenv(f"BENCH_{name}", value)
    before = files_under(bench_env)
    code, out, err = run_cli(capsys, "status")
    assert code == 2, err
    assert_one_error_line(out, err, f"invalid setting {name.lower()}", expected)
    assert files_under(bench_env) == before


def test_a_dest_with_rich_markup_is_printed_as_written(bench_env, capsys):
    from tests.e2e.test_untrusted_runs import build_run, publish

    ctx = Context(load_config())
    run = build_run(new_run_id(), "local", bench_env / "outside")
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=3))
    dest = "[/red]x"
    code, out, err = run_cli(capsys, "fetch", run.run_id, "--dest", dest)
    assert code == 0, err
    assert f"→ {dest}/{run.run_id} " in out
    assert (bench_env / "work" / dest / run.run_id / "manifest.json").is_file()


# --- MINOR: a failed launch's cost, and status with an unreadable backend ---------------------


class RefusingStore:
    name = "gce"

    def require_credentials(self) -> None:
        """Credentials are there: the bucket fails later, at the upload."""

    def put_bytes(self, key: str, data: bytes) -> None:
        raise CloudError("test: the bucket cannot be reached")


class FailingGceBackend:
    """The gce backend's scripts, and a start that fails as the test says."""

    name = "gce"

    def __init__(self, config, error: BaseException):
        self.config, self.error = config, error

    def work_dir(self, run_id: str) -> str:
        return f"{self.config.vm_work_dir}/{run_id}"

    def template_vars(self) -> dict:
        from orchestrator.backends.gce.script_vars import template_vars

        return template_vars(self.config)

    def refuse_leftovers(self) -> None:
        """Its VMs delete themselves: what this test counts is the failed start."""

    def powered_off(self) -> list:
        """No leftover VM of an earlier launch for the launch to delete."""
        return []

    def stop(self, machines: list) -> list:
        return list(machines)

    def leftover_note(
        self, run_id: str, disk_usd_per_hour: float, disk_gb: int, cap_seconds: int, most_usd: float
    ) -> None:
        return None

    def instance_request_json(self, spec, startup: str, shutdown: str) -> str:
        """The request is built (and its metadata checked) before the reservation."""
        return "{}"

    def boot_disk_gb(self) -> int:
        return 50

    def start(self, spec, startup: str, shutdown: str):
        raise self.error


class PuttingStore(RefusingStore):
    def put_bytes(self, key: str, data: bytes) -> None:
        pass


@pytest.mark.parametrize(
    "fails_at, error, counted",
    [
        # No machine can exist: the payload never reached the bucket.
        ("store", None, "nothing"),
        # The cloud refused the machine.
        ("start", NoCapacityError("test: no capacity anywhere"), "nothing"),
        # An insert whose answer was lost: a machine may run until the cloud deletes it.
        ("start", CloudError("test: the insert's answer was lost"), "worst case"),
    ],
)
@pytest.mark.slow
def test_a_failed_launch_counts_what_it_could_have_billed_not_its_whole_budget(
    bench_env, monkeypatch, fails_at, error, counted
):
    set_env(monkeypatch, {**GCE, "BENCH_ALLOW_LEFTOVER_DISK": "true"})
    ctx = Context(load_config())
    ctx._stores["gce"] = RefusingStore() if fails_at == "store" else PuttingStore()
    ctx._backends["gce"] = FailingGceBackend(ctx.config, error or CloudError("unused"))
    request = LaunchRequest(budget_usd=25.0, plan="default")  # buys the 24 h ceiling
    with pytest.raises(CloudError):
        launch(ctx, request, "gce", "test")
    (record,) = ctx.registry.all()
    assert record.state == "failed"
    expected = (
        0.0
        if counted == "nothing"
        else pricing.worst_case_usd(
            pricing.hourly_rate(ctx.config, spot=True, disk_gb=50), record.max_run_seconds
        )
    )
    assert record.max_run_seconds == budget.MAX_RUN_SECONDS_CEILING
    assert record.cost_usd == pytest.approx(expected)
    assert ctx.registry.committed_this_month() == pytest.approx(expected)
    assert expected < request.budget_usd


def test_status_lists_local_runs_when_gce_runs_cannot_be_read(bench_env, capsys):
    reg = Context(load_config()).registry
    now = datetime.now(timezone.utc)
    ids = {}
    for backend in ("local", "gce"):
        ids[backend] = new_run_id()
        reg.add(
            RunRecord(
                run_id=ids[backend],
                backend=backend,
                plan="cpu-smoke",
                budget_usd=1.0,
                rate_usd_per_hour=0.0,
                max_run_seconds=600,
                estimated_seconds=60,
                created_at=now.isoformat(),
                state="failed",
            )
        )
    before = reg.all()
    code, out, err = run_cli(capsys, "status")
    assert code == 0, err
    assert ids["local"] in out
    unreadable = [line for line in out.splitlines() if "could not read" in line]
    assert len(unreadable) == 1, out
    assert f"1 gce run ({ids['gce']})" in unreadable[0] and "needs project" in unreadable[0]
    assert reg.all() == before
