"""`bench launch --peers`: the names, the plan they change, and what the startup script does
with them (the install partial, run by bash against a stand-in python and pip)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.render import (
    PEER_INSTALL_SECONDS,
    PHASE_TIMEOUTS,
    benchmark_timeout_seconds,
    correctness_timeout_seconds,
    peer_installs,
    render_startup,
    template_environment,
)
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from results_schema.peers import PEER_NAMES, PEERS
from tests.limits import HANG_SECONDS
from tests.unit.test_render import backend_vars, shellcheck, spec_for


@pytest.fixture
def gce_settings(bench_env, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", "bench-test-project")
    monkeypatch.setenv("BENCH_BUCKET", "bench-test-bucket")
    return bench_env


def _gpu_plan():
    plan, _ = resolve_plan("default", "gce", has_gpu=True)
    return plan


# --- names and plans -------------------------------------------------------------------------


def test_an_unknown_peer_is_one_line_exit_2_naming_the_known_ones(gce_settings, capsys):
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", "default"]
    assert main([*args, "--peers", "xformers,flash-attn-9"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert (
        "--peers: unknown peer 'flash-attn-9' (known: xformers, fa4, flashinfer, cudnn-fe)" in err
    )


def test_peers_need_a_gpu_plan(gce_settings, capsys):
    args = ["launch", "--backend", "gce", "--budget", "1", "--plan", "cpu-smoke"]
    assert main([*args, "--peers", "fa4"]) == 2
    assert "--peers needs a GPU plan; cpu-smoke runs on the cpu" in capsys.readouterr().err


def test_launch_help_names_every_peer(capsys):
    assert main(["launch", "--help"]) == 0
    # click may break the line at the hyphen of "comma-separated": read it whole again.
    help_text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    assert f"comma-separated: {', '.join(PEER_NAMES)};" in help_text


def test_peers_join_the_baselines_after_the_plans_own_once_each():
    plan = _gpu_plan()
    shaped = shape_plan(plan, PlanOptions(peers=("fa4", "xformers", "fa4"))).plan
    assert shaped.candidate == plan.candidate
    assert shaped.compared_with == [*plan.compared_with, "fa4", "xformers"]
    assert shape_plan(plan, PlanOptions()).plan.compared_with == plan.compared_with


def test_the_cli_splits_the_names(gce_settings):
    from orchestrator.cli.options import plan_options

    options = plan_options(None, None, None, None, None, peers=" xformers, fa4,,xformers ")
    assert options.peers == ("xformers", "fa4")


# --- what the target installs ------------------------------------------------------------------


def _spec_with_peers(backend: str, peers: tuple[str, ...]):
    spec = spec_for("default", backend)
    plan = shape_plan(spec.plan, PlanOptions(peers=peers)).plan
    return spec.model_copy(update={"plan": plan})


def test_gce_installs_each_requested_peers_pins_and_local_installs_nothing():
    plan = _spec_with_peers("gce", ("fa4", "xformers")).plan
    assert peer_installs(plan, "gce") == [
        {"name": "fa4", "pins": "flash-attn-4==4.0.0b36", "options": ""},
        {"name": "xformers", "pins": " ".join(PEERS["xformers"].pins), "options": ""},
    ]
    cudnn = _spec_with_peers("gce", ("cudnn-fe",)).plan
    assert peer_installs(cudnn, "gce") == [
        {"name": "cudnn-fe", "pins": "nvidia-cudnn-frontend==1.32.0", "options": "--no-deps"}
    ]
    assert peer_installs(plan, "local") == []
    assert peer_installs(_gpu_plan(), "gce") == []
    assert all("==" in pin for peer in PEERS.values() for pin in peer.pins)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gce", "local"])
def test_the_script_with_peers_is_shellcheck_clean(backend):
    spec = _spec_with_peers(backend, ("xformers", "fa4", "flashinfer"))
    script = render_startup(spec, "/var/lib/bench/run", backend_vars(backend))
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout
    installs = "install_peer xformers 'xformers==0.0.35 xformers==0.0.34"
    # The peers install inside the phase that runs the gate (and then the timing).
    measure = correctness_timeout_seconds(spec) + benchmark_timeout_seconds(spec)
    if backend == "gce":
        assert installs in script and "install_peer fa4 flash-attn-4==4.0.0b36" in script
        assert correctness_timeout_seconds(spec) == (
            PHASE_TIMEOUTS["correctness"] + 3 * PEER_INSTALL_SECONDS
        )
    else:
        assert "install_peer xformers" not in script and "install_peer fa4" not in script
        assert correctness_timeout_seconds(spec) == PHASE_TIMEOUTS["correctness"]
    assert f"run_phase measure {measure}" in script
    assert script.index("install_peers  #") > script.index("phase_measure() {")


# --- the install, run by bash -----------------------------------------------------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# A stand-in for the run's python: imports torch 2.11.0, and its pip installs only the
# pins listed in $ACCEPTED, answering others as pip does a resolver conflict.
if [[ "$1" == "-c" ]]; then echo "torch==2.11.0"; exit 0; fi
echo "pip $*" >> "$CALLS"
pin=${!#}
if [[ " $ACCEPTED " == *" $pin "* ]]; then echo "Successfully installed $pin"; exit 0; fi
echo "Collecting $pin"
echo "ERROR: Cannot install $pin because these package versions have conflicting dependencies."
echo "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io"
exit 1
"""


def _install(
    tmp_path: Path, pins: str, accepted: str, options: str = ""
) -> subprocess.CompletedProcess:
    partial = template_environment().get_template("partials/peers.sh.j2")
    (tmp_path / "peers.sh").write_text(
        partial.render(
            peer_installs=[{"name": "xformers", "pins": pins, "options": options}],
            peer_install_seconds=60,
        )
    )
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "python.path").write_text(str(python))
    (tmp_path / "logs").mkdir(exist_ok=True)
    script = """
        set -Eeuo pipefail
        export WORK_DIR=$PWD RUN_KEY=runs/r1
        log() { echo "$*"; }
        payload_python() { cat "$WORK_DIR/python.path"; }
        store_put() { mkdir -p "store/$(dirname "$2")"; cp "$1" "store/$2"; }
        export -f log payload_python store_put
        source peers.sh
        bash -Eeuo pipefail -c install_peers
    """
    env = {**os.environ, "CALLS": str(tmp_path / "calls"), "ACCEPTED": accepted}
    return subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )


def test_the_first_pin_that_fits_the_runs_torch_is_installed(tmp_path):
    pins = "xformers==0.0.35 xformers==0.0.34 xformers==0.0.33.post2"
    done = _install(tmp_path, pins, accepted="xformers==0.0.34")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and calls[-1].endswith("xformers==0.0.34")
    held = tmp_path / "peers-constraints.txt"
    assert all(f"--constraint {held}" in call for call in calls)  # torch stays as it is
    assert held.read_text() == "torch==2.11.0\n"
    assert not (tmp_path / "payload" / "peer-installs" / "xformers.failed").exists()
    assert "peers: xformers: installed xformers==0.0.34" in done.stdout
    uploaded = (tmp_path / "store" / "runs" / "r1" / "logs" / "peers.log").read_text()
    assert "conflicting dependencies" in uploaded and "Successfully installed" in uploaded


def test_a_peers_pip_options_go_with_each_pin(tmp_path):
    """cudnn-fe installs without its dependencies (results_schema/peers.py says why)."""
    pins = "xformers==0.0.35 xformers==0.0.34"
    done = _install(tmp_path, pins, accepted="xformers==0.0.34", options="--no-deps")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2
    assert all(c.endswith(f"--no-deps {p}") for c, p in zip(calls, pins.split(), strict=True))


def test_a_peer_that_fits_no_pin_leaves_pips_error_and_the_script_goes_on(tmp_path):
    done = _install(tmp_path, "xformers==0.0.35 xformers==0.0.32.post2", accepted="")
    assert done.returncode == 0, done.stderr
    failed = (tmp_path / "payload" / "peer-installs" / "xformers.failed").read_text()
    assert failed == (
        "xformers==0.0.32.post2: ERROR: Cannot install xformers==0.0.32.post2 because these "
        "package versions have conflicting dependencies.\n"
    )
    assert "peers: xformers: not installed (xformers==0.0.32.post2: ERROR" in done.stdout


def test_a_failed_install_reads_back_as_the_peers_reason(tmp_path, monkeypatch):
    """The marker the script leaves is what the adapter reports (benches/peers.py)."""
    import torch

    from benches import peers, registry

    _install(tmp_path, "xformers==0.0.35", accepted="")
    monkeypatch.setattr(peers, "INSTALL_FAILED_DIR", tmp_path / "payload" / "peer-installs")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    reason = registry.get("xformers").available(torch.device("cuda"))
    assert reason.startswith("unavailable: xformers not installed (pip install failed: ")
    assert "conflicting dependencies" in reason and reason.endswith("see logs/peers.log)")
