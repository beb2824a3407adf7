"""The local backend's store_put, run by bash: writers that overlap (the heartbeat loop is a
subshell beside the phase that records status) never lose an upload."""

from __future__ import annotations

import subprocess

from orchestrator.render import template_environment


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
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "store" / "run" / "status.json").read_text() == '{"phase": "benchmark"}\n'
    assert list((tmp_path / "store" / "run").iterdir()) == [tmp_path / "store/run/status.json"]
