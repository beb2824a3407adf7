"""SASS counts of the Hopper kernels in each library under a build cache (developer tool).

    python3 tools/flash_attention/sass_counts.py /tmp/flash-cache-item1   # on the GPU machine

Per library and sm90 kernel: HGMMA, UTMALDG, MUFU.EX2, and local-memory loads and stores
(LDL/STL: spills; the key loop should hold none).
"""

import re
import subprocess
import sys
from pathlib import Path

OPS = ("HGMMA", "UTMALDG", "MUFU.EX2", "LDL", "STL")

for library in sorted(Path(sys.argv[1]).glob("*/libflash_attention.so")):
    sass = subprocess.run(
        ["cuobjdump", "-sass", str(library)], capture_output=True, text=True
    ).stdout
    print(library.parent.name)
    for func in re.split(r"\n\s+Function : ", sass)[1:]:
        name = func.split("\n", 1)[0]
        if "Sm90Traits" not in name:
            continue
        shape = re.search(r"Sm90TraitsI(\w+?)Li(\d+)ELi(\d+)ELi(\d+)ELi(\d+)EEELb(\d)", name)
        counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", func)) for op in OPS}
        print("  ", shape.groups() if shape else name[:80], counts)
