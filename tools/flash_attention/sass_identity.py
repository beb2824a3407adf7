"""Proves a source change to the flash-attention kernel changes no shipped machine code (no GPU).

    python3 tools/flash_attention/sass_identity.py snapshot REV OUT [--arch sm_90a ...] [--only U]
    python3 tools/flash_attention/sass_identity.py compare OUT_A OUT_B

`snapshot` exports git revision REV's kernels/ (`git archive`, so the work tree's state does not
matter), generates that revision's units for each arch with its own generate.py and compiles each
the way its build.py does (its `build_flags(arch)` plus `unit_flags(unit)`, no switches): to PTX
(`-ptx`), then that PTX to a cubin (`-cubin`, the same ptxas flags), and the unit to an object
(`-c`, as a build compiles it) whose host code (the launchers) is kept as its disassembly with
relocations (`objdump -d -r`; the object's own bytes hold the build folder's path).
OUT/<arch>/<unit>.{ptx,cubin,host}.
`--only` keeps the units named (repeatable; default all). Units compile one nvcc at a time per
`--jobs` (default 2).

`compare` reports, per unit present in both: the device code, `cubin identical` (bytes), else
`ptx identical` (after dropping comments, blank lines and .file/.loc directives), else
`DIFFERENT`; and the host code, `host identical` or `host DIFFERENT`; exits 1 on any difference
or on a unit only one side has.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs inside the exported tree: the units and flags its own build.py would use.
_PLAN = """
import json, sys
from kernels.flash_attention import build, generate
out = {}
for arch in sys.argv[1:]:
    src = build.generate.write_sources(__import__('pathlib').Path(sys.argv[0]) / arch, arch)
    out[arch] = {
        "nvcc": build.find_nvcc(),
        "csrc": str(build.CSRC_DIR),
        "units": {p.stem: [str(p), build.build_flags(arch) + build.unit_flags(p.stem, None)]
                  for p in src},
    }
print(json.dumps(out))
"""


def plan(tree: Path, gen_dir: Path, arches: list[str]) -> dict:
    code = "import sys; sys.argv = sys.argv[1:]\n" + _PLAN
    proc = subprocess.run(
        [sys.executable, "-c", code, str(gen_dir), *arches],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/local/bin:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def compile_unit(nvcc: str, csrc: str, src: str, flags: list[str], out: Path) -> str:
    includes = [f"-I{csrc}", f"-I{Path(src).parent}"]
    ptx = out.with_suffix(".ptx")
    cubin = out.with_suffix(".cubin")
    obj = out.with_suffix(".o")
    for cmd in (
        [nvcc, *flags, *includes, "-ptx", src, "-o", str(ptx)],
        [nvcc, *flags, "-cubin", str(ptx), "-o", str(cubin)],
        [nvcc, *flags, *includes, "-c", src, "-o", str(obj)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}\n{proc.stderr}")
    listing = subprocess.run(
        ["objdump", "-d", "-r", "--no-show-raw-insn", str(obj)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The first lines name the object file.
    out.with_suffix(".host").write_text(listing.split("\n", 3)[-1])
    obj.unlink()
    return out.name


def snapshot(rev: str, out: Path, arches: list[str], only: set[str], jobs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sass-identity-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "kernels"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        units = plan(tree, Path(scratch) / "gen", arches)
        tasks = []
        for arch, info in units.items():
            (out / arch).mkdir(exist_ok=True)
            for stem, (src, flags) in info["units"].items():
                if not only or stem in only:
                    tasks.append((info["nvcc"], info["csrc"], src, flags, out / arch / stem))
        rev_sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True
        ).stdout.strip()
        (out / "snapshot.json").write_text(
            json.dumps({"rev": rev_sha, "units": [str(t[4].relative_to(out)) for t in tasks]})
        )
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for name in pool.map(lambda t: compile_unit(*t), tasks):
                print("compiled", name, flush=True)


def normalized_ptx(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        line = re.sub(r"//.*", "", line).strip()
        if line and not line.startswith((".file", ".loc")):
            lines.append(line)
    return lines


def compare(a: Path, b: Path) -> int:
    names_a = {p.relative_to(a).with_suffix("") for p in a.glob("*/*.cubin")}
    names_b = {p.relative_to(b).with_suffix("") for p in b.glob("*/*.cubin")}
    bad = 0
    for name in sorted(names_a | names_b, key=str):
        if name not in names_a or name not in names_b:
            print(f"{name}: only in {'A' if name in names_a else 'B'}")
            bad += 1
            continue
        cubin = (a / name).with_suffix(".cubin").read_bytes() == (b / name).with_suffix(
            ".cubin"
        ).read_bytes()
        host = (a / name).with_suffix(".host").read_text() == (b / name).with_suffix(
            ".host"
        ).read_text()
        host_word = "host identical" if host else "host DIFFERENT"
        bad += not host
        if cubin:
            print(f"{name}: cubin identical, {host_word}")
        elif normalized_ptx((a / name).with_suffix(".ptx")) == normalized_ptx(
            (b / name).with_suffix(".ptx")
        ):
            print(f"{name}: ptx identical (cubin bytes differ), {host_word}")
        else:
            print(f"{name}: DIFFERENT, {host_word}")
            bad += 1
    print(f"{len(names_a & names_b)} units compared, {bad} different or unmatched")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("rev")
    snap.add_argument("out", type=Path)
    snap.add_argument("--arch", action="append", help="default: sm_90a, sm_89, sm_80")
    snap.add_argument("--only", action="append", default=[], help="unit stem, repeatable")
    snap.add_argument("--jobs", type=int, default=2)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        snapshot(
            args.rev, args.out, args.arch or ["sm_90a", "sm_89", "sm_80"], set(args.only), args.jobs
        )
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
