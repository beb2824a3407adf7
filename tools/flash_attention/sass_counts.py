"""SASS counts of the Hopper kernels in each library under a build cache (developer tool).

    python3 tools/flash_attention/sass_counts.py /tmp/flash-cache-item1   # on the GPU machine
    python3 tools/flash_attention/sass_counts.py unit.o [unit.sass ...]     # a unit compiled here

Per library (or object file, cubin, or a saved `cuobjdump -sass` listing) and sm90 kernel, the
16-bit ones and FP8's: HGMMA (QGMMA for FP8), UTMALDG, MUFU.EX2, and local-memory loads and
stores (LDL/STL: spills), then the same spills inside the tile loop (the outermost loop holding
a wgmma) and the key loop (the innermost), with the key loop's instruction count and its R2UR
and BSSY. The key loop should hold no spill; a value the tile loop reloads every tile is one
ptxas keeps live across it (NOTES.md, h26). Its R2UR are values ptxas computed per thread and
moved to uniform registers every key tile, its BSSY convergence barriers: a stage computed from
a count the tile loop carries put 17-24 of the one and 2 of the other in a loop (NOTES.md, f8
and h45). CUOBJDUMP names the binary where cuobjdump is not on PATH.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

OPS = ("HGMMA", "QGMMA", "UTMALDG", "MUFU.EX2", "LDL", "STL")


def listing(path: Path) -> str:
    if path.suffix == ".sass":
        return path.read_text()
    cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
    return subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True).stdout


def loop_counts(func: str) -> dict:
    """Spills in the tile and key loops: loops are the spans of backward branches."""
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", func)]
    loops = set()
    for addr, text in ins:
        target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if target and int(target.group(1), 16) < addr:
            loops.add((int(target.group(1), 16), addr))

    def count(span, op):
        return sum(1 for a, t in ins if span[0] <= a <= span[1] and re.search(rf"\b{op}\b", t))

    # An mbarrier wait retries from out-of-line code past the consumer's EXIT, a backward
    # branch into the loop body whose span is no loop of the consumer's: spans holding an EXIT
    # are left out (with the key loop unrolled twice, h28, the smallest span with an HGMMA was
    # one of them).
    mma = [
        span
        for span in loops
        if (count(span, "HGMMA") or count(span, "QGMMA")) and not count(span, "EXIT")
    ]
    if not mma:
        return {}
    key = min(mma, key=lambda s: s[1] - s[0])
    tile = max(mma, key=lambda s: s[1] - s[0])
    return {
        "tile LDL/STL": f"{count(tile, 'LDL')}/{count(tile, 'STL')}",
        "key loop": sum(1 for a, _ in ins if key[0] <= a <= key[1]),
        "key LDL/STL": f"{count(key, 'LDL')}/{count(key, 'STL')}",
        "key R2UR/BSSY": f"{count(key, 'R2UR')}/{count(key, 'BSSY')}",
    }


def report(name: str, sass: str) -> None:
    print(name)
    for func in re.split(r"\n\s+Function : ", sass)[1:]:
        kernel = func.split("\n", 1)[0]
        if "Sm90Traits" not in kernel and "Fp8Traits" not in kernel:
            continue
        # (element, head dim, key tile, stages, consumers, Q buffers, solo, causal); FP8:
        # (the kernel, head dim, key tile, causal and its further flags)
        shape = re.search(
            r"Sm90TraitsI(\w+?)Li(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E(?:Lb(\d)E)?EELb(\d)",
            kernel,
        ) or re.search(r"(\w*fp8\w*kernel)\w*Fp8TraitsILi(\d+)ELi(\d+)EEE((?:Lb\dE)+)", kernel)
        counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", func)) for op in OPS}
        counts.update(loop_counts(func))
        print("  ", shape.groups() if shape else kernel[:80], counts)


for arg in map(Path, sys.argv[1:]):
    if arg.is_dir():
        for library in sorted(arg.glob("*/libflash_attention.so")):
            report(library.parent.name, listing(library))
    else:
        report(arg.name, listing(arg))
