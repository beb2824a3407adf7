"""Where bench keeps its local state: the run registry, the local store and sandboxes."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import BenchConfig
from orchestrator.errors import ConfigError, UsageError


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def registry(self) -> Path:
        return self.root / "runs.sqlite"

    @property
    def store(self) -> Path:
        return self.root / "store"

    def sandbox(self, run_id: str) -> Path:
        return self.root / "sandboxes" / run_id


def state_paths(config: BenchConfig) -> StatePaths:
    from platformdirs import user_state_dir

    return StatePaths(Path(config.state_dir or user_state_dir("bench")).expanduser())


def writable_dir_problem(path: Path) -> str | None:
    """Why `path` cannot be a directory bench writes into (created if missing), or None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        return getattr(e, "strerror", None) or str(e)
    if not os.access(path, os.W_OK | os.X_OK):
        return "no write permission"
    return None


def ensure_writable(paths: StatePaths) -> None:
    """Fail early (exit 2) rather than half-way through a launch."""
    problem = writable_dir_problem(paths.root)
    if problem:
        raise ConfigError(
            f"state dir {paths.root} is not writable ({problem}); set state_dir in bench.toml "
            "or BENCH_STATE_DIR to a writable directory"
        )


def ensure_writable_dest(dest: Path) -> None:
    """Where fetched runs go: checked before anything is downloaded (exit 2), and marked as
    bench's outputs (mark_as_outputs)."""
    problem = writable_dir_problem(dest)
    if problem:
        raise UsageError(f"--dest {dest} is not a writable directory ({problem}); choose another")
    mark_as_outputs(dest)


# The default --dest is results/ in the working directory, which is the kernel repository
# when one follows the README. A .gitignore that ignores everything beside it (as pytest's
# cache and Python's venv write one) keeps fetched runs out of that repository's tree: git
# does not list them, so no payload carries them (kernel_tree.collect.collect_tree reads
# git's view, and outside git honours the same file) and no commit reads `+dirty` because of them.
OUTPUTS_GITIGNORE = "# Written by bench: fetched runs and reports, no part of this repository.\n*\n"
_OWN_ENTRY = re.compile(
    r"^(\d{8}-\d{6}-[0-9a-f]{6}|sweep-\d{8}-\d{6}-[0-9a-f]{6}|history\.png"
    r"|\.staging-.*|\.write-test-.*)$"
)


def mark_as_outputs(dest: Path) -> None:
    """Write DEST/.gitignore (OUTPUTS_GITIGNORE) unless DEST has one or holds anything that
    is not bench's: a folder of the user's own (`--dest .`) is never told to ignore itself."""
    marker = dest / ".gitignore"
    if os.path.lexists(marker):
        return
    if any(not _OWN_ENTRY.match(entry.name) for entry in dest.iterdir()):
        return
    marker.write_text(OUTPUTS_GITIGNORE)
