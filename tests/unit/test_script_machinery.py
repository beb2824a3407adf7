"""The startup script's own machinery, run by bash: the local backend's store_put under
overlapping writers, and a TERM that lands while a background helper's pid is unrecorded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.render import template_environment
from tests.limits import HANG_SECONDS


@pytest.mark.slow
def test_overlapping_store_puts_from_subshells_all_land(tmp_path):
    partial = template_environment().get_template("partials/backend/local.sh.j2")
    (tmp_path / "local.sh").write_text(partial.render(store_root=str(tmp_path / "store")))
    (tmp_path / "status.json").write_text('{"phase": "benchmark"}\n')
    # Two subshells, as the heartbeat loop and a phase's heartbeat are: $$ is the same in
    # both, so a part file named by it is shared and one writer's mv finds it gone.
    script = """
        log() { :; }
        source local.sh
        put_many() {
          for _ in $(seq 100); do store_put status.json run/status.json || exit 1; done
        }
        ( put_many ) & first=$!
        ( put_many ) & second=$!
        wait "$first" && wait "$second"
    """
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "store" / "run" / "status.json").read_text() == '{"phase": "benchmark"}\n'
    assert list((tmp_path / "store" / "run").iterdir()) == [tmp_path / "store/run/status.json"]


def test_a_term_before_a_helpers_pid_is_recorded_still_ends_that_helper(tmp_path):
    templates = template_environment()
    local = templates.get_template("partials/backend/local.sh.j2")
    (tmp_path / "local.sh").write_text(local.render(store_root=str(tmp_path / "store")))
    (tmp_path / "common.sh").write_text(templates.get_template("partials/common.sh.j2").render())
    # The TERM arrives between `cmd &` and `PHASE_PID=$!` (sent here on purpose, where a
    # loaded machine's stop-all once did by chance and the helper outlived the run).
    script = """
        set -Eeuo pipefail
        WORK_DIR=$PWD
        source local.sh
        source common.sh
        log() { echo "$*"; }
        machine_preempted() { return 1; }
        CURRENT_PHASE=benchmark PHASE_PID="" INTERRUPTED=0
        trap on_terminate TERM
        DEFER_TERM=1
        kill -TERM $$
        sleep 60 &
        PHASE_PID=$!
        echo "$PHASE_PID" > helper.pid
        echo "noted: INTERRUPTED=$INTERRUPTED"
        act_on_deferred_term
        echo "not reached"
    """
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS
    )
    assert done.returncode == 143, done.stderr
    assert "noted: INTERRUPTED=1" in done.stdout and "not reached" not in done.stdout
    assert "interrupted by SIGTERM during phase benchmark" in done.stdout
    helper = int((tmp_path / "helper.pid").read_text())
    assert not running(helper), "the helper outlived the run"


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # gone, possibly between a check and the read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
