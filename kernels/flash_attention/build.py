"""Builds libflash_attention.so with nvcc: a C-ABI library, no torch header, no torch ABI.

The units come from generate.py and compile in parallel (one nvcc process per unit), then
link into one shared library. The result is cached under
    $BENCH_KERNEL_CACHE or ~/.cache/bench/kernels / <key> / libflash_attention.so
with key = sha256(csrc + generator + this file) + nvcc version + arch, so a changed source,
compiler or GPU never reuses a stale build.

    python -m kernels.flash_attention.build --check --record build.json   # on a GPU machine
    python -m kernels.flash_attention.build --compile-only --arch sm_89   # no GPU needed
    python -m kernels.flash_attention.build --print-cache-key             # the cache dir name
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernels.flash_attention import generate

PACKAGE_DIR = Path(__file__).resolve().parent
CSRC_DIR = PACKAGE_DIR / "csrc"
LIBRARY_NAME = "libflash_attention.so"
BASE_FLAGS = ["-O3", "-std=c++17", "-Xcompiler=-fPIC", "-Xptxas=-warn-spills"]


class BuildError(RuntimeError):
    """nvcc is missing or a unit failed to compile; the message carries nvcc's output."""


def source_files() -> list[Path]:
    """Everything whose change must invalidate a cached build."""
    csrc = sorted(p for p in CSRC_DIR.iterdir() if p.suffix in {".h", ".cuh", ".cu"})
    return csrc + [PACKAGE_DIR / "generate.py", Path(__file__).resolve()]


def source_sha256() -> str:
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def find_nvcc() -> str:
    candidates = [shutil.which("nvcc")]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        candidates.insert(0, str(Path(cuda_home) / "bin" / "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise BuildError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def normalize_arch(arch: str) -> str:
    """'sm_89', '89', '8.9' -> 'sm_89'."""
    digits = arch.lower().removeprefix("sm_").replace(".", "")
    if not re.fullmatch(r"\d{2,3}a?", digits):
        raise ValueError(f"arch {arch!r}: expected a form like sm_89, 89 or 8.9")
    if int(digits.rstrip("a")) < 80:
        raise ValueError(f"arch {arch!r}: the kernel needs sm_80 or newer")
    return "sm_" + digits


def detect_arch() -> str:
    import torch  # only needed when no --arch is given

    if not torch.cuda.is_available():
        raise BuildError("no CUDA GPU visible: pass --arch (e.g. sm_89) to compile without one")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def gencode_flags(arch: str) -> list[str]:
    number = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


def cache_root() -> Path:
    env = os.environ.get("BENCH_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "bench" / "kernels"


def cache_key(sha: str, nvcc_ver: str, arch: str) -> str:
    return f"{sha[:16]}-nvcc{nvcc_ver}-{arch}"


def cache_key_for(arch: str | None = None) -> str:
    """The cache directory name a build for `arch` (default: the visible GPU) would use."""
    arch = normalize_arch(arch) if arch else detect_arch()
    return cache_key(source_sha256(), nvcc_version(find_nvcc()), arch)


def _compile_unit(nvcc: str, src: Path, out: Path, flags: list[str]) -> tuple[str, float]:
    start = time.perf_counter()
    cmd = [nvcc, *flags, f"-I{CSRC_DIR}", "-c", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src.name}:\n{' '.join(cmd)}\n{proc.stderr}")
    return src.stem, time.perf_counter() - start


def compile_units(
    nvcc: str, src_dir: Path, obj_dir: Path, flags: list[str], jobs: int | None = None
) -> dict[str, float]:
    """Generates and compiles every unit, one nvcc process each; returns seconds per unit."""
    sources = generate.write_sources(src_dir)
    obj_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or os.cpu_count() or 1
    # Threads suffice: each one only waits on its own nvcc process.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(_compile_unit, nvcc, src, obj_dir / (src.stem + ".o"), flags)
            for src in sources
        ]
        return dict(f.result() for f in futures)


def _link(nvcc: str, obj_dir: Path, library: Path) -> None:
    objects = sorted(str(p) for p in obj_dir.glob("*.o"))
    cmd = [nvcc, "-shared", *objects, "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"link failed:\n{' '.join(cmd)}\n{proc.stderr}")


def build(arch: str | None = None, jobs: int | None = None, force: bool = False) -> dict:
    """Builds (or finds in the cache) the library; returns a KernelBuild-shaped record."""
    start = time.perf_counter()
    arch = normalize_arch(arch) if arch else detect_arch()
    nvcc = find_nvcc()
    version, sha = nvcc_version(nvcc), source_sha256()
    flags = BASE_FLAGS + gencode_flags(arch)
    final_dir = cache_root() / cache_key(sha, version, arch)
    library = final_dir / LIBRARY_NAME
    record = {
        "source_sha256": sha,
        "arch": arch,
        "flags": flags,
        "nvcc": version,
        "library": str(library),
    }
    if library.is_file() and not force:
        units = json.loads((final_dir / "units.json").read_text())
        return {
            **record,
            "cached": True,
            "seconds": time.perf_counter() - start,
            "unit_seconds": units,
        }
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    # Build in a scratch dir and rename: concurrent builders never see a half-written library.
    with tempfile.TemporaryDirectory(dir=final_dir.parent, prefix=".build-") as scratch:
        work = Path(scratch)
        units = compile_units(nvcc, work / "src", work / "obj", flags, jobs)
        _link(nvcc, work / "obj", work / LIBRARY_NAME)
        (work / "units.json").write_text(json.dumps(units, indent=1))
        staged = work / "staged"
        staged.mkdir()
        for name in (LIBRARY_NAME, "units.json"):
            shutil.move(str(work / name), staged / name)
        if force and final_dir.exists():
            shutil.rmtree(final_dir)
        try:
            staged.rename(final_dir)
        except OSError:
            if not library.is_file():  # lost a race to a builder that also failed
                raise
    return {
        **record,
        "cached": False,
        "seconds": time.perf_counter() - start,
        "unit_seconds": units,
    }


def compile_only(arch: str, jobs: int | None = None) -> dict[str, float]:
    """Compiles every unit for `arch` into a throwaway dir (CI, no GPU); seconds per unit."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="flash-compile-") as scratch:
        work = Path(scratch)
        flags = BASE_FLAGS + gencode_flags(normalize_arch(arch))
        return compile_units(nvcc, work / "src", work / "obj", flags, jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", help="target GPU arch, e.g. sm_89 (default: the visible GPU)")
    parser.add_argument("--check", action="store_true", help="run a smoke test on the GPU")
    parser.add_argument("--record", type=Path, help="write the build record (JSON) here")
    parser.add_argument("--compile-only", action="store_true", help="compile, no GPU, no cache")
    parser.add_argument("--jobs", type=int, help="parallel nvcc processes (default: all cores)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument(
        "--print-cache-key", action="store_true", help="print the cache dir name and exit"
    )
    args = parser.parse_args(argv)
    try:
        if args.print_cache_key:
            print(cache_key_for(args.arch))
            return 0
        if args.compile_only:
            if not args.arch:
                parser.error("--compile-only needs --arch")
            units = compile_only(args.arch, args.jobs)
            print(json.dumps({"arch": normalize_arch(args.arch), "unit_seconds": units}, indent=1))
            return 0
        record = build(args.arch, args.jobs, args.force)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.record:
        args.record.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "unit_seconds"}, indent=1))
    if args.check:
        from kernels.flash_attention.smoke import smoke_test

        failures = smoke_test()
        for line in failures:
            print(f"FAIL {line}", file=sys.stderr)
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
