"""Variants of one kernel (issue 54): [kernel.variants] in bench-kernel.toml, refused with
one line when wrong; env variants each in a copy of the tree with their env (the build
reads it), or with build_shared all in the candidate's folder, built once; what the
startup script builds and what the worker sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benches.kernel_tree import user_implementation
from orchestrator.render import user_kernel_builds
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from results_schema.kernel_contract import CONTRACT_FILE, MAX_VARIANTS
from tests.unit.test_kernel_contract import GOOD, kernel_tree, refused

BUILT = GOOD.replace("[kernel.supports]", 'build = "python make.py"\n[kernel.supports]')
TWO = """
[kernel.variants]
block64 = { env = { BLOCK_M = "64" } }
block128 = { env = { BLOCK_M = "128", STAGES = "3" } }
"""


def with_variants(contract: str, variants: str = TWO, *, shared: bool = False) -> str:
    extra = "build_shared = true\n" if shared else ""
    return contract.replace("[kernel.supports]", f"{extra}{variants}\n[kernel.supports]")


def shaped(root: Path):
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    return shape_plan(plan, PlanOptions(kernel=root))


def test_each_env_variant_builds_in_its_own_copy_with_its_env(tmp_path):
    root = kernel_tree(tmp_path / "repo", with_variants(BUILT))
    result = shaped(root)
    plan = result.plan

    assert (plan.candidate, plan.variants) == ("mine[block64]", ["mine[block128]"])
    first, second = (plan.user_kernel(i) for i in plan.candidates)
    assert first.directory != second.directory
    assert first.contract.env == {"BLOCK_M": "64"} and not first.contract.variants
    assert second.contract.env == {"BLOCK_M": "128", "STAGES": "3"}
    assert first.build_cache_prefix() != second.build_cache_prefix()
    assert [folder for folder, _ in result.kernel_trees] == [first.directory, second.directory]
    builds = user_kernel_builds(plan)
    assert [(b["identity"], b["env"]) for b in builds] == [
        ("mine[block64]", ["BLOCK_M=64"]),
        ("mine[block128]", ["BLOCK_M=128", "STAGES=3"]),
    ]


def test_build_shared_variants_run_one_build_and_set_their_env_in_the_worker_only(tmp_path):
    with_env = BUILT.replace("[kernel.supports]", 'env = { A = "1" }\n[kernel.supports]')
    contract = with_variants(with_env, shared=True)
    root = kernel_tree(tmp_path / "repo", contract)
    result = shaped(root)
    plan = result.plan

    kernels = [plan.user_kernel(i) for i in plan.candidates]
    assert {k.directory for k in kernels} == {"user_kernel"}
    assert [folder for folder, _ in result.kernel_trees] == ["user_kernel"]
    (build,) = user_kernel_builds(plan)
    assert build["env"] == ["A=1"]  # the contract's env: the build reads no variant's
    assert {k.build_cache_prefix() for k in kernels} == {kernels[0].build_cache_prefix()}
    assert kernels[1].env_for("/t") == {"A": "1", "BLOCK_M": "128", "STAGES": "3"}


def test_the_worker_sets_its_variants_env_before_it_imports_the_kernel(tmp_path, monkeypatch):
    root = kernel_tree(tmp_path / "repo", with_variants(GOOD, shared=True))
    plan = shaped(root).plan
    for name in ("BLOCK_M", "STAGES"):  # restored after the test
        monkeypatch.setenv(name, "0")
    user_implementation(plan.user_kernel("mine[block128]"), root)  # imports nothing yet
    assert (os.environ["BLOCK_M"], os.environ["STAGES"]) == ("128", "3")


@pytest.mark.parametrize(
    ("variants", "expected"),
    [
        ('[kernel.variants]\n"big block" = {}\n', "'big block' is no variant name"),
        (
            '[kernel.variants]\nfast = { env = { LD_PRELOAD = "x.so" } }\n',
            "LD_PRELOAD is refused: LD_* are the dynamic loader's",
        ),
        ('[kernel.variants]\nfast = { env = { B = "a\\nb" } }\n', "a value is one printable line"),
        ("[kernel.variants]\nfast = { flags = 1 }\n", "unknown key kernel.variants.fast.flags"),
        (
            "[kernel.variants]\n" + "".join(f"v{i} = {{}}\n" for i in range(MAX_VARIANTS + 1)),
            f"a run times at most {MAX_VARIANTS}",
        ),
    ],
    ids=["name", "refused-env", "env-newline", "unknown-key", "too-many"],
)
def test_a_bad_variant_is_refused_with_one_line(bench_env, capsys, variants, expected):
    root = kernel_tree(bench_env / "repo", with_variants(GOOD, variants))
    assert "variants" in (root / CONTRACT_FILE).read_text()
    refused(bench_env, root)
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_candidates_need_a_kernel_tree(bench_env, capsys):
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    with pytest.raises(Exception, match="--candidates names revisions of a kernel tree"):
        shape_plan(plan, PlanOptions(candidates=("HEAD~1",)))


def test_a_plan_naming_the_kernel_times_its_variants_in_its_place(tmp_path):
    """A kernel's own plan names the kernel as its candidate (the Triton example's does):
    with variants declared the variants take its place, and no implementation of that name
    is looked for (the launch was refused as 'unknown implementation')."""
    root = kernel_tree(tmp_path / "repo", with_variants(GOOD))
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    plan = plan.model_copy(update={"candidate": "mine"})
    shaped_plan = shape_plan(plan, PlanOptions(kernel=root)).plan
    assert (shaped_plan.candidate, shaped_plan.variants) == ("mine[block64]", ["mine[block128]"])
    assert "mine" not in shaped_plan.identities
