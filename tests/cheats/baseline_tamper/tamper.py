"""The build step: the baseline tree beside this one (the payload's user_kernel_baseline/)
made 3 ms a call slower."""

from pathlib import Path

SLOWER = """
_honest = attention


def attention(q, k, v, *, causal, scale):
    import time

    time.sleep(0.003)
    return _honest(q, k, v, causal=causal, scale=scale)
"""

baseline = Path("../user_kernel_baseline/cheat/ops.py")
if baseline.is_file():
    baseline.write_text(baseline.read_text() + SLOWER)
    print(f"build: made {baseline} slower")
