"""Issue 52, the first hour of someone benchmarking a kernel of their own: bench writes
nothing into their repository that their tree then carries, loses no run they did not
fetch, and prints lines an 80-column terminal shows whole."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.kernel_tree.collect import collect_tree
from orchestrator.kernel_tree.git import working_state
from orchestrator.paths import OUTPUTS_GITIGNORE, ensure_writable_dest

RUN_ID = "20261122-081500-a1b2c3"


def git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    return subprocess.run([*command, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def kernel_repo(tmp_path) -> Path:
    """A committed kernel repository, as the README has one write it."""
    repo = tmp_path / "my-attention"
    (repo / "my_attn").mkdir(parents=True)
    (repo / "my_attn" / "ops.py").write_text("def attention(q, k, v, *, causal, scale): ...\n")
    (repo / "bench-kernel.toml").write_text('[kernel]\nname = "mine"\n')
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "mine")
    return repo


def fetched_into(dest: Path) -> None:
    """What fetch leaves in DEST: the check it makes first, then a published run."""
    ensure_writable_dest(dest)
    (dest / RUN_ID / "results").mkdir(parents=True)
    (dest / RUN_ID / "results" / "summary.csv").write_text("config,impl\n")
    (dest / RUN_ID / "manifest.json").write_text("{}")


def test_runs_fetched_into_the_kernel_repository_are_no_part_of_its_tree(kernel_repo):
    fetched_into(kernel_repo / "results")  # the default --dest, run from the repository

    assert git(kernel_repo, "status", "--porcelain") == ""
    assert working_state(kernel_repo)["dirty"] is False
    names = [name for name, _ in collect_tree(kernel_repo)]
    assert names == ["bench-kernel.toml", "my_attn/ops.py"]


def test_outside_git_the_walk_leaves_a_fetched_results_folder_out_too(kernel_repo, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("bench-kernel.toml", "my_attn/ops.py"):
        (plain / name).parent.mkdir(exist_ok=True)
        (plain / name).write_bytes((kernel_repo / name).read_bytes())
    fetched_into(plain / "results")

    assert [name for name, _ in collect_tree(plain)] == ["bench-kernel.toml", "my_attn/ops.py"]


def test_an_earlier_results_folder_of_runs_only_is_marked_on_the_next_fetch(kernel_repo):
    (kernel_repo / "results" / RUN_ID).mkdir(parents=True)  # fetched by an older bench
    (kernel_repo / "results" / RUN_ID / "manifest.json").write_text("{}")
    ensure_writable_dest(kernel_repo / "results")
    assert (kernel_repo / "results" / ".gitignore").read_text() == OUTPUTS_GITIGNORE
    assert git(kernel_repo, "status", "--porcelain") == ""


def test_a_folder_of_the_users_own_is_never_told_to_ignore_itself(kernel_repo):
    ensure_writable_dest(kernel_repo)  # --dest .
    assert not (kernel_repo / ".gitignore").exists()
    (kernel_repo / "data").mkdir()
    (kernel_repo / "data" / "notes.txt").write_text("mine\n")
    ensure_writable_dest(kernel_repo / "data")
    assert not (kernel_repo / "data" / ".gitignore").exists()
    existing = kernel_repo / "mine"
    existing.mkdir()
    (existing / ".gitignore").write_text("*.log\n")
    ensure_writable_dest(existing)
    assert (existing / ".gitignore").read_text() == "*.log\n"


# --- lines that fit the terminal (cli/wrap.py) ---------------------------------------------


def test_a_long_line_breaks_at_spaces_and_a_long_word_stays_whole():
    from orchestrator.cli.wrap import wrap_text

    path = "/tmp/" + "x" * 90
    text = f"bench: run 20261122-081500-a1b2c3 complete → {path} (600 samples, all verified)"
    lines = wrap_text(text, 40).splitlines()
    assert " ".join(" ".join(lines).split()) == text  # no word cut, none lost
    assert [line for line in lines if len(line) > 40] == [f"  {path}"]
    assert all(line.startswith("  ") for line in lines[1:])  # hanging: one message
    assert wrap_text("  indented words " * 5, 30).splitlines()[1].startswith("    ")


def test_piped_with_no_columns_a_line_stays_whole(monkeypatch):
    import io

    from orchestrator.cli.options import console
    from orchestrator.cli.wrap import wrap_width

    monkeypatch.delenv("COLUMNS", raising=False)
    assert wrap_width(io.StringIO()) is None
    monkeypatch.setenv("COLUMNS", "80")
    assert wrap_width(io.StringIO()) == 80
    out = console()
    out.file = io.StringIO()
    out.print("bench: [bold]note[/]: " + "word " * 30)
    printed = out.file.getvalue().splitlines()
    assert len(printed) == 3 and max(len(line) for line in printed) <= 80
    assert printed[0].startswith("bench: note: word")


def test_a_setup_command_wrapped_for_the_terminal_still_pastes_into_a_shell():
    import shlex

    from orchestrator.cli.wrap import shell_command, shell_comment

    parts = ["gcloud", "iam", "roles", "create", "benchSelfDelete", "--project=my project"]
    parts += ["--permissions=compute.instances.delete,compute.disks.delete", "--quiet"]
    wrapped = shell_command(parts, 40)
    wide = [line for line in wrapped.splitlines() if len(line) > 40]
    assert wide == ["    --permissions=compute.instances.delete,compute.disks.delete \\"]
    assert shlex.split(wrapped.replace(" \\\n", " ")) == parts
    assert all(line.endswith(" \\") for line in wrapped.splitlines()[:-1])
    comment = shell_comment("# 3. a custom role holding only what a VM needs to delete itself", 30)
    assert all(line.startswith("#") for line in comment.splitlines())


# --- no project, no --backend (item 6) ------------------------------------------------------


def test_launch_with_no_project_and_no_backend_refuses_naming_both_ways(bench_env, capsys):
    from orchestrator.cli import main

    assert main(["launch", "--budget", "1.00"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no GCP project is configured" in err
    assert "bench.toml" in err and "--backend local" in err
    assert not (bench_env / "state" / "runs.sqlite").exists()  # nothing launched


@pytest.mark.slow
def test_render_gce_without_a_project_prints_the_script_with_marked_placeholders(bench_env, capsys):
    from orchestrator.cli import main

    assert main(["render", "--backend", "gce", "--plan", "default"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("#!/") and "placeholder-bucket" in out
    assert "# PLACEHOLDERS: project = 'placeholder-project', bucket = 'placeholder-bucket'" in err
    assert main(["render", "--backend", "gce", "--plan", "default", "--bucket", "mine-1"]) == 0
    out, err = capsys.readouterr()
    assert "placeholder-bucket" not in out + err and "project = 'placeholder-project'" in err


# --- doctor's whole checklist (item 5) -------------------------------------------------------


def test_doctor_with_nothing_configured_prints_the_whole_checklist(bench_env, capsys):
    from orchestrator.cli import main

    assert main(["doctor"]) == 2
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split(":")[0] in ("✓ gcloud installed", "! gcloud installed")
    assert lines[1].startswith("✗ project set:") and lines[2].startswith("✗ bucket set:")
    assert "bench setup" in lines[2]
    not_run = [line for line in lines if line.endswith("not run: needs project and bucket")]
    names = [line.removeprefix("- ").split(":")[0] for line in not_run]
    assert names[:3] == ["credentials", "project", "Compute API"] and "GPU quota" in names
    assert "bench doctor" in err


def test_the_readmes_gcp_steps_run_in_an_order_that_works():
    """gcloud first; bench.toml (which `bench setup` reads) before `bench setup`."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Pointing bench at a GCP project", 1)[1].split("\n## ", 1)[0]
    steps = [line for line in section.splitlines() if line[:3] in {f"{n}. " for n in range(9)}]
    assert "Google Cloud CLI" in steps[0] and "install" in steps[0].lower()
    toml = next(i for i, step in enumerate(steps) if "bench.toml" in step)
    setup = next(i for i, step in enumerate(steps) if "`bench setup`" in step)
    assert toml < setup
