"""An ab.py JSON as a table (developer tool): per build and cell its ratio to the peer named
(vs_flash, vs_cudnn) and to the first build, then each build's median of both.

    python3 tools/flash_attention/ab_table.py ab.json [vs_flash]
"""

import json
import statistics
import sys

rows = json.load(open(sys.argv[1]))["rows"]
peer = sys.argv[2] if len(sys.argv) > 2 else "vs_flash"
names = [k for k, v in rows[0].items() if isinstance(v, dict) and k != "peer_kernels"]


def cell(r):
    return f"{r['dtype'][0]}{r['D']}{'c' if r['causal'] else ''}/{r['S'] // 1024}k"


for column in (peer, "vs_base"):
    print(f"{column:>12}" + "".join(f"{cell(r):>10}" for r in rows))
    for n in names[column == "vs_base" :]:
        print(f"{n:>12}" + "".join(f"{r[n].get(column, float('nan')):>10.3f}" for r in rows))
for n in names:
    vs_peer = [r[n][peer] for r in rows if peer in r[n]]
    print(
        f"{n:>12}: {peer} median {statistics.median(vs_peer):.3f} min {min(vs_peer):.3f};"
        f" vs first median {statistics.median(r[n]['vs_base'] for r in rows):.3f}"
    )
