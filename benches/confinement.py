"""Kernel code kept to itself (docs/security.md, "No tree writes another").

On a machine the run owns (gce, batch: the startup script runs as root there) each kernel
tree is built and run as an unprivileged user of its own, so bench's harness, the other
trees and the run's results are read-only to it; everywhere, nothing a build command or a
kernel's worker starts outlives the step that started it.

In the startup script this file is a program, run by the machine's python3 with -I -S (the
standard library alone: nothing of the tree it confines, or of the run's environment, is
imported):

    python confinement.py run --phase build --tree FOLDER [--user USER --home DIR]
        [--sweep-user USER...] [--output FILE] [--report FILE] [--grace SECONDS] -- COMMAND...
    python confinement.py sweep --phase finish --user USER... [--report FILE]

`run` makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER, no root needed), so
that a descendant that double-forks or calls setsid is reparented to it, not to init; runs
COMMAND (as USER where given: no supplementary groups, USER's gid and uid, no new
privileges, HOME and TMPDIR in DIR); forwards TERM, INT and HUP to it; and once it ended,
stops then kills every descendant still running and every process of USER (and of each
--sweep-user), names each (pid and command line) on its output and in REPORT
(leftovers.json: the manifest's `leftovers`), and exits with COMMAND's exit code. `sweep`
does the last part alone.

In the payload: `enter_kernel_account(tree)` in a kernel's worker before it imports the
tree (benches/worker_start.serve), and `end_kernel_processes(tree)` for the harness once it
ended a worker of that tree.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

# Set by the startup script where the run confines kernels: "FOLDER=USER ..." (the tree's
# folder in the payload, the unprivileged user it is built and run as). A kernel's own
# contract env cannot set it: BENCH_* names are bench's (docs/kernel-contract.md).
KERNEL_USERS_ENV = "BENCH_KERNEL_USERS"
# Set by `run` for its command: the report `end_kernel_processes` appends to.
LEFTOVERS_ENV = "BENCH_LEFTOVERS_FILE"
# What a worker is told of confinement, all of it: a worker of the harness's own (the
# calibration call's) is started without them, and runs as the harness does.
WORKER_SETTINGS = (KERNEL_USERS_ENV, LEFTOVERS_ENV)
# A tree's private home (HOME and TMPDIR: caches such as Triton's, pip's) and its own
# python environment (what its requirements and its build install), beside its folder.
HOME_SUFFIX = ".home"
ENVIRONMENT_SUFFIX = ".venv"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
# Kept from the caller's environment when a command drops to a kernel user: the ones that
# name the caller's own folders would point it at root's.
_HOME_VARIABLES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "MAIL")
# The grants launch signed for the run's own objects (the gce script's RUN_PAYLOAD_URL and
# RUN_UPLOAD_*: orchestrator/backends/gce/signing.py), which its phases export for their
# uploads. No kernel holds them: with them its code could write its run's results while it
# ran (a manifest of its own, left standing should the run end before the harness's).
_GRANT_PREFIXES = ("RUN_PAYLOAD_URL", "RUN_UPLOAD_")
_SWEEP_ROUNDS = 100
# A process inside execve answers an empty command line and environment until its new
# image's are mapped: 131 of 300 reads of a child's environ right after Popen returned, on
# a 2-core machine (2026-11-30). An empty answer is read again this many times, 10 ms
# apart, before it is believed (kernel threads, and processes started with `env -i`).
EXEC_REREADS = 20
NAMING_PATIENCE_SECONDS = 1.0  # the most a sweep spends reading empty command lines again
_LOGGED_NAMES = 10


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}): {os.strerror(error)}")


def become_subreaper() -> None:
    """Orphaned descendants of this process are reparented to it, not to init."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


# --- dropping privileges -------------------------------------------------------------------


def drop_privileges(user: str) -> None:
    """Become `user` for good: no supplementary groups, its group, its uid (real, effective
    and saved), and no way back through a setuid program. Needs root; fails loudly."""
    account = pwd.getpwnam(user)
    if account.pw_uid == 0:
        raise PermissionError(f"{user} is root: refusing it as a kernel user")
    if os.geteuid() != 0:
        raise PermissionError(f"cannot become {user}: this process is not root (uid {os.getuid()})")
    os.setgroups([])
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise PermissionError(f"still able to become root after dropping to {user}")


def account_environment(environ: dict, user: str, home: str) -> dict:
    """`environ` as `user` should have it: its home for HOME and TMPDIR (per tree, so that
    no tree's caches are another's), its name, none of the caller's own folders, none of
    the run's grants."""
    kept = {
        k: v
        for k, v in environ.items()
        if k not in _HOME_VARIABLES and not k.startswith(_GRANT_PREFIXES)
    }
    return {**kept, "HOME": home, "TMPDIR": home, "USER": user, "LOGNAME": user}


def kernel_users(value: str | None) -> dict[str, str]:
    """FOLDER=USER words as a mapping."""
    pairs = (word.split("=", 1) for word in (value or "").split())
    return {folder: user for folder, user in pairs}


def enter_kernel_account(tree: str) -> None:
    """In a kernel's worker, before its tree is imported: on a run that confines kernels
    (KERNEL_USERS_ENV set, by the startup script only) become the tree's own user, with its
    home and its own python environment first on sys.path; elsewhere nothing. A tree the
    setting does not name is refused, never run as root."""
    users = os.environ.pop(KERNEL_USERS_ENV, None)
    os.environ.pop(LEFTOVERS_ENV, None)
    if users is None:
        return
    folder = Path(tree).name
    user = kernel_users(users).get(folder)
    if user is None:
        raise PermissionError(f"no kernel user for tree {folder}: refusing to run it")
    drop_privileges(user)
    environ = account_environment(dict(os.environ), user, tree + HOME_SUFFIX)
    os.environ.clear()  # what account_environment left out goes too, not only what it set
    os.environ.update(environ)
    _use_tree_environment(Path(tree + ENVIRONMENT_SUFFIX))


def _use_tree_environment(venv: Path) -> None:
    """The tree's own packages (its requirements, a `pip install -e .` of its build) ahead
    of the run's, with their .pth files; nothing where the tree has none."""
    import site

    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    packages = venv / "lib" / version / "site-packages"
    if packages.is_dir():
        sys.path.insert(0, str(packages))
        site.addsitedir(str(packages))
        os.environ["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}"


# --- processes left behind -----------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str, int, int]]:
    """pid -> (parent pid, state, real uid, effective uid) of every process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = proc_stat_fields(entry)
            with open(f"/proc/{entry}/status", "rb") as f:
                uids = next(line for line in f if line.startswith(b"Uid:")).split()
        except (OSError, IndexError, StopIteration):
            continue  # it ended meanwhile
        found[int(entry)] = (int(fields[1]), fields[0].decode(), int(uids[1]), int(uids[2]))
    return found


def proc_stat_fields(pid: int | str) -> list[bytes]:
    """/proc/<pid>/stat's fields after the command name (which may itself hold spaces or
    parentheses): [state, ppid, pgrp, session, ...]."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()


def proc_file(pid: int | str, name: str, limit: int = -1, rereads: int = EXEC_REREADS) -> bytes:
    """/proc/<pid>/<name> of a command line or an environment, past an exec under way."""
    for _ in range(rereads):
        with open(f"/proc/{pid}/{name}", "rb") as f:
            found = f.read(limit)
        if found:
            return found
        time.sleep(0.01)
    return b""


def command_line(pid: int, patient: bool = True) -> str:
    """The process's command line as one line of text (a kernel thread's: its name); an
    empty one read once only, unless `patient`."""
    try:
        raw = proc_file(pid, "cmdline", 4096, rereads=EXEC_REREADS if patient else 1)
        if not raw:
            with open(f"/proc/{pid}/comm", "rb") as f:
                raw = b"[" + f.read().strip() + b"]"
    except OSError:
        return "?"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _descendants(table: dict, root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, pending = set(), [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _left_over(uids: frozenset[int], descendants: bool = True) -> list[int]:
    """Every live process of `uids` and (with `descendants`) this process's live
    descendants, but this one."""
    table = _processes()
    me = os.getpid()
    chosen = {pid for pid, (_, _, real, effective) in table.items() if {real, effective} & uids}
    if descendants:
        chosen |= _descendants(table, me)
    return [pid for pid in chosen if pid != me and table[pid][1] not in ("Z", "X")]


def end_left_over(uids: frozenset[int] = frozenset(), reap: bool = True) -> dict[int, str]:
    """Stops every process `_left_over` finds, round after round until a round finds none
    new (a stopped process forks no more), then kills them all; pid -> command line. With
    `reap` (the program, where every child is a leftover) this process's descendants too,
    and every child's exit is collected; without it (the harness, whose other children, its
    fork server and the other workers, are its own) only the processes of `uids`."""
    stopped: dict[int, bool] = {}  # pid -> whether it is ours to end
    for _ in range(_SWEEP_ROUNDS):
        new = [pid for pid in _left_over(uids, descendants=reap) if pid not in stopped]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            except PermissionError:
                stopped[pid] = False
            else:
                stopped[pid] = True
    # Named once stopped: one caught inside its exec stops when the exec is done, and is
    # named by its new image. An empty command line is read again only within the sweep's
    # patience: however many answer empty, the sweep is held up a second at most.
    patience = time.monotonic() + NAMING_PATIENCE_SECONDS
    named = {}
    for pid, ours in stopped.items():
        command = command_line(pid, patient=time.monotonic() < patience)
        named[pid] = command if ours else f"{command} (not ours to end)"
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if reap:
        _reap()
    return named


def _reap(timeout: float = 2.0) -> None:
    """Collect the exit of every child (orphans reparented here included)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def wait_for_descendants(grace: float) -> None:
    """Give descendants that are ending anyway `grace` seconds to end (the harness's fork
    server and resource tracker close when their parent's pipes do)."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _left_over(frozenset()):
        _reap(0.0)
        time.sleep(0.05)


def report(ended: dict[int, str], phase: str, tree: str | None, path: str | None) -> None:
    """One line on this process's output, and a sweep appended to the report file."""
    if not ended:
        return
    named = [f"{pid} ({command})" for pid, command in sorted(ended.items())]
    more = len(named) - _LOGGED_NAMES
    shown = ", ".join(named[:_LOGGED_NAMES]) + (f" and {more} more" if more > 0 else "")
    whose = f"{phase} of {tree}" if tree else phase
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"[bench {stamp}] leftovers: {whose} left {len(named)} running; ended {shown}")
    sys.stdout.flush()
    if path:
        processes = [{"pid": pid, "command": command} for pid, command in sorted(ended.items())]
        sweep = {"phase": phase, "tree": tree, "ended": len(processes), "processes": processes}
        _append_json(path, sweep)


def _append_json(path: str, item: dict) -> None:
    # Trees build at once (user_build.sh.j2): one sweep read, appended and written at a time.
    with open(f"{path}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, encoding="utf-8") as f:
                items = json.load(f)
        except (OSError, ValueError):
            items = []
        items.append(item)
        part = f"{path}.part{os.getpid()}"
        with open(part, "w", encoding="utf-8") as f:
            json.dump(items, f)
        os.replace(part, path)


def end_kernel_processes(tree: str) -> dict[int, str]:
    """For the harness, once it ended a worker of `tree`: every process of the tree's
    kernel user ended and reported (pid -> command line). Only a run that confines
    kernels has such a user; elsewhere this ends nothing (the measure phase's `run` ends
    what the workers left when the phase ends)."""
    user = kernel_users(os.environ.get(KERNEL_USERS_ENV)).get(Path(tree).name)
    if user is None:
        return {}
    ended = end_left_over(frozenset({pwd.getpwnam(user).pw_uid}) - {0}, reap=False)
    report(ended, "measure", Path(tree).name, os.environ.get(LEFTOVERS_ENV))
    return ended


# --- the program ---------------------------------------------------------------------------


def _prepare_child(user: str | None) -> None:
    """In the child, between fork and exec: the kernel user, then death with the parent
    (setuid clears a parent-death signal, so it is set after)."""
    if user is not None:
        drop_privileges(user)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def run(args: argparse.Namespace) -> int:
    become_subreaper()
    environ = dict(os.environ)
    if args.report:
        environ[LEFTOVERS_ENV] = args.report
    if args.user:
        environ = account_environment(environ, args.user, args.home)
        if os.geteuid() != 0:  # said here: a failure between fork and exec has no message
            print(f"confinement: cannot run {args.command[0]} as {args.user}: not root")
            return 126
    # A signal that comes before the child exists is held and sent once it does: installed
    # after the spawn, the handlers left a window in which a TERM (preemption, stop-all)
    # ended this process by default and never reached the command (seen on a loaded 2-core
    # machine: the command had printed, the wrapper died by SIGTERM).
    held: list[int] = []
    started: list[subprocess.Popen] = []

    def forward(signum: int, frame) -> None:
        if not started:
            held.append(signum)
            return
        try:
            started[0].send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    output = open(args.output, "ab") if args.output else None
    try:
        # preexec_fn is safe here: this process runs one thread.
        child = subprocess.Popen(
            args.command,
            env=environ,
            stdout=output,
            stderr=output,
            preexec_fn=lambda: _prepare_child(args.user),
        )
    finally:
        if output is not None:
            output.close()
    started.append(child)
    for signum in held:
        forward(signum, None)
    code = child.wait()
    wait_for_descendants(args.grace)
    ended = end_left_over(_uids([*args.sweep_user, *([args.user] if args.user else [])]))
    report(ended, args.phase, args.tree, args.report)
    return code if code >= 0 else 128 - code


def sweep(args: argparse.Namespace) -> int:
    report(end_left_over(_uids(args.user)), args.phase, args.tree, args.report)
    return 0


def _uids(users) -> frozenset[int]:
    return frozenset(pwd.getpwnam(user).pw_uid for user in users or []) - {0}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="confinement.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run_parser = sub.add_parser("run", help="run a command, then end what it left running")
    sweep_parser = sub.add_parser("sweep", help="end every process of kernel users")
    for p in (run_parser, sweep_parser):
        p.add_argument("--phase", required=True, choices=("build", "measure", "finish"))
        p.add_argument("--tree", help="the kernel tree's folder the step is for")
        p.add_argument("--report", help="leftovers.json to append a sweep to")
    run_parser.add_argument("--user", help="the unprivileged user to run the command as")
    run_parser.add_argument("--home", help="that user's HOME and TMPDIR")
    run_parser.add_argument(
        "--sweep-user",
        action="append",
        default=[],
        help="a user whose every process is ended with the command's leftovers (repeatable)",
    )
    run_parser.add_argument("--output", help="append the command's output to this file")
    run_parser.add_argument(
        "--grace", type=float, default=0.0, help="seconds descendants get to end on their own"
    )
    run_parser.add_argument("command", nargs="+", help="the command, after --")
    sweep_parser.add_argument("--user", nargs="*", default=[], help="kernel users")
    args = parser.parse_args(argv)
    if args.action == "run" and bool(args.user) != bool(args.home):
        parser.error("--user and --home go together")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run(args) if args.action == "run" else sweep(args)


if __name__ == "__main__":
    sys.exit(main())
