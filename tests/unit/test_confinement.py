"""benches/confinement.py with real processes: what a step leaves running is ended and named
(no root needed: the child subreaper), and, as root, a kernel user that keeps nothing of
root's (its uid and gid, no groups, no way back, its own home). Tests that drop privileges
skip without root, and the refusals a non-root process meets are tested either way."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benches import confinement
from tests.limits import HANG_SECONDS
from tests.processes import inside_exec, processes_running, uid_of

TOOL = Path(confinement.__file__)
NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="dropping to a kernel user needs root (the VM's script is root)"
)


def tool(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """The program as the startup script runs it: the standard library alone."""
    return subprocess.run(
        [sys.executable, "-I", "-S", str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        **kwargs,
    )


def test_a_double_forked_process_is_ended_named_and_the_exit_code_kept(tmp_path, marker):
    report = tmp_path / "leftovers.json"
    done = tool(
        "run", "--phase", "build", "--tree", "user_kernel", "--report", str(report), "--",
        "sh", "-c", f"(setsid sleep {marker}1 &) ; exit 3",
    )  # fmt: skip

    assert done.returncode == 3
    assert processes_running(f"sleep {marker}") == {}
    (sweep,) = json.loads(report.read_text())
    (left,) = sweep["processes"]
    assert (sweep["phase"], sweep["tree"], sweep["ended"]) == ("build", "user_kernel", 1)
    assert f"sleep {marker}1" in left["command"]
    assert f"leftovers: build of user_kernel left 1 running; ended {left['pid']} (" in done.stdout


def test_a_leftover_caught_inside_its_exec_is_named_by_its_new_image(marker):
    """Inside its exec a process's command line reads empty until the new image's is
    mapped (benches.confinement.EXEC_REREADS): CI's confined-VM test once found the sleep a
    build left behind named otherwise. The window is made to last here: the first reads
    answer empty, as they do inside the exec."""
    process = subprocess.Popen(["sleep", marker])
    try:
        while confinement.command_line(process.pid) != f"sleep {marker}":
            time.sleep(0.01)  # its own exec done, before the one made to last
        with inside_exec(process.pid, "cmdline") as left:
            named = confinement.command_line(process.pid)
    finally:
        process.kill()
        process.wait()
    assert set(left.values()) == {0}  # every empty answer was given
    assert named == f"sleep {marker}"


# A sweep of CHILDREN sleeps whose command lines all read empty, its patience spent at once:
# each is read once, then named by its name (not read again and again, as a kernel that
# blanked the command lines of many processes would have it).
IMPATIENT_SWEEP = """
import builtins, collections, io, json, subprocess, sys, time
from benches import confinement
children = [subprocess.Popen(["sleep", sys.argv[1]]) for _ in range(int(sys.argv[2]))]
while any(open(f"/proc/{c.pid}/comm").read() != "sleep\\n" for c in children):
    time.sleep(0.01)  # each past its exec
real_open, reads = builtins.open, collections.Counter()
def opening(path, *args, **kwargs):
    if str(path).endswith("/cmdline"):
        reads[str(path)] += 1
        return io.BytesIO(b"")
    return real_open(path, *args, **kwargs)
builtins.open = opening
confinement.NAMING_PATIENCE_SECONDS = 0.0
named = confinement.end_left_over()
builtins.open = real_open
print(json.dumps({"named": sorted(named.values()), "reads": sorted(reads.values())}))
"""


def test_a_sweep_reads_empty_command_lines_again_only_within_its_patience(marker):
    children = 5
    done = subprocess.run(
        [sys.executable, "-c", IMPATIENT_SWEEP, marker, str(children)],
        capture_output=True, text=True, timeout=HANG_SECONDS, cwd=TOOL.parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {"named": ["[sleep]"] * children, "reads": [1] * children}
    assert processes_running(f"sleep {marker}") == {}


def test_nothing_left_is_nothing_reported(tmp_path):
    report = tmp_path / "leftovers.json"
    done = tool("run", "--phase", "build", "--report", str(report), "--", "true")
    assert done.returncode == 0 and "leftovers" not in done.stdout and not report.exists()


@pytest.mark.slow
def test_a_process_that_keeps_forking_is_stopped_before_it_is_killed(tmp_path, marker):
    """A leftover that starts another process every few milliseconds: each round stops what
    it finds, so the last round finds none new and every one of them is killed."""
    spawner = f"i=0; while [ $i -lt 3000 ]; do (setsid sleep {marker}2 &); i=$((i+1)); done"
    done = tool(
        "run", "--phase", "build", "--report", str(tmp_path / "r.json"), "--",
        "sh", "-c", f"(setsid sh -c '{spawner}' &) ; sleep 0.3",
    )  # fmt: skip
    assert done.returncode == 0
    time.sleep(0.2)  # a process missed would have started more by now
    assert processes_running(f"sleep {marker}") == {}
    assert json.loads((tmp_path / "r.json").read_text())[0]["ended"] >= 2


def test_a_term_reaches_the_command_and_what_it_left_still_ends(tmp_path, marker):
    """The phase's TERM (preemption, stop-all) reaches the harness through the program,
    and the leftovers end as on a normal exit."""
    script = f"(setsid sleep {marker}3 &); trap 'exit 143' TERM; echo ready; sleep 60 & wait"
    program = [sys.executable, "-I", "-S", str(TOOL), "run", "--phase", "measure", "--"]
    process = subprocess.Popen([*program, "sh", "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    # The leftover's exec of sleep done, so that it is named by it: a TERM between setsid's
    # start and its exec found it as "[setsid]" once, on a loaded machine.
    limit = time.monotonic() + HANG_SECONDS
    while not any(
        text.startswith("sleep ") for text in processes_running(f"sleep {marker}3").values()
    ):
        assert time.monotonic() < limit, "the leftover never started"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=HANG_SECONDS) == 143
    assert f"sleep {marker}3" in process.stdout.read()
    assert processes_running(f"sleep {marker}") == {}


# The program with a TERM delivered to itself the instant its child exists, before it could
# have done anything else: the window a loaded machine opens at random.
TERM_AT_SPAWN = """
import os, signal, subprocess, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import confinement

class TermAtSpawn(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

confinement.subprocess.Popen = TermAtSpawn
sys.exit(confinement.main(sys.argv[2:]))
"""


def test_a_term_that_comes_as_the_command_starts_reaches_it():
    """A TERM between the spawn and anything after it is held and sent to the command once
    it exists (before, the program died by the signal's default and the command ran on:
    exit -15 seen under load)."""
    script = "trap 'exit 143' TERM; sleep 60 & wait"
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            TERM_AT_SPAWN,
            str(TOOL),
            "run",
            "--phase",
            "measure",
            "--",
            "sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 143, (done.returncode, done.stderr[-500:])


# The run's grants as the gce script exports them (orchestrator/backends/gce/signing.py).
GRANTS = {
    "RUN_PAYLOAD_URL": "https://storage.example/b/p?X-Goog-Signature=ab",
    "RUN_UPLOAD_URL": "https://storage.example/b",
    "RUN_UPLOAD_FIELD_NAMES": "policy x-goog-signature",
    "RUN_UPLOAD_FIELD_policy": "eyJjb25kaXRpb25zIjpbXX0=",
    "RUN_UPLOAD_FIELD_x_goog_signature": "ab",
}


def test_a_kernel_accounts_environment_holds_none_of_the_runs_grants():
    """With the run's upload grant a kernel could write its run's results while it ran."""
    environ = {**GRANTS, "PATH": "/usr/bin", "XDG_CACHE_HOME": "/root/.cache", "HOME": "/root"}
    kept = confinement.account_environment(environ, "k", "/trees/user_kernel.home")
    assert not set(GRANTS) & set(kept)
    assert kept["PATH"] == "/usr/bin" and kept["HOME"] == "/trees/user_kernel.home"
    assert "XDG_CACHE_HOME" not in kept


@needs_root
def test_a_build_and_a_worker_as_the_kernel_user_see_none_of_the_runs_grants(
    tmp_path, shared_dir, kernel_user
):
    """The build through the program, the worker through enter_kernel_account (which only
    added to the environment before: what it left out stayed)."""
    home = shared_dir / "home"
    home.mkdir()
    env = {**os.environ, **GRANTS, "XDG_CACHE_HOME": "/root/.cache"}
    done = tool(
        "run", "--phase", "build", "--user", kernel_user, "--home", str(home), "--",
        "/usr/bin/env", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith(tuple(GRANTS))]
    worker = (
        "import json, os, sys\n"
        "sys.path.insert(0, os.path.dirname(sys.argv[1]))\n"
        "import confinement\n"
        "confinement.enter_kernel_account(sys.argv[2])\n"
        "print(json.dumps(sorted(os.environ)))\n"
    )
    tree = shared_dir / "user_kernel"
    tree.mkdir()
    env[confinement.KERNEL_USERS_ENV] = f"user_kernel={kernel_user}"
    entered = subprocess.run(
        [sys.executable, "-I", "-S", "-c", worker, str(TOOL), str(tree)],
        capture_output=True, text=True, timeout=HANG_SECONDS, env=env,
    )  # fmt: skip
    assert entered.returncode == 0, entered.stderr
    names = set(json.loads(entered.stdout))
    assert not set(GRANTS) & names and "XDG_CACHE_HOME" not in names
    assert "PATH" in names


# What a command run as the kernel user finds itself to be, one fact a line.
PROBE = """\
import os, sys
print(os.getuid(), os.getgid(), os.getgroups())
print(os.environ["HOME"], os.environ["TMPDIR"], os.environ["USER"])
print([line for line in open("/proc/self/status") if line.startswith("NoNewPrivs")][0].split()[1])
try:
    os.setuid(0)
except PermissionError:
    print("no way back")
try:
    open(sys.argv[1], "w")
except PermissionError:
    print("root's folder closed")
"""


@pytest.mark.slow
@needs_root
def test_a_command_run_as_a_kernel_user_keeps_nothing_of_roots(shared_dir, kernel_user):
    home = shared_dir / "home"
    home.mkdir()
    (shared_dir / "roots").mkdir(mode=0o755)
    done = tool(
        "run", "--phase", "build", "--user", kernel_user, "--home", str(home), "--",
        "/usr/bin/python3", "-I", "-c", PROBE, str(shared_dir / "roots" / "x"),
    )  # fmt: skip
    account = pwd.getpwnam(kernel_user)
    assert done.stdout.splitlines() == [
        f"{account.pw_uid} {account.pw_gid} []",  # its own group, no supplementary one
        f"{home} {home} {kernel_user}",
        "1",  # no new privileges: a set-uid program grants it none
        "no way back",
        "root's folder closed",
    ], done.stderr


@needs_root
def test_every_process_of_the_kernel_user_ends_with_the_step(tmp_path, kernel_user, marker):
    """Not only descendants: a process of the kernel user started elsewhere (a job it got
    another service to run, say) ends too."""
    uid = uid_of(kernel_user)
    elsewhere = subprocess.Popen(["sleep", f"{marker}4"], user=uid, start_new_session=True)
    home = tmp_path / "home"
    home.mkdir()
    done = tool(
        "run", "--phase", "build", "--user", kernel_user, "--home", str(home),
        "--report", str(tmp_path / "r.json"), "--", "true",
    )  # fmt: skip
    assert done.returncode == 0
    assert elsewhere.wait(timeout=HANG_SECONDS) == -signal.SIGKILL
    (sweep,) = json.loads((tmp_path / "r.json").read_text())
    assert sweep["processes"] == [{"pid": elsewhere.pid, "command": f"sleep {marker}4"}]


@needs_root
def test_the_harness_ends_a_trees_processes_once_it_ended_its_worker(
    tmp_path, kernel_user, marker, monkeypatch
):
    uid = uid_of(kernel_user)
    left = subprocess.Popen(["sleep", f"{marker}5"], user=uid, start_new_session=True)
    monkeypatch.setenv(confinement.KERNEL_USERS_ENV, f"other_tree=nobody user_kernel={kernel_user}")
    monkeypatch.setenv(confinement.LEFTOVERS_ENV, str(tmp_path / "r.json"))
    assert confinement.end_kernel_processes(str(tmp_path / "user_kernel")) == {
        left.pid: f"sleep {marker}5"
    }
    assert left.wait(timeout=HANG_SECONDS) == -signal.SIGKILL
    (sweep,) = json.loads((tmp_path / "r.json").read_text())
    assert (sweep["phase"], sweep["tree"]) == ("measure", "user_kernel")


def test_the_harness_ends_nothing_where_the_run_confines_no_kernel(monkeypatch, tmp_path):
    monkeypatch.delenv(confinement.KERNEL_USERS_ENV, raising=False)
    assert confinement.end_kernel_processes(str(tmp_path / "user_kernel")) == {}


# --- a worker entering its tree's account (benches/worker_start.serve) --------------------

ENTER = (
    "import json, os, sys\n"
    "from benches.confinement import enter_kernel_account\n"
    "try:\n"
    "    enter_kernel_account(sys.argv[1])\n"
    "except PermissionError as e:\n"
    "    print(json.dumps({'refused': str(e)})); sys.exit()\n"
    "print(json.dumps({'uid': os.getuid(), 'home': os.environ.get('HOME'), 'path0': sys.path[0],"
    " 'left': sorted(k for k in os.environ if k.startswith('BENCH_'))}))\n"
)


def enter(tree: Path, users: str | None, python: str = sys.executable, **kwargs) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    env["PYTHONPATH"] = str(Path(confinement.__file__).parents[1])
    if users is not None:
        env[confinement.KERNEL_USERS_ENV] = users
        env[confinement.LEFTOVERS_ENV] = "/somewhere/leftovers.json"
    done = subprocess.run(
        [python, "-c", ENTER, str(tree)],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        **kwargs,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_worker_of_an_unconfined_run_stays_who_it_is(tmp_path):
    seen = enter(tmp_path / "user_kernel", None)
    assert seen["uid"] == os.getuid() and seen["left"] == []


def test_a_tree_the_setting_does_not_name_is_refused_not_run(tmp_path):
    seen = enter(tmp_path / "user_kernel", "user_kernel_baseline=nobody")
    assert seen == {"refused": "no kernel user for tree user_kernel: refusing to run it"}


def test_a_worker_that_is_not_root_cannot_drop_and_refuses_to_run(tmp_path):
    """Fails closed: a run that confines kernels never runs a tree as the harness's user."""
    # As root, the test runs it as nobody, with a python nobody may run (the standard
    # library is all the module needs).
    as_non_root = {"user": NOBODY, "python": "/usr/bin/python3"} if os.geteuid() == 0 else {}
    seen = enter(tmp_path / "user_kernel", "user_kernel=nobody", cwd="/", **as_non_root)
    assert seen["refused"].startswith("cannot become nobody: this process is not root")


@needs_root
def test_a_worker_becomes_its_trees_user_with_its_home_and_environment(shared_dir, kernel_user):
    tree = shared_dir / "user_kernel"
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    packages = Path(f"{tree}.venv") / "lib" / version / "site-packages"
    packages.mkdir(parents=True)
    seen = enter(tree, f"user_kernel={kernel_user}")
    uid = uid_of(kernel_user)
    assert seen == {"uid": uid, "home": f"{tree}.home", "path0": str(packages), "left": []}


def test_a_sweep_of_thousands_is_counted_whole_and_named_in_part_in_the_manifest(tmp_path):
    """What a fork bomb leaves: the manifest stays valid and bounded, its count whole."""
    from results_schema import Manifest
    from results_schema.record import MAX_COMMAND_CHARS, MAX_NAMED_LEFTOVERS
    from results_schema.record import main as record

    processes = [{"pid": 100 + i, "command": "x" * 5000} for i in range(3000)]
    sweep = {"phase": "build", "tree": "user_kernel", "ended": 3000, "processes": processes}
    (tmp_path / "leftovers.json").write_text(json.dumps([sweep]))
    args = ["manifest", "--dir", str(tmp_path), "--run-id", "20261129-000000-abcdef"]
    assert record([*args, "--exit-code", "0"]) == 0
    manifest = Manifest.model_validate_json((tmp_path / "manifest.json").read_text())
    (bounded,) = manifest.leftovers
    assert bounded.ended == 3000 and len(bounded.processes) == MAX_NAMED_LEFTOVERS
    assert {len(p.command) for p in bounded.processes} == {MAX_COMMAND_CHARS}
