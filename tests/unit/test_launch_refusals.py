"""Launch options that ask for what the target cannot run are refused before anything is
created (issue 31): an option reshapes the plan after its own check, so the shaped plan is
checked again."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.service import plans


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(plans, "local_gpu_present", lambda: False)


def refused(bench_env, capsys, *args: str) -> str:
    code = main(["launch", "--backend", "local", "--budget", "1", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    state = bench_env / "state"
    assert not (state / "runs.sqlite").exists() and not (state / "sandboxes").exists()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_unknown_candidate_is_refused_with_the_known_names(bench_env, capsys, no_gpu):
    err = refused(bench_env, capsys, "--plan", "cpu-smoke", "--candidate", "nosuch")
    assert "unknown implementation 'nosuch'" in err and "sdpa-math" in err


def test_our_kernel_on_a_machine_without_a_gpu_is_refused_up_front(bench_env, capsys, no_gpu):
    err = refused(bench_env, capsys, "--candidate", "flash", "--baseline-impl", "sdpa")
    assert "flash runs on cuda only (its supports.devices)" in err


def test_a_gpu_peer_on_a_cpu_plan_is_refused(bench_env, capsys, no_gpu):
    err = refused(bench_env, capsys, "--plan", "cpu-smoke", "--candidate", "xformers")
    assert "xformers needs a CUDA GPU" in err
