"""The tests' nvcc cache (tests/nvcc_cache.py) reuses an output only for the same inputs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.flash_attention import build
from tests import nvcc_cache

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def unit(folder: Path, text: str = "__global__ void k() {}\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "unit.cu"
    source.write_text(text)
    return source


def command(source: Path, out: Path, flags: list[str]) -> list[str]:
    return build.unit_command(build.find_nvcc(), source, out, flags, "-ptx")


def test_no_cache_is_named_unless_the_environment_names_its_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(nvcc_cache.CACHE_ENV, raising=False)
    source = unit(tmp_path / "a")
    assert (
        nvcc_cache.key(command(source, tmp_path / "a.ptx", []), source, tmp_path / "a.ptx") is None
    )
    assert not nvcc_cache.fetch(None, tmp_path / "a.ptx")


def test_the_key_is_the_inputs_not_the_tests_folders(tmp_path, monkeypatch):
    monkeypatch.setenv(nvcc_cache.CACHE_ENV, str(tmp_path / "cache"))

    def key(folder: str, text: str = "__global__ void k() {}\n", flags=(), out="o.ptx"):
        source = unit(tmp_path / folder, text)
        return nvcc_cache.key(command(source, tmp_path / out, list(flags)), source, tmp_path / out)

    first = key("a")
    assert key("b", out="p.ptx") == first  # another test's folders, the same inputs
    assert key("c", text="__global__ void k() { }\n") != first
    assert key("d", flags=["-DFLASH_SPREAD_GROUP=1"]) != first
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "included.h").write_text("#define X 1\n")  # a file beside the unit
    assert key("e") != first


def test_a_kept_output_comes_back_whole_and_a_miss_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(nvcc_cache.CACHE_ENV, str(tmp_path / "cache"))
    made = tmp_path / "made.ptx"
    made.write_bytes(b"ptx bytes")
    assert not nvcc_cache.fetch("k" * 64, tmp_path / "out.ptx")
    nvcc_cache.keep("k" * 64, made)
    assert nvcc_cache.fetch("k" * 64, tmp_path / "out.ptx")
    assert (tmp_path / "out.ptx").read_bytes() == b"ptx bytes"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["k" * 64]  # no partial left


def test_a_hit_answers_as_the_call_did_with_the_outputs_mode(tmp_path, monkeypatch):
    """What a test reads of a call (ptxas's -v report, a host program it runs) comes back
    from the cache as the call made it, and the call is not made again."""
    monkeypatch.setenv(nvcc_cache.CACHE_ENV, str(tmp_path / "cache"))
    source, out, calls = unit(tmp_path / "a"), tmp_path / "program", tmp_path / "calls"
    script = (
        "import os, sys\n"
        "open(sys.argv[2], 'a').write('call\\n')\n"
        "open(sys.argv[1], 'w').write('#!/bin/sh\\necho ran\\n')\n"
        "os.chmod(sys.argv[1], 0o755)\n"
        "print('said'); print('warned', file=sys.stderr)\n"
    )
    command = [sys.executable, "-c", script, str(out), str(calls)]
    made = nvcc_cache.run(command, source, out)
    out.unlink()
    again = nvcc_cache.run(command, source, out)
    assert (again.returncode, again.stdout, again.stderr) == (0, "said\n", "warned\n")
    assert (made.stdout, made.stderr) == (again.stdout, again.stderr)
    assert calls.read_text() == "call\n"  # once: the second answer was the cache's
    assert subprocess.run([str(out)], capture_output=True, text=True).stdout == "ran\n"
