"""Each tree of the payload checked just before use (results_schema/record.py `tree`): the
digest the controller computes as it packs a tree is the one the target computes from its
disk and fetch from the tarball; a changed, added or planted file fails the check in one
line; and the manifest's record of the checks is held at the trust boundary to the trees
and digests launch packed."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from pathlib import Path

import pytest

from orchestrator.boundary import LaunchedPayload, read_payload, with_launched_payload
from orchestrator.errors import ResultsError
from orchestrator.payload import build_payload
from results_schema import Manifest
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel
from results_schema.record import HARNESS_TREE, disk_tree_digest, main
from tests.unit.test_worker_start import kernel, plan_of

RUN_ID = "20261129-000000-abcdef"


@pytest.fixture
def launched(tmp_path):
    """A payload with two kernel trees, unpacked as the target unpacks it: (each tree's
    digest as the controller packed it, the payload's bytes, the run directory)."""
    trees = tmp_path / "trees"
    kernels = [
        kernel(trees, "k", "user_kernel"),
        kernel(trees, "k@baseline", "user_kernel_baseline"),
    ]
    packed = [(k.directory, files_of(trees / k.directory)) for k in kernels]
    payload = build_payload(plan_of(kernels), kernel_trees=packed)
    run_dir = tmp_path / "run"
    with tarfile.open(fileobj=io.BytesIO(payload.data), mode="r:gz") as tar:
        tar.extractall(run_dir / "payload", filter="data")
    return payload.tree_sha256s, payload.data, run_dir


def files_of(root: Path) -> tuple:
    return tuple(
        sorted(
            (p.relative_to(root).as_posix(), p.read_bytes()) for p in root.rglob("*") if p.is_file()
        )
    )


def check(run_dir: Path, tree: str, stage: str, expect: str = "") -> int:
    args = ["tree", "--dir", str(run_dir), "--run-id", RUN_ID, "--tree", tree, "--stage", stage]
    return main([*args, "--expect", expect, "--trees", "user_kernel", "user_kernel_baseline"])


def records(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "trees.json").read_text())


def test_checks_of_trees_building_at_once_each_keep_their_record(launched):
    """Trees build at once (user_build.sh.j2): their checks, each in a process of its own as
    the startup script runs them, all land in trees.json; none is lost to another's rewrite."""
    import subprocess
    import sys

    import results_schema.record

    digests, _, run_dir = launched
    tool = results_schema.record.__file__
    rounds = 12
    started = []
    for i in range(rounds):
        for tree in ("user_kernel", "user_kernel_baseline"):
            stage = "build" if i % 2 == 0 else "built"
            args = ["tree", "--dir", str(run_dir), "--run-id", RUN_ID, "--tree", tree]
            args += ["--stage", stage, "--expect", digests[tree]]
            started.append(subprocess.Popen([sys.executable, "-I", "-S", tool, *args]))
    assert [process.wait(timeout=60) for process in started] == [0] * len(started)
    kept = records(run_dir)
    assert len(kept) == 2 * rounds
    assert {r["tree"] for r in kept} == {"user_kernel", "user_kernel_baseline"}
    assert all(r["problem"] is None for r in kept)


def test_the_controller_the_target_and_fetch_agree_on_every_trees_digest(launched):
    digests, data, run_dir = launched
    assert set(digests) == {HARNESS_TREE, "user_kernel", "user_kernel_baseline"}
    for tree, sha in digests.items():
        assert disk_tree_digest(str(run_dir / "payload"), tree) == sha
    assert read_payload(data)[1] == digests


def test_a_tree_unchanged_since_launch_passes_and_is_recorded(launched, capsys):
    digests, _, run_dir = launched
    assert check(run_dir, "user_kernel", "build", digests["user_kernel"]) == 0
    assert records(run_dir) == [
        {
            "tree": "user_kernel",
            "stage": "build",
            "expected_sha256": digests["user_kernel"],
            "found_sha256": digests["user_kernel"],
            "problem": None,
        }
    ]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda tree: (tree / "pkg" / "ops.py").write_text("# faster\n"),
        lambda tree: (tree / "pkg" / "_fast.py").write_text("SLOW = True\n"),
        lambda tree: (
            (tree / "pkg" / "__pycache__").mkdir()
            or (tree / "pkg" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"planted")
        ),
        lambda tree: (
            (tree / "pkg" / "ops.py").unlink()
            or (tree / "pkg" / "ops.py").symlink_to("/etc/hostname")
        ),
    ],
    ids=["edited", "added", "planted-bytecode", "swapped-for-a-link"],
)
def test_a_tree_another_build_touched_fails_before_its_own_build(launched, capsys, tamper):
    digests, _, run_dir = launched
    tamper(run_dir / "payload" / "user_kernel_baseline")
    assert check(run_dir, "user_kernel_baseline", "build", digests["user_kernel_baseline"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("user_kernel_baseline changed since launch: its files' sha256 is ")
    assert line.endswith("before its build")
    assert records(run_dir)[-1]["problem"] == line


def test_a_tree_changed_after_its_build_fails_before_the_measure_phase(launched, capsys):
    digests, _, run_dir = launched
    assert check(run_dir, "user_kernel", "build", digests["user_kernel"]) == 0
    (run_dir / "payload" / "user_kernel" / "built.so").write_bytes(b"its build's output")
    assert check(run_dir, "user_kernel", "built") == 0
    assert check(run_dir, "user_kernel", "measure") == 0
    (run_dir / "payload" / "user_kernel" / "built.so").write_bytes(b"swapped later")
    assert check(run_dir, "user_kernel", "measure") == 1
    assert "user_kernel changed since its build" in capsys.readouterr().err
    assert [r["stage"] for r in records(run_dir)] == ["build", "built", "measure", "measure"]


def test_a_tree_never_checked_after_its_build_is_refused(launched, capsys):
    _, _, run_dir = launched
    assert check(run_dir, "user_kernel", "measure") == 1
    assert "no digest to check it against before the measure phase" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (
            lambda root: (root / "benches" / "timing.py").write_text("# mine\n"),
            "harness changed since launch",
        ),
        (lambda root: (root / "plan.json").write_text("{}"), "harness changed since launch"),
        (
            lambda root: (root / "sitecustomize.py").write_text(""),
            "the payload holds sitecustomize.py",
        ),
        (
            lambda root: (root / "torch").mkdir(),
            "the payload holds torch, which launch did not put",
        ),
    ],
    ids=["timer", "plan", "sitecustomize", "a-package-named-like-torch"],
)
def test_the_harness_changed_or_shadowed_fails_before_it_runs(launched, capsys, tamper, reason):
    digests, _, run_dir = launched
    root = run_dir / "payload"
    for sibling in ("user_kernel.build.log", "user_kernel.home", "user_kernel_baseline.venv"):
        (root / sibling).mkdir()  # the script's own, beside each tree
    (root / "peer-installs").mkdir()
    assert check(run_dir, HARNESS_TREE, "measure", digests[HARNESS_TREE]) == 0
    tamper(root)
    assert check(run_dir, HARNESS_TREE, "measure", digests[HARNESS_TREE]) == 1
    assert reason in capsys.readouterr().err


def test_a_fifo_in_a_tree_is_named_never_opened(launched, capsys):
    """A check must not block on a FIFO a build left (it would hang the phase)."""
    _, _, run_dir = launched
    os.mkfifo(run_dir / "payload" / "user_kernel" / "pipe")
    assert check(run_dir, "user_kernel", "built") == 0


# --- the manifest's record, at the trust boundary -------------------------------------------


def manifest_with(status: str = "complete", **fields) -> Manifest:
    return Manifest.model_validate(
        {
            "schema_version": "1",
            "run_id": RUN_ID,
            "status": status,
            "finished_at": "2026-11-29T00:10:00+00:00",
            **fields,
        }
    )


def tree_check(tree: str, stage: str, expected: str | None, found: str, problem=None) -> dict:
    return {
        "tree": tree,
        "stage": stage,
        "expected_sha256": expected,
        "found_sha256": found,
        "problem": problem,
    }


A, B, C = "a" * 64, "b" * 64, "c" * 64
LAUNCHED = {HARNESS_TREE: A, "user_kernel": B}


def user_plan():
    user = UserKernel(
        identity="k",
        directory="user_kernel",
        contract=KernelContract(
            name="k",
            entry="pkg.ops:attention",
            supports={"devices": ["cpu"], "dtypes": ["float32"]},
        ),
        source=KernelIdentity(tree_sha256="0" * 64),
    )
    return plan_of([user])


def accepted(manifest: Manifest) -> Manifest:
    return with_launched_payload(manifest, LaunchedPayload(user_plan(), LAUNCHED), RUN_ID)


def test_a_manifest_recording_launchs_trees_and_digests_is_accepted():
    manifest = manifest_with(
        trees=[
            tree_check("user_kernel", "build", B, B),
            tree_check("user_kernel", "built", None, C),
            tree_check("user_kernel", "measure", C, C),
            tree_check(HARNESS_TREE, "measure", A, A),
        ],
        containment={"kernel_users": {"user_kernel": "bench-user-kernel"}, "note": "confined"},
        leftovers=[{"phase": "build", "tree": "user_kernel", "ended": 1,
                    "processes": [{"pid": 4242, "command": "sleep 300"}]}],
    )  # fmt: skip
    assert accepted(manifest).trees == manifest.trees


@pytest.mark.parametrize(
    ("fields", "status", "refusal"),
    [
        ({"trees": [tree_check("user_kernel_baseline", "build", B, B)]}, "complete",
         "it names trees launch did not pack: user_kernel_baseline"),
        ({"leftovers": [{"phase": "build", "tree": "elsewhere", "ended": 1, "processes": []}]},
         "complete", "it names trees launch did not pack: elsewhere"),
        ({"containment": {"kernel_users": {"other": "root"}, "note": ""}}, "complete",
         "it names trees launch did not pack: other"),
        ({"trees": [tree_check("user_kernel", "build", C, C)]}, "complete",
         "it checked user_kernel (build) against a digest launch did not pack"),
        ({"trees": [tree_check(HARNESS_TREE, "measure", C, C)]}, "failed",
         "it checked harness (measure) against a digest launch did not pack"),
        ({"trees": [tree_check("user_kernel", "build", B, C, "changed")]}, "complete",
         "a complete run failed its check of user_kernel (build)"),
    ],
    ids=["unknown-tree", "unknown-leftover-tree", "unknown-user-tree", "not-launchs-digest",
         "harness-not-launchs-digest", "complete-yet-failed"],
)  # fmt: skip
def test_a_manifest_whose_tree_record_launch_cannot_vouch_for_is_refused(fields, status, refusal):
    with pytest.raises(ResultsError, match=re.escape("manifest.json is invalid: " + refusal)):
        accepted(manifest_with(status, **fields))


@pytest.mark.parametrize(
    "fields",
    [
        {
            "leftovers": [
                {"phase": "build", "ended": 40, "processes": [{"pid": 9, "command": "x"}] * 33}
            ]
        },
        {
            "leftovers": [
                {"phase": "build", "ended": 1, "processes": [{"pid": 9, "command": "x" * 201}]}
            ]
        },
        {"trees": [tree_check("../up", "build", A, A)]},
        {"trees": [tree_check("user_kernel", "build", "not-a-digest", A)]},
        {"containment": {"kernel_users": {}, "note": "x" * 301}},
    ],
    ids=["too-many-named", "command-too-long", "tree-name", "digest", "note-too-long"],
)
def test_the_new_fields_are_bounded_by_the_schema(fields):
    with pytest.raises(ValueError):
        manifest_with(**fields)
