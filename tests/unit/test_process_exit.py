"""The command lines leave their objects to the process's end: the interpreter's final full
collection cost 0.2 s of CPU at each exit after `import torch`, 1.2 s with matplotlib and
the cloud clients too (2-core machine, 2026-11-27)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.limits import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[2]
# Registered first, so it runs last of the exit handlers: what the final collection faces.
PROBE = (
    "import atexit, gc, runpy, sys\n"
    "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
    "sys.argv = {argv!r}\n"
    "runpy.run_module({module!r}, run_name='__main__')\n"
)


@pytest.mark.parametrize(
    "module, argv",
    [("benches", ["benches", "plans"]), ("orchestrator", ["bench", "--help"])],
)
@pytest.mark.slow
def test_a_command_exits_with_its_objects_frozen(module, argv):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, argv=argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frozen = int(done.stdout.rsplit("frozen ", 1)[-1])
    assert frozen > 1000, done.stdout[-500:]
