"""A plan of the kernel's own (bench-kernel.toml's `plan`): used by `launch --kernel DIR`
unless --plan names another, read from the collected tree on the laptop (the candidate's,
never a --baseline revision's), and a bad one refused with one line before anything exists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.kernel_tree.user import read_candidate
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import plans_dir, resolve_plan
from results_schema import Plan
from results_schema.kernel_contract import CONTRACT_FILE, KernelContract
from tests.unit.test_kernel_contract import GOOD, kernel_tree, refused

WITH_PLAN = GOOD.replace(
    'entry = "mine.ops:attention"', 'entry = "mine.ops:attention"\nplan = "bench-plan.json"'
)


def own_plan(name: str = "my-shapes", **changes) -> dict:
    """cpu-smoke's first two configs, with the kernel itself named as the candidate."""
    plan = json.loads((plans_dir() / "cpu-smoke.json").read_text())
    plan.update(name=name, candidate="mine", configs=plan["configs"][:2])
    plan.update({"compared_with": ["sdpa", "reference"], "control": None, **changes})
    return plan


def tree_with_plan(root: Path, plan: dict | str | None = None) -> Path:
    kernel_tree(root, WITH_PLAN)
    text = plan if isinstance(plan, str) else json.dumps(plan or own_plan())
    (root / "bench-plan.json").write_text(text)
    return root


def git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "-C", str(repo), *identity, *args], check=True, capture_output=True)


def test_auto_takes_the_kernels_own_plan_and_an_explicit_plan_wins(tmp_path):
    root = tree_with_plan(tmp_path / "repo")
    plan, note = resolve_plan("auto", "local", has_gpu=False, candidate=read_candidate(root))
    assert plan.name == "my-shapes" and len(plan.configs) == 2
    assert "bench-plan.json" in note and "my-shapes" in note
    shaped = shape_plan(plan, PlanOptions(kernel=root)).plan
    assert shaped.candidate == "mine" and "mine" not in shaped.compared_with
    assert [k.identity for k in shaped.user_kernels] == ["mine"]

    named, _ = resolve_plan("cpu-smoke", "local", has_gpu=False, candidate=read_candidate(root))
    assert named.name == "cpu-smoke"
    without, _ = resolve_plan(
        "auto", "local", has_gpu=False, candidate=read_candidate(kernel_tree(tmp_path / "b"))
    )
    assert without.name == "cpu-smoke"  # no plan of its own: auto chooses by the machine


def test_the_baselines_plan_is_never_used_nor_read(tmp_path):
    """An A/B against a revision whose plan differs, and is even broken: the candidate's
    plan is the run's, and the revision's plan file is not checked."""
    root = tree_with_plan(tmp_path / "repo", "not json")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a broken plan")
    (root / "bench-plan.json").write_text(json.dumps(own_plan("the-candidates")))
    git(root, "commit", "-qam", "a working plan")
    plan, _ = resolve_plan("auto", "local", has_gpu=False, candidate=read_candidate(root))
    assert plan.name == "the-candidates"
    shaped = shape_plan(plan, PlanOptions(kernel=root, baseline="HEAD~1")).plan
    assert shaped.name == "the-candidates" and shaped.comparison.baseline == "mine@baseline"


def test_the_plan_key_must_name_a_json_file_inside_the_tree():
    for bad in ("/etc/plan.json", "../plan.json", "plans/../../x.json", "plan.toml", "a//b.json"):
        with pytest.raises(ValueError):
            KernelContract(name="x", entry="a:b", plan=bad)
    assert KernelContract(name="x", entry="a:b", plan="plans/mine.json").plan == "plans/mine.json"


def _ignored(root: Path) -> None:
    git(root, "init", "-q")
    (root / ".gitignore").write_text("bench-plan.json\n")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda root: (root / CONTRACT_FILE).write_text(
                WITH_PLAN.replace('"bench-plan.json"', '"../bench-plan.json"')
            ),
            "kernel.plan: Value error, '../bench-plan.json' is not a path inside the tree",
        ),
        (
            lambda root: (root / "bench-plan.json").unlink(),
            "names plan bench-plan.json, which is not a file of the tree",
        ),
        (_ignored, "names plan bench-plan.json, which is not a file of the tree"),
        (
            lambda root: (root / "bench-plan.json").write_text("{ not json"),
            "bench-plan.json is not a valid plan: top level: Invalid JSON",
        ),
        (
            lambda root: (root / "bench-plan.json").write_text(
                json.dumps(own_plan(samples_per_config=0))
            ),
            "bench-plan.json is not a valid plan: samples_per_config: Input should be greater",
        ),
        (
            lambda root: (root / "bench-plan.json").write_text(json.dumps(own_plan(device="cuda"))),
            "plan 'my-shapes' cannot run on this machine: its device is cuda",
        ),
        (
            lambda root: (root / "bench-plan.json").write_text(
                json.dumps(own_plan(compared_with=["mine"]))
            ),
            "plan 'my-shapes' has nothing to compare mine with",
        ),
    ],
    ids=["outside", "missing", "ignored", "not-json", "invalid", "cuda-on-cpu", "only-itself"],
)
def test_a_bad_plan_of_the_kernels_own_is_refused_with_one_line(
    bench_env, capsys, monkeypatch, change, expected
):
    monkeypatch.setattr("orchestrator.service.plans.target_has_gpu", lambda backend: False)
    root = tree_with_plan(bench_env / "repo")
    change(root)
    refused(bench_env, root)
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_the_plan_is_read_from_the_collected_files(tmp_path):
    root = tree_with_plan(tmp_path / "repo")
    tree = read_candidate(root)
    assert isinstance(tree.plan, Plan) and tree.plan.name == "my-shapes"
    assert tree.kernel.contract.plan == "bench-plan.json"


@pytest.mark.slow
def test_every_examples_own_plan_is_valid_and_runs_on_a_gpu():
    from tests.unit.test_kernel_contract import EXAMPLES

    owning = [example for example in EXAMPLES if read_candidate(example).plan is not None]
    assert owning, "an example shows the plan key"
    for example in owning:
        plan, _ = resolve_plan("auto", "gce", has_gpu=True, candidate=read_candidate(example))
        shaped = shape_plan(plan, PlanOptions(kernel=example)).plan
        assert shaped.candidate == read_candidate(example).kernel.identity


def test_a_launch_plan_reads_the_users_tree_once(tmp_path, monkeypatch):
    """`--plan auto --kernel DIR`: the tree read for the plan its contract names is the
    tree the plan carries, read once (it was read again to shape the plan)."""
    from orchestrator.kernel_tree import user
    from orchestrator.service import plans
    from orchestrator.service.launch_plan import make_launch_plan

    root = tree_with_plan(tmp_path / "repo")
    monkeypatch.setattr(plans, "local_gpu_present", lambda: False)
    read = []
    collect = user.collect_tree
    monkeypatch.setattr(user, "collect_tree", lambda *a, **k: read.append(a) or collect(*a, **k))
    planned = make_launch_plan("auto", "local", PlanOptions(kernel=root))
    assert planned.plan.name == "my-shapes" and planned.plan.candidate == "mine"
    assert [folder for folder, _ in planned.kernel_trees] == ["user_kernel"]
    assert len(read) == 1
