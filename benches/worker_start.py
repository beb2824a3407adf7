"""Starting a kernel's worker process (benches/worker.py), early where it can be.

A worker's start is a fresh interpreter importing torch, a CUDA context and the kernel's
entry point: 4.8 s on an H100 (2026-11-27), of which `import torch` is 3-4.5 s, and the
parent pays the same import. Both phases that use workers (the gate, the timing) used to
pay them one after the other. `prestart` starts every worker of the plan before the parent
imports torch, so the two imports overlap; the parent's `Worker` (benches/isolation.py)
adopts the process at its first request, or starts one then as before where none was
started for it (a restarted worker, a worker of another caller).

Workers are forked from one server process per parent (multiprocessing's forkserver), a
fresh interpreter that imported torch once and never touches a device: each worker still
has a CUDA context of its own, made after the fork, and imports its kernel tree alone;
only the import of torch is shared. A restarted worker (after a crash or a hang), or a
second kernel tree, is then a fork, not another interpreter importing torch (1.5-2 s of
CPU each on a 2-core machine; the suite started ~30 a run, issue 31).

On the CPU the server is the parent itself, forked once it imported torch and numpy
(`serve_forks_from_here`): the overlap buys nothing where the run's cores are few, and the
server's own import of torch cost about 1.1 s of CPU a run with a user kernel on a 2-core
machine (21 of the suite's runs, issue 52). It is forked before the parent holds anything of
the run's but its plan (which the payload carries, readable to a kernel) and arguments: no
secret drawn, no input made, no thread started, no device touched; it keeps no file of the
parent's open but the ones a started server would have. Its workers are forked from it as
from a started one. Where the parent already runs other threads or a server, or this
Python's multiprocessing holds more than the one this was written against, a server is
started as on the GPU.

This module imports no torch, but on the CPU's path: it must run before the parent does.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import socket
import threading
from concurrent.futures import Future
from pathlib import Path

from benches import confinement
from benches.long_lived import imported_for_good
from results_schema import Plan
from results_schema.kernel_contract import BUILD_FAILED_SUFFIX

# What the fork server imports before it forks any worker: torch and numpy, frozen. The
# server skips a name that fails to import, silently, and finds `benches` through
# PYTHONPATH or the install only (Python 3.11's server ignores the parent's sys.path):
# torch and numpy by name after it, so that they are preloaded in any case.
SERVER_PRELOAD = ["benches.server_preload", "torch", "numpy"]

# What a worker is started with: (kernel JSON, tree, device, flush_l2) -> its (process,
# pipe), once started (prestart starts them in the background).
_started: dict[tuple[str, str, str, bool], Future] = {}


def payload_root() -> Path:
    """The folder holding benches/ and the user kernel trees beside it."""
    return Path(__file__).resolve().parent.parent


def serve(
    conn, environ: dict[str, str], kernel_json: str, tree: str, device: str, flush_l2: bool
) -> None:
    """The child's entry: the worker module imported there only. multiprocessing gives the
    child the parent's sys.path and folder at its start; the environment, the server's
    (the parent's when the server started), is set here to the parent's at this start, as
    a fresh interpreter would have it."""
    os.environ.clear()
    os.environ.update(environ)
    # Where the run confines kernels, the tree's own unprivileged user from here on.
    confinement.enter_kernel_account(tree)
    from benches import worker

    worker.serve(conn, kernel_json, tree, device, flush_l2)


def start(args: tuple[str, str, str, bool], name: str, environ: dict[str, str] | None = None):
    """A new worker process started with `args` and `environ` (this process's environment
    now, by default); returns (process, the parent's pipe end). The first start of a
    parent waits for the server's import of torch."""
    # Never a fork of this process: it may hold a CUDA context.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SERVER_PRELOAD)
    parent, child = context.Pipe()
    environ = dict(os.environ) if environ is None else environ
    process = context.Process(target=serve, args=(child, environ, *args), name=name, daemon=True)
    process.start()
    child.close()
    return process, parent


def _start_in_background(work: list[tuple[tuple[str, str, str, bool], str]]) -> None:
    """Starts each (args, name) in one thread, so that the parent imports torch meanwhile
    (the first start waits for the server's own import), with the environment of now."""
    environ = dict(os.environ)

    def run() -> None:
        for args, name in work:
            try:
                _started[args].set_result(start(args, name, environ))
            except BaseException as exc:  # adopt() says None; the caller starts its own
                _started[args].set_exception(exc)

    threading.Thread(target=run, name="bench-worker-prestart", daemon=True).start()


def prestart(plan: Plan, identities: list[str], root: Path | None = None) -> int:
    """A worker started now for each kernel tree of `plan` among `identities` whose build
    did not fail; returns how many were started."""
    device = "cuda" if plan.device == "cuda" else "cpu"
    work = []
    for kernel in plan.user_kernels:
        tree = (root or payload_root()) / kernel.directory
        if (
            kernel.identity not in identities
            or (tree.parent / (tree.name + BUILD_FAILED_SUFFIX)).exists()
        ):
            continue
        args = (kernel.model_dump_json(), str(tree), device, plan.flush_l2)
        if args not in _started:
            _started[args] = Future()
            work.append((args, f"bench-worker-{kernel.identity}"))
    if work:
        if device == "cpu":
            serve_forks_from_here()
        _start_in_background(work)
    return len(work)


# What multiprocessing's ForkServer holds of a running server, in the Pythons this was written
# against (3.10-3.13.0); a later one that adds to it (3.14's authentication key) starts its
# server itself.
_SERVER_STATE = {
    "_forkserver_address",
    "_forkserver_alive_fd",
    "_forkserver_pid",
    "_inherited_fds",
    "_lock",
    "_preload_modules",
}


def serve_forks_from_here() -> bool:
    """Makes a fork of this process, once it imported SERVER_PRELOAD, multiprocessing's fork
    server for the workers it starts from now on (what `ForkServer.ensure_running` does, but
    forked instead of started: no second import of torch); returns whether it did."""
    from multiprocessing import connection, forkserver, resource_tracker, util

    server = forkserver._forkserver
    if (
        threading.active_count() > 1
        or set(vars(server)) != _SERVER_STATE
        or server._forkserver_pid is not None
    ):
        return False
    with imported_for_good():
        for name in SERVER_PRELOAD:
            importlib.import_module(name)
    resource_tracker.ensure_running()
    # Not under server._lock (a fork would copy it held); no other thread runs here.
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        if not util.is_abstract_socket_namespace(address):
            os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _serve(listener.fileno(), alive_r)
        os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
    return True


def _serve(listener: int, alive_r: int) -> None:
    """The forked server's whole life: the files a started server has, then its loop, then
    an exit that runs nothing of the parent's (no atexit handler, no finalizer)."""
    from multiprocessing import forkserver

    try:
        keep = sorted({listener, alive_r})
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, os.sysconf("SC_OPEN_MAX"))
        forkserver.main(listener, alive_r, [])
    finally:
        os._exit(0)


def adopt(args: tuple[str, str, str, bool]):
    """The (process, pipe) prestarted with exactly `args` and still alive, taken (a second
    call gets None), or None."""
    starting = _started.pop(args, None)
    if starting is None or starting.exception() is not None:
        return None
    process, conn = started = starting.result()
    if not process.is_alive() and not conn.poll():
        conn.close()  # died before saying anything: the caller starts another
        process.join(timeout=10)
        return None
    return started
