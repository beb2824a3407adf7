"""What the tests' nvcc calls made, kept across `make test` runs (issue 52): ~30 s of a
two-core machine's CPU a suite, for output that only its inputs decide.

An output is kept under the folder NVCC_TEST_CACHE names (the Makefile's `test` and
`test-fast` name one inside the virtual environment, so `make clean` and a fresh clone start
with none: their first run compiles everything). Without it every call compiles. Its key holds
everything the output depends on, as build.cache_key does for a whole build and more: the
nvcc and host compiler found (their paths and `--version`), every source the kernel's build
reads (build.source_sha256: csrc/, the generator, build.py), the command's arguments with
the test's own folders named by their role, and each file of the input's folder (the unit's
generated sources or the PTX read). A miss runs the real command and keeps what it made:
the output with its mode (a host program stays executable) and, for `run`, what the command
printed (ptxas's -v report), so that a hit answers as the call did."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

from kernels.flash_attention import build

CACHE_ENV = "NVCC_TEST_CACHE"


@functools.cache
def _toolchain() -> bytes:
    """The compilers a call runs, as they say they are (nvcc runs the host's g++)."""
    said = []
    for program in (build.find_nvcc(), shutil.which("g++") or "g++"):
        found = subprocess.run([program, "--version"], capture_output=True, text=True)
        said.append(f"{program}\0{found.returncode}\0{found.stdout}")
    return "\0".join(said).encode()


@functools.cache
def _sources() -> str:
    return build.source_sha256()  # the tree does not change while the suite runs


def key(command: list[str], source: Path, out: Path) -> str | None:
    """The cache's name for what `command` (an nvcc command) makes of `source` into `out`;
    None where no cache is set."""
    if not os.environ.get(CACHE_ENV):
        return None
    digest = hashlib.sha256(_toolchain() + b"\0" + _sources().encode())
    for argument in command[1:]:
        named = argument.replace(str(out), "<out>").replace(str(source.parent), "<in>")
        digest.update(named.encode() + b"\0")
    for path in sorted(source.parent.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fetch(name: str | None, out: Path) -> bool:
    """Writes the kept output `name` to `out`; False where there is none."""
    if name is None:
        return False
    kept = Path(os.environ[CACHE_ENV]) / name
    if not kept.is_file():
        return False
    shutil.copy(kept, out)  # with its mode
    return True


def keep(name: str | None, out: Path) -> None:
    """Keeps `out`, made by a real call, as `name` (written whole, then renamed: workers
    that compile the same input at once each keep a whole copy)."""
    if name is None:
        return
    folder = Path(os.environ[CACHE_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.{os.getpid()}.{threading.get_ident()}"
    shutil.copy(out, partial)
    os.replace(partial, folder / name)


def run(command: list[str], source: Path, out: Path) -> subprocess.CompletedProcess:
    """Runs nvcc's `command`, which makes `out` from `source`, or writes `out` from the
    cache (a kept output is one a call that succeeded made)."""
    name = key(command, source, out)
    said = Path(os.environ[CACHE_ENV], f"{name}.said") if name else None
    if said is not None and said.is_file() and fetch(name, out):
        streams = json.loads(said.read_text())
        return subprocess.CompletedProcess(command, 0, streams["stdout"], streams["stderr"])
    made = subprocess.run(command, capture_output=True, text=True)
    if made.returncode == 0 and out.is_file() and said is not None:
        keep(name, out)
        partial = said.with_name(f".{said.name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_text(json.dumps({"stdout": made.stdout, "stderr": made.stderr}))
        os.replace(partial, said)  # after the output: a hit finds both
    return made
