"""Our kernel built from another kernels/ tree: the A/B baseline of `bench launch --baseline`.

The baseline tree is a directory holding its own kernels/ (BENCH_BASELINE_ROOT; in a payload,
baseline/). Its own build.py builds it in a child process whose imports resolve to that
tree, so its sources, generator and flags are the baseline's and its cache key is its own
source hash, in a cache of its own (BENCH_BASELINE_CACHE): even identical sources give two
libraries, loaded side by side. The library is then called through this tree's binding:
the C ABI (csrc/flash_api.h) is the contract both builds share, and the correctness gate
checks the baseline like any implementation, so a baseline whose ABI drifted fails the gate
instead of being timed.

Two libraries built from one code base in one process: their host code defines the same
template statics (the launcher's "opted in to >48 KB shared memory" flags), which GCC emits
as STB_GNU_UNIQUE symbols, and the dynamic linker binds those process-wide even across
RTLD_LOCAL libraries: the baseline would read the candidate's flags and launch its kernels
without their shared-memory opt-in (the launch fails). The baseline is therefore compiled
with -fno-gnu-unique (through nvcc's NVCC_APPEND_FLAGS, which any revision's build.py
honours): its statics stay its own. Device code is unaffected.

    python -m kernels.baseline --root DIR --arch sm_90 --check --record baseline_build.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT_ENV = "BENCH_BASELINE_ROOT"
RECORD_ENV = "BENCH_BASELINE_BUILD"  # the build phase's record: later phases load its library
CACHE_ENV = "BENCH_BASELINE_CACHE"
OWN_STATICS_FLAG = "-Xcompiler=-fno-gnu-unique"


class BaselineError(RuntimeError):
    """The baseline tree is missing, or its build failed (the message carries its output)."""


def baseline_root() -> Path | None:
    root = os.environ.get(ROOT_ENV)
    return Path(root) if root else None


def build(root: Path, arch: str, record: Path, check: bool = False, force: bool = False) -> dict:
    """Builds the tree at `root` with its own build.py; returns its KernelBuild record."""
    if not (root / "kernels" / "flash_attention" / "build.py").is_file():
        raise BaselineError(f"{root} holds no kernels/flash_attention/build.py")
    command = [sys.executable, "-m", "kernels.flash_attention.build", "--arch", arch]
    command += ["--record", str(record.resolve())]
    command += ["--check"] * check + ["--force"] * force
    # cwd and PYTHONPATH both name the baseline tree: none of this tree's modules is imported.
    appended = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} {OWN_STATICS_FLAG}".strip()
    env = {
        **os.environ,
        "PYTHONPATH": str(root.resolve()),
        "BENCH_KERNEL_CACHE": str(cache_root()),
        "NVCC_APPEND_FLAGS": appended,
    }
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BaselineError(f"the baseline kernel did not build or check:\n{proc.stderr[-4000:]}")
    return json.loads(record.read_text(encoding="utf-8"))


def cache_root() -> Path:
    """Baseline builds are cached apart from the candidate's (their flags differ)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "bench" / "kernels-baseline"


_library = None


def _load_library():
    """The baseline's library, from the build phase's record (else built now); once."""
    global _library
    if _library is None:
        from kernels.flash_attention import api

        record_path = os.environ.get(RECORD_ENV)
        if record_path and Path(record_path).is_file():
            record = json.loads(Path(record_path).read_text(encoding="utf-8"))
        else:
            root = baseline_root()
            if root is None:
                raise BaselineError(f"no baseline kernel tree: set {ROOT_ENV}")
            import torch

            major, minor = torch.cuda.get_device_capability()
            scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"baseline-build-{os.getpid()}.json"
            record = build(root, f"sm_{major}{minor}", scratch)
        _library = api._Library(record)
    return _library


def run(q, k, v, causal):
    from kernels.flash_attention import api

    api.validate(q, k, v)
    scale = q.shape[-1] ** -0.5
    return api._forward(q, k, v, bool(causal), scale, _load_library())[0]


def backend_for(q, k, v, causal) -> str:
    record = _load_library().record
    return f"flash-baseline:{record['source_sha256'][:12]}:{record['arch']}"


def available(device) -> str | None:
    """As for the candidate (kernels/support.py), and only where a baseline tree was given."""
    if device.type != "cuda":
        return "needs a CUDA GPU"
    import torch

    from kernels.support import unsupported_reason

    reason = unsupported_reason(*torch.cuda.get_device_capability(device))
    if reason:
        return reason
    if baseline_root() is None and not os.environ.get(RECORD_ENV):
        return f"no baseline kernel tree was given ({ROOT_ENV})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the directory holding kernels/")
    parser.add_argument("--arch", required=True, help="target GPU arch, e.g. sm_90")
    parser.add_argument("--record", type=Path, required=True, help="write the build record here")
    parser.add_argument("--check", action="store_true", help="run the tree's smoke test")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    try:
        record = build(args.root, args.arch, args.record, args.check, args.force)
    except BaselineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in record.items() if k != "unit_seconds"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
