"""How many intra-op threads torch uses when the harness and the kernels' workers time on the
CPU: one setting for the parent and every worker, chosen so that they do not fight.

The parent times the registry's kernels in its own process and brackets each user kernel's
call in that kernel's worker (benches/isolation.py), so two processes take turns on the same
cores. With torch's default (a thread per core in each), the side that just ran leaves its
OpenMP threads spinning on the cores the other now needs: on a 2-core machine a worker's
SDPA read 0.65-2.0x the same SDPA in the parent, differing from one run to the next
(tools/verdict/README.md, issue 49). Measured there, on configs from 0.4 ms:

- one thread a process: 0.94-1.05;
- two threads a process, waiting passively (OMP_WAIT_POLICY=PASSIVE): within 5 % only from
  2.4 ms; a sleeping pool must be woken for each call, which smaller calls feel.

Hence half the cores a process (at least one): the parent and the worker it is timing each
have cores of their own, even while the other's threads still spin, and both run the same
number of threads, so a user kernel and a built-in one are timed alike. On 2 cores that is
the one thread measured. A smaller OMP_NUM_THREADS set by the user is kept.

On CUDA nothing is changed: the host threads only launch work there.
"""

from __future__ import annotations

import os

# Both read by OpenMP and MKL where a process starts; a worker started after `use` inherits
# them (benches/worker_start.py passes the parent's environment).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_in_force: int | None = None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _asked() -> int | None:
    """OMP_NUM_THREADS as the environment states it, if it is a positive count."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def intra_op_threads(device: str) -> int | None:
    """The intra-op threads of every process timing on `device` ("cpu" or "cuda"); None on
    CUDA (left as torch has it)."""
    if device != "cpu":
        return None
    share = max(1, _usable_cores() // 2)
    asked = _asked()
    return share if asked is None else min(share, asked)


def set_environment(device: str) -> int | None:
    """This process's environment, which the processes it starts from now inherit, set to
    `intra_op_threads(device)` (nothing on CUDA); imports no torch (benches/cli.py calls it
    before the workers' fork server imports torch, which reads it)."""
    threads = intra_op_threads(device)
    if threads is not None:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)
    return threads


def use(device: str) -> int | None:
    """This process's intra-op threads, and its environment's (`set_environment`), set to
    `intra_op_threads(device)`; returns the count (None on CUDA, where nothing changes)."""
    global _in_force
    threads = set_environment(device)
    if threads is None:
        return None
    import torch

    torch.set_num_threads(threads)
    _in_force = threads
    return threads


def in_force() -> int | None:
    """The count `use` set in this process (the run's fingerprint records it), or None."""
    return _in_force
