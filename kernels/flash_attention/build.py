"""Builds libflash_attention.so with nvcc: a C-ABI library, no torch header, no torch ABI.

The units come from generate.py and compile in parallel (one nvcc process per unit), then
link into one shared library. The result is cached under
    $FLASH_KERNEL_CACHE or ~/.cache/bench/kernels / <key> / libflash_attention.so
with key = sha256(csrc + generator + this file) + nvcc version + arch, so a changed source,
compiler or GPU never reuses a stale build.

    python -m kernels.flash_attention.build --check --record build.json   # on a GPU machine
    python -m kernels.flash_attention.build --compile-only --arch sm_89   # no GPU needed
    python -m kernels.flash_attention.build --print-cache-key             # the cache dir name

Measurement builds (developer tools only) pass `defines`, the switches of csrc/switches.h, e.g.
{"FLASH_EMULATE_SMEM_PER_SM": 102400}; they are part of the cache key and of the record.
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

import kernels.flash_attention.generate as generate  # not through the package: it imports api
from kernels.support import unsupported_reason

PACKAGE_DIR = Path(__file__).resolve().parent
CSRC_DIR = PACKAGE_DIR / "csrc"
LIBRARY_NAME = "libflash_attention.so"
BASE_FLAGS = ["-O3", "-std=c++17", "-Xcompiler=-fPIC", "-Xptxas=-warn-spills"]


class BuildError(RuntimeError):
    """nvcc is missing or a unit failed to compile; the message carries nvcc's output."""


def source_files() -> list[Path]:
    """Everything whose change must invalidate a cached build."""
    csrc = sorted(p for p in CSRC_DIR.iterdir() if p.suffix in {".h", ".cuh", ".cu"})
    # support.py holds the head dims the generator writes units for.
    support = PACKAGE_DIR.parent / "support.py"
    return csrc + [PACKAGE_DIR / "generate.py", support, Path(__file__).resolve()]


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
    number = int(digits.rstrip("a"))
    if unsupported_reason(number // 10, number % 10):
        raise ValueError(f"arch {arch!r}: the kernel needs sm_80 or newer")
    return "sm_" + digits


def detect_arch() -> str:
    import torch  # only needed when no --arch is given

    if not torch.cuda.is_available():
        raise BuildError("no CUDA GPU visible: pass --arch (e.g. sm_89) to compile without one")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def gencode_flags(arch: str) -> list[str]:
    """sm_90 builds target sm_90a: wgmma and setmaxnreg exist only there (the Hopper path)."""
    number = arch.removeprefix("sm_")
    if generate.has_sm90_path(arch):
        number = number.rstrip("a") + "a"
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


# The measurement switches of csrc/switches.h, with the values each accepts.
SWITCHES = {
    "FLASH_FORCE_VARIANT": range(0, 3),
    "FLASH_EMULATE_SMEM_PER_SM": range(0, 2**31),
    "FLASH_DISABLE_SM90": range(0, 2),
    "FLASH_COMPACT_SHAPE_D128": (0, 5, 6),
    "FLASH_SPREAD_GROUP": range(0, 9),
    "FLASH_PTXAS_REG_LEVEL": range(0, 11),
    "FLASH_SM90_SHAPE_D64": range(0, 4),
    "FLASH_SM90_CAUSAL_SCHEDULE": range(0, 3),
    "FLASH_SM90_WAVE_PLAN": range(0, 3),
    "FLASH_SM90_SPLIT_TAIL": range(0, 3),
    "FLASH_FP8_LAZY_RESCALE": range(0, 3),
    "FLASH_FP8_EXP_SPLIT": range(0, 8),
    "FLASH_SM90_EXP_SPLIT": range(0, 16),
    "FLASH_SM90_O_STORE": range(0, 2),
    "FLASH_SM90_OWN_KEY_BOUND": range(0, 3),
    "FLASH_SM90_DESC_STEPS": range(0, 3),
    "FLASH_SM90_RING_FROM_ZERO": range(0, 3),
    "FLASH_SM90_TREE_MAX": range(0, 3),
    "FLASH_SM90_TREE_SUM": range(0, 4),
    "FLASH_SM90_LAZY_RESCALE": range(0, 3),
    "FLASH_SM90_Q_STAGES": range(0, 3),
    "FLASH_SM90_ROW_SUM": (0, 1, 3, 4),
    "FLASH_SM90_P_BUFFERS": range(0, 3),
}
# ptxas --register-usage-level (0-10, ptxas's default 5) per unit. The non-causal D=128 units
# hold the split-D kernel that an L4 runs, at 255 registers: level 6 schedules its loop anew,
# +0.6-0.8 % (medians, paired against FA2) at S = 1024-4096 under L4 emulation; the wide
# kernel in the same units moved -0.4 to +0.9 % on the H100 (NOTES.md, v15). The causal units'
# three-block kernel ran ~1 % slower at level 6, so they keep ptxas's default.
# The switch FLASH_PTXAS_REG_LEVEL=1..10 sets another level for these units (re-measuring on a
# real L4, say); 0 keeps this table's.
UNIT_REGISTER_USAGE_LEVEL = {"fwd_hdim128_fp16": 6, "fwd_hdim128_bf16": 6}


def unit_flags(stem: str, defines: dict[str, int] | None) -> list[str]:
    """Flags of one generated unit beyond the build's own (UNIT_REGISTER_USAGE_LEVEL)."""
    level = UNIT_REGISTER_USAGE_LEVEL.get(stem)
    if level is None:
        return []
    level = (defines or {}).get("FLASH_PTXAS_REG_LEVEL") or level
    return [f"-Xptxas=--register-usage-level={level}"]


# Switches that select or shape the sm_80 kernel: any of them set turns the Hopper path off.
SM80_SWITCHES = ("FLASH_FORCE_VARIANT", "FLASH_EMULATE_SMEM_PER_SM", "FLASH_DISABLE_SM90")


def define_flags(defines: dict[str, int] | None) -> list[str]:
    """-D flags for measurement switches; refuses names or values csrc/switches.h lacks."""
    flags = []
    for name, value in sorted((defines or {}).items()):
        if name not in SWITCHES or not isinstance(value, int) or value not in SWITCHES[name]:
            raise ValueError(f"unknown build switch {name}={value!r}; known: {', '.join(SWITCHES)}")
        flags.append(f"-D{name}={value}")
    return flags


def build_flags(arch: str, defines: dict[str, int] | None = None) -> list[str]:
    """nvcc's flags for every unit of an `arch` build with these switches (each unit adds its
    own, `unit_flags`)."""
    return BASE_FLAGS + gencode_flags(arch) + define_flags(defines)


def cache_root() -> Path:
    env = os.environ.get("FLASH_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "bench" / "kernels"


def cache_key(sha: str, nvcc_ver: str, arch: str, switch_flags: list[str]) -> str:
    key = f"{sha[:16]}-nvcc{nvcc_ver}-{arch}"
    if switch_flags:
        key += "-" + hashlib.sha256(" ".join(switch_flags).encode()).hexdigest()[:8]
    return key


def cache_key_for(arch: str | None = None) -> str:
    """The cache directory name the shipped build (no switches) for `arch` (default: the
    visible GPU) would use."""
    arch = normalize_arch(arch) if arch else detect_arch()
    return cache_key(source_sha256(), nvcc_version(find_nvcc()), arch, define_flags(None))


def unit_command(nvcc: str, src: Path, out: Path, flags: list[str], step: str = "-c") -> list[str]:
    """nvcc's command for one unit: an object (`-c`, as a build compiles it), or one device
    step alone (`-ptx`; `-cubin`, from a unit or its PTX) for comparing what a switch changes."""
    return [nvcc, *flags, f"-I{CSRC_DIR}", f"-I{src.parent}", step, str(src), "-o", str(out)]


def _compile_unit(nvcc: str, src: Path, out: Path, flags: list[str]) -> tuple[str, float]:
    start = time.perf_counter()
    cmd = unit_command(nvcc, src, out, flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src.name}:\n{' '.join(cmd)}\n{proc.stderr}")
    return src.stem, time.perf_counter() - start


def longest_first(sources: list[Path]) -> list[Path]:
    """The units in the order their compiles start: the FP8 units first, the rest as generated.
    A pool of `jobs` ends when its last-started unit does, and the D = 128 FP8 unit (seven
    kernels) takes 10-12 s of a Hopper build's 86-97 s of compiles, the others 1-5 s each
    (H200 host); generated last, it started last and ran alone to the end (issue 53 item 6)."""
    return sorted(sources, key=lambda src: "_e4m3_" not in src.stem)


def compile_units(
    nvcc: str,
    src_dir: Path,
    obj_dir: Path,
    arch: str,
    flags: list[str],
    jobs: int | None = None,
    only: set[str] | None = None,
    defines: dict[str, int] | None = None,
) -> dict[str, float]:
    """Generates the units of an `arch` build and compiles them (or those named in `only`),
    one nvcc process each, every unit with `flags` plus its own (`unit_flags`, which reads the
    build's `defines`); returns seconds per unit."""
    sources = longest_first(generate.write_sources(src_dir, arch))
    if only is not None:
        sources = [src for src in sources if src.stem in only]
    obj_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or os.cpu_count() or 1
    # Threads suffice: each one only waits on its own nvcc process.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(
                _compile_unit,
                nvcc,
                src,
                obj_dir / (src.stem + ".o"),
                flags + unit_flags(src.stem, defines),
            )
            for src in sources
        ]
        return dict(f.result() for f in futures)


def _link(nvcc: str, obj_dir: Path, library: Path) -> None:
    objects = sorted(str(p) for p in obj_dir.glob("*.o"))
    cmd = [nvcc, "-shared", *objects, "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"link failed:\n{' '.join(cmd)}\n{proc.stderr}")


def build(
    arch: str | None = None,
    jobs: int | None = None,
    force: bool = False,
    defines: dict[str, int] | None = None,
) -> dict:
    """Builds (or finds in the cache) the library; returns a KernelBuild-shaped record.

    `defines` sets measurement switches (csrc/switches.h); the shipped build sets none.
    """
    start = time.perf_counter()
    arch = normalize_arch(arch) if arch else detect_arch()
    nvcc = find_nvcc()
    version, sha = nvcc_version(nvcc), source_sha256()
    switch_flags = define_flags(defines)
    flags = build_flags(arch, defines)
    final_dir = cache_root() / cache_key(sha, version, arch, switch_flags)
    library = final_dir / LIBRARY_NAME
    record = {
        "source_sha256": sha,
        "defines": dict(sorted((defines or {}).items())),
        "arch": arch,
        "flags": flags,
        # Per-unit flags beyond `flags` (UNIT_REGISTER_USAGE_LEVEL).
        "unit_flags": {
            unit.name: extra
            for unit in generate.units(arch)
            if (extra := unit_flags(unit.name, defines))
        },
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
        units = compile_units(nvcc, work / "src", work / "obj", arch, flags, jobs, defines=defines)
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
        arch = normalize_arch(arch)
        flags = build_flags(arch)
        return compile_units(nvcc, work / "src", work / "obj", arch, flags, jobs)


def parse_defines(items: list[str]) -> dict[str, int]:
    """['FLASH_FORCE_VARIANT=2'] -> {'FLASH_FORCE_VARIANT': 2}."""
    defines = {}
    for item in items:
        name, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            raise ValueError(f"--define {item!r}: expected NAME=INTEGER")
        defines[name] = int(value)
    return defines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", help="target GPU arch, e.g. sm_89 (default: the visible GPU)")
    parser.add_argument("--record", type=Path, help="write the build record (JSON) here")
    parser.add_argument("--compile-only", action="store_true", help="compile, no GPU, no cache")
    parser.add_argument("--jobs", type=int, help="parallel nvcc processes (default: all cores)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument(
        "--print-cache-key", action="store_true", help="print the cache dir name and exit"
    )
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=INT",
        help=f"measurement switch, repeatable (developer builds): {', '.join(SWITCHES)}",
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
        record = build(args.arch, args.jobs, args.force, parse_defines(args.define))
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.record:
        args.record.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "unit_seconds"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
