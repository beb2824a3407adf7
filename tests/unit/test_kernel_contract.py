"""The kernel contract (bench-kernel.toml): what launch refuses before anything exists, how
the harness loads two versions of one package, and the build in the rendered script."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from orchestrator.cli import main
from orchestrator.kernel_tree.collect import collect_tree
from orchestrator.kernel_tree.contract import parse_contract
from orchestrator.kernel_tree.user import read_candidate
from orchestrator.render import render_startup, shquote
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan
from orchestrator.spec import RunSpec
from results_schema.kernel_contract import (
    CONTRACT_FILE,
    KernelContract,
    KernelIdentity,
    UserKernel,
    duration_seconds,
)
from tests.unit.test_render import RUN_ID, backend_vars, shellcheck

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if (p / CONTRACT_FILE).is_file())
GOOD = """[kernel]
name = "mine"
entry = "mine.ops:attention"
[kernel.supports]
dtypes = ["float32"]
devices = ["cpu"]
"""


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_declares_a_valid_contract(example):
    files = collect_tree(example)
    contract = parse_contract(files, str(example))
    assert contract.name and (example / "README.md").is_file()


def kernel_tree(root: Path, contract: str = GOOD, module: str = "mine/ops.py") -> Path:
    (root / Path(module).parent).mkdir(parents=True, exist_ok=True)
    (root / module).write_text("def attention(q, k, v, *, causal, scale):\n    return q\n")
    (root / CONTRACT_FILE).write_text(contract)
    return root


def refused(bench_env: Path, kernel: Path) -> None:
    """Launch --kernel: exit 2, and no run recorded or started."""
    assert main(["launch", "--backend", "local", "--kernel", str(kernel), "--budget", "1"]) == 2
    state = bench_env / "state"
    assert not (state / "runs.sqlite").exists() and not (state / "sandboxes").exists()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda root: (root / CONTRACT_FILE).unlink(), f"no {CONTRACT_FILE} at its root"),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD + "colour = 'red'\n"),
            "unknown key kernel.supports.colour",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(
                GOOD.replace('devices = ["cpu"]', 'devices = ["cpu"]\nhead_dims = 64')
            ),
            "kernel.supports.head_dims: Input should be a valid list",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD.replace("mine.ops", "mine.fast")),
            "entry mine.fast:attention names a module that is not in the tree",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(
                GOOD.replace('devices = ["cpu"]', 'devices = ["cpu"]\ncheck = "mine.gone:fits"')
            ),
            "supports.check mine.gone:fits names a module that is not in the tree",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD.replace("mine.ops", "benches.ops")),
            "entry benches.ops:attention: a package named 'benches' cannot be imported",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(
                GOOD.replace("[kernel.supports]", 'call_timeout = "5"\n[kernel.supports]')
            ),
            "kernel.call_timeout: Value error, '5' is no duration",
        ),
        (
            lambda root: (root / "mine" / "data.bin").symlink_to("/etc/passwd"),
            "mine/data.bin is a symbolic link (to /etc/passwd, outside the tree)",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD + "[kernel\n"),
            f"{CONTRACT_FILE} is not valid TOML",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(
                GOOD.replace(
                    "[kernel.supports]", 'env = { LD_PRELOAD = "x.so" }\n[kernel.supports]'
                )
            ),
            "kernel.env: Value error, LD_PRELOAD is refused: LD_* are the dynamic loader's",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD.replace('"mine"', '"sdpa"')),
            "kernel.name: Value error, 'sdpa' is a built-in implementation's name",
        ),
        (
            lambda root: (root / CONTRACT_FILE).write_text(GOOD.replace('"mine"', '"flash"')),
            "names the kernel 'flash', the name of bench's own kernel",
        ),
    ],
    ids=[
        "no-contract",
        "unknown-key",
        "wrong-type",
        "entry-missing",
        "check-missing",
        "harness-package",
        "timeout-no-unit",
        "link-out",
        "not-toml",
        "env-preload",
        "builtin-name",
        "our-name",
    ],
)
def test_a_bad_kernel_repository_is_refused_with_one_line(bench_env, capsys, change, expected):
    root = kernel_tree(bench_env / "repo")
    change(root)
    refused(bench_env, root)
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_the_current_directory_is_the_kernel_when_it_holds_a_contract(tmp_path, monkeypatch):
    from orchestrator.cli.options import plan_options

    root = kernel_tree(tmp_path / "repo")
    monkeypatch.chdir(root)
    assert plan_options(None, None, None, None, None).kernel == root
    monkeypatch.chdir(tmp_path)
    assert plan_options(None, None, None, None, None).kernel is None


def test_contract_values_are_checked():
    with pytest.raises(ValueError, match="not pinned"):
        KernelContract(name="x", entry="a:b", requirements=["triton>=3"])
    with pytest.raises(ValueError):
        KernelContract(name="has space", entry="a:b")
    with pytest.raises(ValueError):
        KernelContract(name="x", entry="a.b")  # no function
    assert duration_seconds("1h30m") == 5400 and duration_seconds("90s") == 90
    with pytest.raises(ValueError):
        duration_seconds("15")


REFUSED_ENV_NAMES = [
    *("BENCH_KERNEL_CACHE", "BENCH_ANYTHING", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"),
    *("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONWARNINGS"),
    *("PATH", "HOME", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND"),
    *("GCONV_PATH", "CUDA_INJECTION64_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
]
ALLOWED_ENV_NAMES = [
    *("CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "BLOCK_M", "TORCH_EXTENSIONS_DIR"),
    *("TRITON_CACHE_DIR", "FLASH_KERNEL_CACHE", "IFS", "MALLOC_ARENA_MAX", "NVIDIA_TF32_OVERRIDE"),
]


@pytest.mark.parametrize("name", REFUSED_ENV_NAMES)
def test_a_contracts_env_refuses_what_runs_code_before_the_kernel(name):
    """bench's settings, the loader's, the interpreter's and the shells' startup variables,
    and the GPU's: one line naming the variable and why."""
    with pytest.raises(ValueError, match=rf"{name} is refused: \S") as refused:
        KernelContract(name="x", entry="a:b", env={name: "{tree}/x"})
    (error,) = refused.value.errors()
    assert len(error["msg"].splitlines()) == 1


@pytest.mark.parametrize("name", ALLOWED_ENV_NAMES)
def test_a_contracts_env_takes_build_and_kernel_settings(name):
    assert KernelContract(name="x", entry="a:b", env={name: "8"}).env == {name: "8"}


BUILTIN_NAMES = [
    *("sdpa", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "reference"),
    *(
        "xformers",
        "fa4",
        "flashinfer",
        "cudnn-fe",
        "sdpa-extra16",
        "sdpa-extra7",
        "SDPA",
        "Reference",
    ),
]


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_a_kernel_may_not_take_a_builtin_implementations_name(name):
    """Not as its declared name, nor as a plan's identity for it (the registry holds a user
    kernel under its identity: in a built-in's place, it would be timed as that one)."""
    with pytest.raises(ValueError, match="is a built-in implementation's name"):
        KernelContract(name=name, entry="a:b")
    ours = KernelContract(name="mine", entry="a:b")
    tree = KernelIdentity(tree_sha256="0" * 64)
    for identity in (name, f"{name}@baseline"):
        with pytest.raises(ValueError, match="is a built-in implementation's name"):
            UserKernel(identity=identity, directory="user_kernel", contract=ours, source=tree)


@pytest.mark.parametrize("name", ["mine@aa", "mine@baseline", "flash@baseline"])
def test_a_declared_name_takes_no_suffix_of_a_timed_identity(name):
    with pytest.raises(ValueError, match="should match pattern"):
        KernelContract(name=name, entry="a:b")


def test_a_kernel_whose_devices_exclude_the_plans_is_refused(tmp_path):
    root = kernel_tree(tmp_path / "repo", GOOD.replace('devices = ["cpu"]', 'devices = ["cuda"]'))
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    with pytest.raises(Exception, match="runs on cuda only"):
        shape_plan(plan, PlanOptions(kernel=root))


# --- the harness side ---------------------------------------------------------------------


def two_versions(tmp_path: Path) -> tuple[Path, Path]:
    """One package in two trees, differing only in a constant that changes the result."""
    trees = []
    for folder, value in (("one", 1.0), ("two", 2.0)):
        tree = tmp_path / folder
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "__init__.py").write_text("")
        (tree / "pkg" / "constant.py").write_text(f"VALUE = {value}\n")
        (tree / "pkg" / "ops.py").write_text(
            "from pkg.constant import VALUE\n\n"
            "def attention(q, k, v, *, causal, scale):\n    return q * 0 + VALUE\n"
        )
        trees.append(tree)
    return trees[0], trees[1]


def user_kernel(tree: Path, **supports) -> UserKernel:
    contract = KernelContract(
        name="mine", entry="pkg.ops:attention", supports={"devices": ["cpu"], **supports}
    )
    source = KernelIdentity(tree_sha256="0" * 64, commit="a" * 40, dirty=True)
    return UserKernel(identity="mine", directory=tree.name, contract=contract, source=source)


def test_unsupported_configs_and_a_failed_build_are_reasons_not_errors(tmp_path):
    from benches.kernel_tree import user_implementation
    from results_schema import AttentionConfig

    tree, _ = two_versions(tmp_path)
    impl = user_implementation(user_kernel(tree, dtypes=["float16"], head_dims=[128]), tree)
    config = AttentionConfig(
        name="c", batch=1, heads=1, seq_len=4, head_dim=64, dtype="float32", causal=False
    )
    assert impl.available(torch.device("cpu")) is None
    assert impl.unsupported(config) == "unsupported: dtype float32 (it supports float16)"
    half = config.model_copy(update={"dtype": "float16"})
    assert impl.unsupported(half) == "unsupported: head_dim 64 (it supports 128)"
    assert impl.backend_for() == "user:mine@aaaaaaaaaaaa+dirty"
    assert impl.available(torch.device("cuda")) == "unsupported: runs on cpu only"

    (tmp_path / "one.build-failed").write_text("error: nvcc not found\n")
    failed = user_implementation(user_kernel(tree), tree)
    assert failed.available(torch.device("cpu")) == "build failed: error: nvcc not found"


# --- the rendered build -------------------------------------------------------------------

HOSTILE_BUILD = 'pip install -e . && echo "$(touch /tmp/pwned)" \'; rm -rf ~ #'


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "gce"])
def test_a_user_build_renders_quoted_and_shellcheck_clean(tmp_path, backend):
    build = f"build = '''{HOSTILE_BUILD}'''"
    pins = 'requirements = ["triton==3.4.0", "ninja==1.11.1"]'
    contract = GOOD.replace(
        "[kernel.supports]", f'{build}\nbuild_timeout = "20m"\n{pins}\n[kernel.supports]'
    )
    root = kernel_tree(tmp_path / "repo", contract)
    assert read_candidate(root).kernel.contract.build == HOSTILE_BUILD
    plan, _ = resolve_plan("cpu-smoke", backend, has_gpu=True)
    spec = RunSpec(
        run_id=RUN_ID,
        backend=backend,
        plan=shape_plan(plan, PlanOptions(kernel=root)).plan,
        owner="tester",
        budget_usd=1.0,
        rate_usd_per_hour=0.28 if backend == "gce" else 0.0,
        max_run_seconds=3600,
        estimated_seconds=300,
        payload_sha256="a" * 64,
    )
    script = render_startup(spec, "/var/lib/bench/run", backend_vars(backend))
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout
    quoted = shquote(HOSTILE_BUILD)
    assert (
        f"start_user_build user_kernel mine 1200 'triton==3.4.0 ninja==1.11.1' {quoted}\n" in script
    )
    assert "run_phase build 2520" in script  # 120 s, then 20 min for the pins and the build each


@pytest.mark.slow
def test_render_shows_the_users_build_step(bench_env, capsys):
    example = REPO / "examples" / "torch-attention"
    args = ["render", "--backend", "local", "--plan", "cpu-smoke", "--kernel", str(example)]
    assert main(args) == 0
    script = capsys.readouterr().out
    assert "start_user_build user_kernel torch-attention 900 '' ''" in script
    assert not (bench_env / "state" / "runs.sqlite").exists()
