"""No tree writes another (issue 48, item 2) on a machine the run owns: the gce startup
script, run as root by the Compute stand-in's VM, builds and runs each kernel tree of an
A/B run as an unprivileged user of its own. A hostile candidate's build and worker try to
rewrite the baseline and the harness, to write outside their tree, to read the run's log,
and leave processes behind: every write but into its own tree is refused, nothing it
started outlives its step, and the manifest says who each tree ran as.

It needs root (the script's useradd, chown and the privilege drop), and a python that
the kernel users may run: this test's own may live under a folder closed to others (pyenv
under /root), so a venv of the system's python of the same version stands in for the
VM's image python, this test's packages on its path. It creates the users bench-user-kernel
and bench-user-kernel-baseline and removes them after."""

from __future__ import annotations

import os
import shlex
import site
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from results_schema import Manifest
from tests.e2e.test_gce_cli import launched_run_id, plan_file
from tests.e2e.test_user_kernel import example_repository, git
from tests.e2e.test_user_kernel_build import with_build
from tests.processes import processes_running, uid_of

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
PYTHON = f"python{sys.version_info[0]}.{sys.version_info[1]}"
KERNEL_USERS = {
    "user_kernel": "bench-user-kernel",
    "user_kernel_baseline": "bench-user-kernel-baseline",
}

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="the confined path drops privileges, which needs root (a VM's startup script "
        "runs as root); tests/unit/test_confinement.py holds the non-root path",
    ),
]

# What the candidate's build tries, each as a shell command run in its own tree.
ATTEMPTS = {
    "baseline": "echo 'SLOWER = True' >> ../user_kernel_baseline/simple_attention/ops.py",
    "harness": "echo 'CpuClock = None' >> ../benches/timing.py",
    "payload-root": "echo 'import os' > ../sitecustomize.py",
    "run-folder": "touch ../../planted",
    "results": "touch ../../results/summary.csv",
    "log": "cat ../../logs/startup.log",
    "own-tree": "touch built-here",
}
HOSTILE_BUILD = """\
echo "build ran as uid=$(id -u)"
pip install --quiet --no-index --no-build-isolation --no-deps ./extra && echo "pip: installed"
attempt() { if (eval "$2") >/dev/null 2>&1; then echo "$1: done"; else echo "$1: refused"; fi; }
""" + "".join(f"attempt {name} {shlex.quote(cmd)}\n" for name, cmd in ATTEMPTS.items())
# A package the build installs with pip, as `pip install -e .` or a requirement would.
EXTRA_PROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "extra-mod"
version = "1.0"

[tool.setuptools]
py-modules = ["extra_mod"]
"""
# Appended to the candidate's module: what its worker sees, in its home.
HOSTILE_WORKER = """
import os as _os, pathlib as _pathlib, subprocess as _sp
_tree = _pathlib.Path(__file__).resolve().parents[1]
_seen = [f"worker ran as uid={_os.getuid()}"]
_baseline = _tree.parent / "user_kernel_baseline" / "simple_attention" / "ops.py"
for _name, _path in [("baseline", _baseline),
                     ("harness", _tree.parent / "benches" / "timing.py"),
                     ("own-tree", _tree / "written-by-worker")]:
    try:
        with open(_path, "a") as _f:
            _f.write("# worker\\n")
        _seen.append(f"{_name}: done")
    except OSError:
        _seen.append(f"{_name}: refused")
import extra_mod as _extra  # what its build installed: in its own environment
_seen.append(f"extra_mod from {_extra.__file__}")
(_pathlib.Path(_os.environ["HOME"]) / "worker.txt").write_text("\\n".join(_seen) + "\\n")
_sp.run(["sh", "-c", "setsid sleep MARKER2 &"])
"""


def python_others_may_run() -> Path | None:
    """A python of this one's version that an unprivileged user can run, or None."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if not os.access(candidate, os.X_OK):
            continue
        probe = [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        done = subprocess.run(probe, capture_output=True, text=True, user=NOBODY, check=False)
        if done.returncode == 0 and done.stdout.strip() == version:
            return Path(candidate)
    return None


@pytest.fixture
def vm_image(shared_dir):
    """PATH folders for the VM: a python the kernel users may run (this test's packages on
    its path, as an image's python has them) and an iptables that notes each rule."""
    base = python_others_may_run()
    if base is None:
        pytest.skip(f"no python {sys.version_info[0]}.{sys.version_info[1]} that others may run")
    venv = shared_dir / "image-python"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "lib" / PYTHON / "site-packages" / "bench-test.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    shims = shared_dir / "shims"
    shims.mkdir()
    rules = shared_dir / "iptables.log"
    iptables = shims / "iptables"
    # -C (is the rule there?) says no, as on a fresh VM; every other call is noted.
    iptables.write_text(
        f'#!/bin/sh\ncase " $* " in *" -C "*) exit 1 ;; esac\necho "$*" >> {rules}\n'
    )
    iptables.chmod(0o755)
    yield [str(venv / "bin"), str(shims)], rules
    for user in KERNEL_USERS.values():
        subprocess.run(["userdel", user], capture_output=True, check=False)


def test_each_tree_builds_and_runs_as_its_own_user_and_writes_only_its_own_tree(
    gce, vm_image, shared_dir, tmp_path, capsys, monkeypatch, marker
):
    vm_path, rules = vm_image
    gce.config.vm_path = vm_path
    monkeypatch.setenv("BENCH_VM_WORK_DIR", str(shared_dir / "vm"))
    repo = example_repository(tmp_path)
    git(repo, "commit", "-q", "--allow-empty", "-m", "the baseline")
    # Left by a shell of its own, so that whichever stage the sweep stops it at (that
    # shell's fork, setsid, the sleep) its command line holds the marker.
    leaves = shlex.quote(f"(setsid sleep {marker}1 &)")
    (repo / "hostile.sh").write_text(HOSTILE_BUILD + f"sh -c {leaves}\n")
    (repo / "extra").mkdir()
    (repo / "extra" / "extra_mod.py").write_text("VALUE = 1\n")
    (repo / "extra" / "pyproject.toml").write_text(EXTRA_PROJECT)
    ops = repo / "simple_attention" / "ops.py"
    ops.write_text(ops.read_text() + HOSTILE_WORKER.replace("MARKER2", f"{marker}2"))
    with_build(repo, "sh hostile.sh")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a hostile candidate")

    launch = ["launch", "--backend", "gce", "--budget", "1", "--kernel", str(repo)]
    main([*launch, "--baseline", "HEAD~1", "--plan", plan_file(tmp_path), "--wait"])
    run_id = launched_run_id(capsys)
    work = shared_dir / "vm" / run_id
    log = (work / "logs" / "startup.log").read_text()
    manifest = Manifest.model_validate_json((work / "manifest.json").read_text())

    assert manifest.status == "complete", manifest.reason + log[-3000:]
    assert "build ran as uid=0" not in log  # never root
    assert "Error processing" not in log and "pip: installed" in log
    uid = uid_of(KERNEL_USERS["user_kernel"])
    assert f"build ran as uid={uid}" in log
    for name in ATTEMPTS:
        assert f"{name}: {'done' if name == 'own-tree' else 'refused'}" in log, name
    seen = (work / "payload" / "user_kernel.home" / "worker.txt").read_text().splitlines()
    assert seen == [
        f"worker ran as uid={uid}",
        "baseline: refused",
        "harness: refused",
        "own-tree: refused",  # sealed once built
        f"extra_mod from {work}/payload/user_kernel.venv/lib/{PYTHON}/site-packages/extra_mod.py",
    ]
    # Never into the python the harness and the baseline run on.
    for folder in [*site.getsitepackages(), Path(vm_path[0]).parent]:
        assert not list(Path(folder).glob("**/extra_mod.py")), folder
    assert (work / "payload" / "benches" / "timing.py").read_bytes() == (
        REPO / "benches" / "timing.py"
    ).read_bytes()
    assert (
        "SLOWER"
        not in (
            work / "payload" / "user_kernel_baseline" / "simple_attention" / "ops.py"
        ).read_text()
    )
    assert not (work / "payload" / "sitecustomize.py").exists() and not (work / "planted").exists()

    assert manifest.containment.kernel_users == KERNEL_USERS
    for user in KERNEL_USERS.values():
        assert f"-w -I OUTPUT -d 169.254.169.254 -m owner --uid-owner {user} -j REJECT" in (
            rules.read_text()
        )
    checks = {(c.tree, c.stage) for c in manifest.trees if c.passed}
    assert {("harness", "measure"), ("user_kernel_baseline", "build")} <= checks
    assert {("user_kernel", "built"), ("user_kernel", "measure")} <= checks
    left = {(s.phase, s.tree): [p.command for p in s.processes] for s in manifest.leftovers}
    assert any(f"sleep {marker}1" in c for c in left[("build", "user_kernel")]), left
    assert any(f"sleep {marker}2" in c for s in left.values() for c in s), left
    assert processes_running(f"sleep {marker}") == {}
    assert main(["fetch", run_id]) == 0  # and its manifest passes the boundary
