"""`bench launch --baseline REF`: the baseline tree from a real git repository (clean and
dirty working trees) or a directory, into the payload beside the working tree's own: each
a kernel tree of its own (flash_kernel/, baseline/), declared by its contract."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.collect import package_dir
from orchestrator.kernel_tree.own import resolve_baseline
from orchestrator.payload import PAYLOAD_PACKAGES, build_payload
from orchestrator.service.plan_options import (
    PROFILE_SECTIONS,
    PlanOptions,
    representative_configs,
    shape_plan,
)
from orchestrator.service.plans import resolve_plan

REPO = package_dir("orchestrator").parent
LAUNCHER = "kernels/flash_attention/csrc/flash_fwd_launch.cuh"


def git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository holding this project's payload packages and kernels/, one commit."""
    root = tmp_path / "repo"
    for name in (*PAYLOAD_PACKAGES, "kernels"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "first")
    return root


def payload_files(payload) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(payload.data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def ab_payload(repo: Path, ref: str):
    plan, _ = resolve_plan("default", "gce")
    shaped = shape_plan(plan, PlanOptions(baseline=ref), repo=repo)
    payload = build_payload(shaped.plan, source_root=repo, kernel_trees=shaped.kernel_trees)
    return shaped.plan, payload_files(payload), payload


@pytest.mark.slow
def test_git_revision_on_a_clean_tree(repo):
    plan, files, payload = ab_payload(repo, "HEAD")
    head = git(repo, "rev-parse", "HEAD").strip()
    c = plan.comparison
    assert (c.source, c.ref, c.commit, c.candidate_dirty) == ("git", "HEAD", head, False)
    assert plan.identities == ["flash", "sdpa", "sdpa-flash", "flash@baseline", "sdpa@aa"]
    ours = (repo / LAUNCHER).read_bytes()
    assert files[f"baseline/{LAUNCHER}"] == files[f"flash_kernel/{LAUNCHER}"] == ours
    # Only kernels/ (and its contract, at the tree's root) travels, under the payload's own
    # rules (no docs); the harness's packages carry no kernel.
    for folder in ("baseline", "flash_kernel"):
        tree = [n.removeprefix(f"{folder}/") for n in files if n.startswith(f"{folder}/")]
        assert "bench-kernel.toml" in tree and "kernels/bench-kernel.toml" in tree
        assert all(n.startswith("kernels/") for n in tree if n != "bench-kernel.toml")
        assert not any(n.endswith(".md") for n in tree)
    assert not any(n.startswith("kernels/") for n in files)
    assert [k.directory for k in plan.user_kernels] == ["flash_kernel", "baseline"]
    # Deterministic: the same trees give the same bytes.
    assert ab_payload(repo, "HEAD")[2].sha256 == payload.sha256


@pytest.mark.slow
def test_git_revision_on_a_dirty_tree_takes_the_commit_and_the_working_tree(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    launcher = repo / LAUNCHER
    launcher.write_text(launcher.read_text() + "\n// second commit\n")
    git(repo, "commit", "-qam", "second")
    launcher.write_text(launcher.read_text() + "// uncommitted\n")
    (repo / "kernels" / "untracked.py").write_text("# new\n")
    plan, files, _ = ab_payload(repo, "HEAD~1")
    c = plan.comparison
    assert (c.commit, c.candidate_dirty) == (first, True)
    committed = git(repo, "show", f"{first}:{LAUNCHER}").encode()
    assert files[f"baseline/{LAUNCHER}"] == committed
    # the candidate: the tree as it is
    assert files[f"flash_kernel/{LAUNCHER}"] == launcher.read_bytes()
    assert "flash_kernel/kernels/untracked.py" in files
    assert "baseline/kernels/untracked.py" not in files


@pytest.mark.slow
def test_a_directory_baseline_is_a_kernels_tree_or_a_checkout(repo, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(repo / "kernels", old / "kernels")
    (old / "kernels" / LAUNCHER.removeprefix("kernels/")).write_text("// older\n")
    for ref in (old, old / "kernels"):
        plan, files, _ = ab_payload(repo, str(ref))
        assert plan.comparison.source == "tree" and plan.comparison.commit is None
        assert files[f"baseline/{LAUNCHER}"] == b"// older\n"


@pytest.mark.parametrize(
    ("ref", "message"),
    [("no-such-revision", "git rev-parse failed"), ("--output=x", "git rev-parse failed")],
)
@pytest.mark.slow
def test_an_unknown_revision_is_a_usage_error(repo, ref, message):
    with pytest.raises(UsageError, match=message):
        ab_payload(repo, ref)


def test_a_revision_needs_a_checkout():
    with pytest.raises(UsageError, match="not a directory"):
        resolve_baseline("HEAD", "flash", None, lambda relative: False)


def test_a_kernel_tree_baseline_needs_our_kernel_as_candidate(repo):
    plan, _ = resolve_plan("default", "gce")
    with pytest.raises(UsageError, match="candidate is sdpa"):
        shape_plan(plan, PlanOptions(baseline="HEAD", candidate="sdpa"), repo=repo)


def test_two_registry_implementations():
    plan, _ = resolve_plan("default", "gce")
    shaped = shape_plan(plan, PlanOptions(candidate="sdpa-flash", baseline_impl="sdpa-cudnn"))
    p = shaped.plan
    assert p.candidate == "sdpa-flash"
    assert p.compared_with == ["sdpa-cudnn", "flash", "sdpa"]
    assert p.comparison.baseline == "sdpa-cudnn" and p.comparison.source == "implementation"
    assert p.control == "sdpa" and p.baseline_identity is None
    with pytest.raises(UsageError, match="the candidate itself"):
        shape_plan(plan, PlanOptions(candidate="sdpa", baseline_impl="sdpa"))
    with pytest.raises(UsageError, match="give one"):
        shape_plan(plan, PlanOptions(baseline="HEAD", baseline_impl="sdpa"))


@pytest.mark.slow
def test_profile_defaults_to_three_representative_configs():
    plan, _ = resolve_plan("default", "gce")
    names = representative_configs(plan)
    flops = sorted(plan.configs, key=lambda c: c.flops())
    assert len(names) == 3 and {flops[0].name, flops[-1].name} <= set(names)
    profile = shape_plan(plan, PlanOptions(profile=())).plan.profile
    assert profile.configs == names and profile.sections == list(PROFILE_SECTIONS)
    # flash, sdpa, sdpa-flash: the A/A control is not profiled again
    assert profile.timeout_seconds == 60 + 30 * 3 * 3
    chosen = shape_plan(plan, PlanOptions(profile=(plan.configs[4].name,))).plan.profile
    assert chosen.configs == [plan.configs[4].name]
    with pytest.raises(UsageError, match="lacks: nope"):
        shape_plan(plan, PlanOptions(profile=("nope",)))
    cpu, _ = resolve_plan("cpu-smoke", "local")
    with pytest.raises(UsageError, match="needs a GPU plan"):
        shape_plan(cpu, PlanOptions(profile=()))


def test_each_side_of_an_ab_ships_and_runs_its_own_python(repo, tmp_path):
    """The baseline tree is a kernel tree like the candidate's: its own api.py (the
    binding), build.py and contract travel with it and its worker imports them, so an edit
    to the binding is compared too (the old path called the baseline's library through the
    candidate's api.py, and said so in a note)."""
    edited = tmp_path / "edited"
    shutil.copytree(repo / "kernels", edited / "kernels")
    api = edited / "kernels" / "flash_attention" / "api.py"
    api.write_text(api.read_text() + "\n# the baseline's own binding\n")
    plan, _ = resolve_plan("default", "gce")
    shaped = shape_plan(plan, PlanOptions(baseline=str(edited)), repo=repo)
    assert shaped.notes == ()
    trees = dict(shaped.kernel_trees)
    binding = "kernels/flash_attention/api.py"
    assert dict(trees["baseline"])[binding] == api.read_bytes()
    assert dict(trees["flash_kernel"])[binding] == (repo / binding).read_bytes()
    baseline = next(k for k in shaped.plan.user_kernels if k.identity == "flash@baseline")
    assert baseline.directory == "baseline"
    assert baseline.contract.entry == "kernels.flash_attention.api:flash_attention"


@pytest.mark.slow
def test_a_revision_whose_contract_is_refused_now_is_timed_under_the_working_trees(repo):
    """Before BENCH_* was refused, our contract's env set BENCH_KERNEL_CACHE: such a
    revision is still a baseline, under the working tree's contract (as one from before the
    contract file), never under the refused one."""
    contract = repo / "kernels" / "bench-kernel.toml"
    current = contract.read_text()
    contract.write_text(current.replace("FLASH_KERNEL_CACHE", "BENCH_KERNEL_CACHE"))
    git(repo, "commit", "-qam", "the contract as it was")
    contract.write_text(current)
    git(repo, "commit", "-qam", "the contract as it is")
    plan, files, _ = ab_payload(repo, "HEAD~1")
    candidate, baseline = plan.user_kernels
    assert b"BENCH_KERNEL_CACHE" in files["baseline/bench-kernel.toml"]  # its tree, as it was
    assert baseline.contract == candidate.contract
    assert baseline.contract.env == {"FLASH_KERNEL_CACHE": "{tree}/.kernel-cache"}
