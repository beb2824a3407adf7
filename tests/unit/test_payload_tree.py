"""The trees a payload carries, as git sees them: no link followed, no ignored file, bounded
before anything is read. The harness's packages, our kernel's tree, and an A/B baseline as
a directory or a git revision, on real git repositories and real tarballs."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import UsageError
from orchestrator.kernel_tree import collect
from orchestrator.kernel_tree.collect import package_dir, skipped_in_kernels
from orchestrator.kernel_tree.own import resolve_baseline
from orchestrator.payload import PAYLOAD_PACKAGES, build_payload
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan

REPO = package_dir("orchestrator").parent
SECRET = b"SECRET-refresh-token-0f3c9a"
# A file far over the one-file bound and a total far over the tree's, both sparse: they
# cost no disk, but a reader that reads before it checks would hold them in memory.
HUGE_FILE_BYTES = 256 * 2**20
FILE_UNDER_THE_BOUND = 8 * 2**20
FILES_OVER_THE_TOTAL = 12
COMMITTED_FILE_BYTES = 32 * 2**20  # a real (compressible) file over the one-file bound
READ_NOTHING_BYTES = 8 * 2**20  # the most memory a refusal may take: far below either


def git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout


def commit_all(root: Path) -> Path:
    if not (root / ".git").exists():
        git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tree")
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    """A plain directory (no git) holding a copy of this project's payload packages and of
    our kernel's tree (kernels/)."""
    root = tmp_path / "tree"
    for name in (*PAYLOAD_PACKAGES, "kernels"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def credentials(tmp_path) -> Path:
    """A fake credentials file outside every tree, as gcloud writes one."""
    path = tmp_path / "home" / ".config" / "gcloud" / "application_default_credentials.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"refresh_token": "' + SECRET + b'", "type": "authorized_user"}')
    return path


def plan():
    return resolve_plan("default", "gce")[0]


def payload_of(root: Path):
    """The default plan's payload from the trees under `root`: the harness's packages and
    our kernel's tree (flash_kernel/kernels/...), each collected under the payload's rules."""
    shaped = shape_plan(plan(), PlanOptions(), repo=root)
    return build_payload(shaped.plan, source_root=root, kernel_trees=shaped.kernel_trees)


def tarball_bytes(built) -> bytes:
    return gzip.decompress(built.data)


def names_in(built) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(built.data), mode="r:gz") as tar:
        return set(tar.getnames())


def baseline(ref: Path | str, repo: Path | None = None):
    return resolve_baseline(str(ref), "flash", repo, skipped_in_kernels)


def entries(built) -> dict[str, bytes]:
    """The tarball's files but plan.json (which records where the trees came from)."""
    with tarfile.open(fileobj=io.BytesIO(built.data), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return {name: data for name, data in files.items() if name != "plan.json"}


def peak_memory_of(call) -> tuple[int, UsageError]:
    """The most Python memory `call` held at once (it must raise UsageError)."""
    tracemalloc.start()
    try:
        with pytest.raises(UsageError) as refused:
            call()
        return tracemalloc.get_traced_memory()[1], refused.value
    finally:
        tracemalloc.stop()


# ---- links ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("git_state", ["committed", "untracked", "no git"])
def test_a_link_to_a_credentials_file_is_refused_and_never_read(tree, credentials, git_state):
    if git_state == "committed":
        (tree / "kernels" / "adc.json").symlink_to(credentials)
        commit_all(tree)
    elif git_state == "untracked":
        commit_all(tree)
        (tree / "kernels" / "adc.json").symlink_to(credentials)
    else:
        (tree / "kernels" / "adc.json").symlink_to(credentials)
    with pytest.raises(UsageError, match=r"kernels: adc\.json is a symbolic link") as refused:
        payload_of(tree)
    assert "outside the tree" in str(refused.value) and refused.value.exit_code == 2


def test_an_ignored_link_stays_out_and_the_secret_never_reaches_the_tarball(tree, credentials):
    (tree / ".gitignore").write_text("kernels/*.json\n")
    commit_all(tree)
    (tree / "kernels" / "adc.json").symlink_to(credentials)
    built = payload_of(tree)
    assert "kernels/adc.json" not in names_in(built)
    assert SECRET not in tarball_bytes(built)


def test_a_linked_directory_is_refused(tree, credentials):
    (tree / "kernels" / "gcloud").symlink_to(credentials.parent, target_is_directory=True)
    with pytest.raises(UsageError, match=r"kernels: gcloud is a symbolic link"):
        payload_of(tree)


def test_a_tracked_directory_replaced_by_a_link_is_not_read_through(tree, credentials, tmp_path):
    commit_all(tree)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(tree / "kernels" / "flash_attention", elsewhere)
    shutil.copy(credentials, elsewhere / "build.py")
    (tree / "kernels" / "flash_attention").symlink_to(elsewhere, target_is_directory=True)
    # git still lists kernels/flash_attention/build.py: reading it would read the secret.
    with pytest.raises(UsageError, match=r"kernels: flash_attention is a symbolic link"):
        payload_of(tree)


def test_a_link_that_stays_inside_the_tree_is_refused_too(tree):
    (tree / "kernels" / "alias.py").symlink_to("support.py")
    with pytest.raises(UsageError, match=r"kernels: alias\.py is a symbolic link \(to support"):
        payload_of(tree)


def test_a_nested_repository_is_refused(tree):
    commit_all(tree)
    vendor = tree / "kernels" / "vendor"
    vendor.mkdir()
    (vendor / "lib.py").write_text("# vendored\n")
    commit_all(vendor)
    with pytest.raises(UsageError, match=r"kernels: vendor/? is a submodule or a nested git"):
        payload_of(tree)


def test_a_fifo_outside_git_is_refused(tree):
    # (git itself lists no FIFO, so in a work tree one is simply not part of the tree)
    os.mkfifo(tree / "kernels" / "pipe")
    with pytest.raises(UsageError, match=r"kernels: pipe is not a regular file"):
        payload_of(tree)


# ---- the --baseline tree: a directory or a git revision, under the same rules ----------


@pytest.mark.parametrize(
    ("form", "linked"),
    [
        ("checkout", "kernels/flash_attention"),
        ("kernels tree", "flash_attention"),
        ("checkout", "kernels"),
    ],
)
def test_a_baseline_directory_with_a_linked_directory_is_refused(tmp_path, form, linked):
    root = tmp_path / "old"
    target = tmp_path / "real" / linked
    shutil.copytree(REPO / "kernels", tmp_path / "real" / "kernels")
    shutil.copytree(REPO / "kernels", root / "kernels")
    if form == "kernels tree":
        root, target = root / "kernels", tmp_path / "real" / "kernels" / linked
    shutil.rmtree(root / linked)
    (root / linked).symlink_to(target, target_is_directory=True)
    with pytest.raises(UsageError, match=f"{linked} is a symbolic link") as refused:
        baseline(root)
    assert str(refused.value).startswith("--baseline ") and refused.value.exit_code == 2


def test_a_baseline_directory_whose_build_py_is_a_link_is_refused(tmp_path):
    old = tmp_path / "old" / "kernels"
    shutil.copytree(REPO / "kernels", old)
    shutil.move(old / "flash_attention" / "build.py", tmp_path / "build.py")
    (old / "flash_attention" / "build.py").symlink_to(tmp_path / "build.py")
    with pytest.raises(UsageError, match=r"flash_attention/build\.py is a symbolic link"):
        baseline(old)


def test_a_linked_baseline_is_exit_2_through_the_cli(bench_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PROJECT", "bench-tests")
    monkeypatch.setenv("BENCH_BUCKET", "bench-tests-bucket")
    old = tmp_path / "old" / "kernels"
    shutil.copytree(REPO / "kernels", tmp_path / "real")
    old.mkdir(parents=True)
    (old / "flash_attention").symlink_to(tmp_path / "real" / "flash_attention")
    args = ["launch", "--backend", "gce", "--budget", "0.01", "--plan", "default"]
    assert main([*args, "--baseline", str(old)]) == 2
    assert "flash_attention is a symbolic link" in capsys.readouterr().err


def test_a_git_revision_holding_a_link_is_refused(tree, credentials):
    (tree / "kernels" / "flash_attention" / "adc.json").symlink_to(credentials)
    commit_all(tree)
    with pytest.raises(UsageError, match=r"kernels/flash_attention/adc\.json is a symbolic link"):
        baseline("HEAD", repo=tree)


def test_an_empty_tree_is_refused(tmp_path):
    empty = tmp_path / "empty"
    for name in PAYLOAD_PACKAGES:
        (empty / name).mkdir(parents=True)
    with pytest.raises(UsageError, match=r"no files under benches/"):
        build_payload(plan(), source_root=empty)


# ---- bounded, and refused before anything is read ---------------------------------------


def test_a_file_over_the_bound_is_refused_before_it_is_read(tree):
    with (tree / "kernels" / "weights.bin").open("wb") as f:
        f.truncate(HUGE_FILE_BYTES)
    peak, refused = peak_memory_of(lambda: payload_of(tree))
    assert "kernels: weights.bin is 256.0 MiB, over the 16.0 MiB a file may be" in str(refused)
    assert peak < READ_NOTHING_BYTES and HUGE_FILE_BYTES > collect.MAX_FILE_BYTES


def test_a_baseline_directory_over_the_bound_is_refused_before_it_is_read(tmp_path):
    old = tmp_path / "old" / "kernels"
    shutil.copytree(REPO / "kernels", old)
    for index in range(FILES_OVER_THE_TOTAL):
        with (old / f"part{index:02}.bin").open("wb") as f:
            f.truncate(FILE_UNDER_THE_BOUND)
    peak, refused = peak_memory_of(lambda: baseline(old))
    assert "over 64.0 MiB of files in all" in str(refused)
    assert peak < READ_NOTHING_BYTES
    assert FILE_UNDER_THE_BOUND < collect.MAX_FILE_BYTES
    assert FILES_OVER_THE_TOTAL * FILE_UNDER_THE_BOUND > collect.MAX_TREE_BYTES


@pytest.mark.slow
def test_a_git_revision_over_the_bound_is_refused_while_streaming(tree):
    (tree / "kernels" / "weights.bin").write_bytes(bytes(COMMITTED_FILE_BYTES))
    commit_all(tree)
    peak, refused = peak_memory_of(lambda: baseline("HEAD", repo=tree))
    assert "kernels/weights.bin is 32.0 MiB, over the 16.0 MiB" in str(refused)
    assert peak < READ_NOTHING_BYTES and COMMITTED_FILE_BYTES > collect.MAX_FILE_BYTES


# ---- as git sees it ---------------------------------------------------------------------


def test_ignored_untracked_and_deleted_files_are_as_git_sees_them(tree):
    (tree / ".gitignore").write_text("*.log\nkernels/data/\n")
    commit_all(tree)
    (tree / "kernels" / "run.log").write_text("ignored\n")
    (tree / "kernels" / "data").mkdir()
    (tree / "kernels" / "data" / "big.bin").write_bytes(b"ignored too")
    (tree / "kernels" / "new_helper.py").write_text("# untracked, not ignored\n")
    # Tracked, deleted: not in the tree now (a file no contract key names: support.py is the
    # contract's supports.check, which must be in the tree).
    (tree / "kernels" / "flash_attention" / "smoke.py").unlink()
    names = names_in(payload_of(tree))
    ours = "flash_kernel/kernels/"
    assert ours + "new_helper.py" in names
    gone = {ours + "run.log", ours + "data/big.bin", ours + "flash_attention/smoke.py"}
    assert not gone & names
    assert not any(".git" in name.split("/") for name in names)
    # The same rules for a baseline directory that is a checkout.
    files = dict(baseline(tree).files)
    assert "new_helper.py" in files and "run.log" not in files and "data/big.bin" not in files


@pytest.mark.slow
def test_identical_trees_give_identical_bytes_git_or_not(tree, tmp_path):
    plain = payload_of(tree)
    assert entries(plain)
    copy = tmp_path / "checkout"
    shutil.copytree(tree, copy)
    (copy / ".gitignore").write_text("*.log\n")
    commit_all(copy)
    (copy / "kernels" / "noise.log").write_text("ignored\n")
    # The same files, byte for byte; plan.json alone differs: it records the commit.
    assert entries(payload_of(copy)) == entries(plain)
