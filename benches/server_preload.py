"""What the workers' fork server (benches/worker_start.py) imports before it forks any
worker: torch's import is most of a worker's start. Nothing here may touch a device (no CUDA
context to copy into a fork)."""

from benches.long_lived import imported_for_good

with imported_for_good():
    import numpy  # noqa: F401
    import torch  # noqa: F401
