"""A user kernel tree's build, cached in the store (startup_templates/partials/user_build.sh.j2):
run by bash through the local backend's store_put/store_get, as the build phase runs it. The
first run builds and saves what the build changed in the tree as its candidate; `bench fetch`
of a trusted run promotes it; a later run with the same tree, command and toolchain copies it
in and skips the command; another tree misses; a corrupt entry, or one filed under another
key, is rebuilt, never used."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benches import confinement
from orchestrator.render import template_environment, user_kernel_builds
from orchestrator.service.cache import promote_cache_candidates
from orchestrator.stores.local import LocalStore
from results_schema.kernel_contract import UserKernelBuild
from tests.limits import HANG_SECONDS
from tests.unit.test_render import shellcheck
from tests.unit.test_run_containment import cache_record, kernel_run_plan, user_kernel

# Builds in place, as `python setup.py build_ext --inplace` does: an output file in the
# package, a build/ folder, an edited file; and counts how often it ran, outside the tree.
BUILD = (
    "echo compiling; echo run >> ../compiles; mkdir -p build/lib && echo obj > build/lib/a.o"
    " && echo 'BUILT = 1' > pkg/_built.py && echo '# stamped' >> pkg/ops.py"
)
TREE_SHA = "ab" * 32


def user_builds(command: str = BUILD, requirements: str = "", env=()) -> list[dict]:
    return [
        {
            "directory": "user_kernel",
            "identity": "mine",
            "timeout": 60,
            "requirements": requirements,
            "command": command,
            "env": list(env),
            "after_the_others": False,
        }
    ]


def render_build(command: str = BUILD, requirements: str = "", env=()) -> str:
    return (
        template_environment()
        .get_template("partials/build.sh.j2")
        .render(plan_name="p", user_kernel_builds=user_builds(command, requirements, env))
    )


class Machine:
    """A fresh machine per run: its own work dir (payload, plan.json), one shared store."""

    def __init__(self, root: Path):
        self.root, self.store_root, self.runs = root, root / "store", 0
        env = template_environment()
        local = env.get_template("partials/backend/local.sh.j2")
        (root / "backend.sh").write_text(local.render(store_root=str(self.store_root)))
        (root / "cache.sh").write_text(env.get_template("partials/cache.sh.j2").render())
        partial = env.get_template("partials/confinement.sh.j2")
        (root / "confinement.sh").write_text(
            partial.render(tree_sha256s="", kernel_folders=["user_kernel"], kernel_users="")
        )

    def run(self, command: str = BUILD, tree_sha: str = TREE_SHA, requirements: str = "", env=()):
        """A launch of tree `tree_sha` whose contract has this build, requirements and env."""
        self.runs += 1
        work = self.root / f"machine{self.runs}"
        tree = work / "payload" / "user_kernel"
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "ops.py").write_text("def attention(q, k, v, *, causal, scale):\n")
        (tree / "pkg" / "__init__.py").write_text("")
        (work / "python.path").write_text(sys.executable)
        # What runs each build (benches/confinement.py), as the payload carries it.
        (work / "payload" / "benches").mkdir()
        shutil.copy(confinement.__file__, work / "payload" / "benches")
        contract = {"build": command, "requirements": requirements.split()}
        contract["env"] = dict(assignment.split("=", 1) for assignment in env)
        self.plan = kernel_run_plan(user_kernel(tree=tree_sha, **contract))
        (work / "plan.json").write_text(self.plan.model_dump_json())
        builds = user_kernel_builds(self.plan)
        script = template_environment().get_template("partials/build.sh.j2")
        (work / "build.sh").write_text(script.render(plan_name="p", user_kernel_builds=builds))
        script = (
            "set -Eeuo pipefail\n"
            'log() { echo "[log] $*"; }\n'
            'fail() { echo "FAIL: $*" >&2; exit 1; }\n'
            f"export WORK_DIR={work} RUN_KEY=runs/r1 PLAN_NAME=p\n"
            f"payload_python() {{ cat {work}/python.path; }}\n"
            f"source {self.root}/backend.sh; source {self.root}/cache.sh; source {work}/build.sh\n"
            f"source {self.root}/confinement.sh\n"
            # The trees' checks are tests/unit/test_tree_checks.py's: here, the cache alone.
            "check_tree() { :; }\n"
            "export -f log fail payload_python store_put store_get phase_build check_tree\n"
            "bash -Eeuo pipefail -c phase_build\n"
        )
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, cwd=work, timeout=HANG_SECONDS
        )
        assert done.returncode == 0, done.stdout + done.stderr
        done.tree = tree
        done.builds = [
            UserKernelBuild.model_validate(b)
            for b in json.loads((work / "user_builds.json").read_text())
        ]
        return done

    def compiles(self) -> int:
        counts = self.root.glob("machine*/payload/compiles")
        return sum(len(p.read_text().splitlines()) for p in counts)

    def promote(self) -> list[str]:
        """What `bench fetch` of trusted run r1, launched as the last run, does with its
        candidates (service/cache.py): the entries it promoted."""
        record = cache_record(True, run_id="r1", secret="")
        decisions = promote_cache_candidates(LocalStore(self.store_root), record, self.plan)
        return [decision.entry for decision in decisions if decision.promoted]

    def entries(self, suffix: str) -> list[Path]:
        return sorted((self.store_root / "cache" / "user-kernels").glob(f"*{suffix}"))


@pytest.fixture
def machine(tmp_path) -> Machine:
    return Machine(tmp_path)


@pytest.mark.slow
def test_the_same_tree_hits_the_cache_and_another_tree_misses(machine):
    first = machine.run()
    assert machine.compiles() == 1 and "compiling" in first.stdout
    (built,) = first.builds
    assert (built.identity, built.outcome) == ("mine", "built")
    assert built.cache_key.startswith("user-kernels/mine-")
    assert f"cache: saved {built.cache_key} as this run's candidate" in first.stdout
    assert machine.entries(".sha256") == []  # only a candidate until a trusted fetch
    assert machine.promote() == [built.cache_key]
    # The target's key: the prefix the controller derives for the tree, then the toolchain's.
    assert built.cache_key.startswith(machine.plan.user_kernels[0].build_cache_prefix() + "-")

    second = machine.run()
    assert machine.compiles() == 1, "the same tree must not build again"
    assert f"build: cache hit {built.cache_key} (mine)" in second.stdout
    assert "compiling" not in second.stdout
    assert second.builds[0].outcome == "cached"
    assert second.builds[0].cache_key == built.cache_key
    assert (second.tree / "pkg" / "_built.py").read_text() == "BUILT = 1\n"
    assert (second.tree / "build" / "lib" / "a.o").read_text() == "obj\n"
    assert (second.tree / "pkg" / "ops.py").read_text().endswith("# stamped\n")

    other = machine.run(tree_sha="cd" * 32)
    assert machine.compiles() == 2 and other.builds[0].outcome == "built"
    assert other.builds[0].cache_key != built.cache_key
    changed = machine.run(command=BUILD + " && true")  # another command: another key
    assert machine.compiles() == 3 and changed.builds[0].cache_key != built.cache_key
    pinned = machine.run(requirements="pip==" + pip_version())  # other requirements
    assert machine.compiles() == 4 and pinned.builds[0].cache_key != built.cache_key
    assert machine.promote() == [pinned.builds[0].cache_key]  # the controller's key too


def pip_version() -> str:
    from importlib import metadata

    return metadata.version("pip")


@pytest.mark.slow
def test_a_corrupt_entry_is_rebuilt_and_saved_again(machine):
    machine.run()
    machine.promote()
    (tarball,) = [p for p in machine.entries("") if ".tar." in p.name]
    tarball.write_bytes(tarball.read_bytes()[:-7] + b"garbage")
    again = machine.run()
    assert "is corrupt" in again.stdout and machine.compiles() == 2
    assert again.builds[0].outcome == "built"
    assert (again.tree / "pkg" / "_built.py").is_file()
    machine.promote()
    machine.run()
    assert machine.compiles() == 2  # the rebuilt entry was saved and promoted


@pytest.mark.slow
def test_an_entry_filed_under_another_key_is_not_used(machine):
    """An entry whose digest is right but which was saved for another key (copied, or
    planted by hand): its own key file says so, and the build runs."""
    machine.run(tree_sha="cd" * 32)
    machine.promote()
    (other_digest,) = machine.entries(".sha256")
    wanted = machine.run().builds[0].cache_key  # builds (its candidate is not promoted)
    assert machine.compiles() == 2
    fmt = other_digest.read_text().split()[1]
    other_tarball = other_digest.with_name(other_digest.name.replace(".sha256", f".tar.{fmt}"))
    planted = other_digest.with_name(Path(wanted).name)
    planted.with_name(f"{planted.name}.tar.{fmt}").write_bytes(other_tarball.read_bytes())
    planted.with_name(f"{planted.name}.sha256").write_bytes(other_digest.read_bytes())
    third = machine.run()
    assert f"cache: {wanted} holds no build saved under that key: rebuilding" in third.stdout
    assert machine.compiles() == 3 and third.builds[0].outcome == "built"


@pytest.mark.slow
def test_a_build_that_changes_nothing_in_its_tree_is_not_cached(machine):
    done = machine.run(command="echo compiling; echo run >> ../compiles")
    assert "the build changed no file of its tree: nothing to save" in done.stdout
    machine.promote()
    assert machine.entries("") == []
    machine.run(command="echo compiling; echo run >> ../compiles")
    assert machine.compiles() == 2


@pytest.mark.slow
def test_a_failed_build_is_recorded_and_never_cached(machine):
    failing = "echo half > pkg/_built.py; echo 'error: no compiler' >&2; exit 3"
    done = machine.run(command=failing)
    (failed,) = done.builds
    assert (failed.outcome, failed.message) == ("failed", "error: no compiler")
    assert (done.tree.parent / "user_kernel.build-failed").read_text() == "error: no compiler\n"
    assert machine.promote() == [] and machine.entries("") == []


@pytest.mark.slow
def test_the_rendered_build_is_shellcheck_clean():
    script = "#!/usr/bin/env bash\n" + render_build(
        'pip install -e . && echo "$(touch /tmp/pwned)" \'; rm -rf ~ #'
    )
    result = shellcheck(script)
    assert result.returncode == 0, result.stdout


# Our kernel's contract (kernels/bench-kernel.toml) builds into FLASH_KERNEL_CACHE, which its
# env points into the tree; this build writes there as build.py does, and records the path.
ENV_BUILD = (
    'echo run >> ../compiles; mkdir -p "$FLASH_KERNEL_CACHE/key1"'
    ' && echo lib > "$FLASH_KERNEL_CACHE/key1/libflash_attention.so"'
    ' && echo "$FLASH_KERNEL_CACHE" > ../cache_dir'
)


@pytest.mark.slow
def test_a_build_into_its_contracts_env_is_cached_with_the_tree(machine):
    """The env reaches the build with '{tree}' as this machine's tree, an output it puts in
    the tree is saved and restored as any, and the key does not depend on where the tree
    lies (each machine's differs)."""
    env = ["FLASH_KERNEL_CACHE={tree}/.kernel-cache"]
    first = machine.run(command=ENV_BUILD, env=env)
    (built,) = first.builds
    assert built.outcome == "built" and machine.compiles() == 1
    cache_dir = (first.tree.parent / "cache_dir").read_text().strip()
    assert cache_dir == f"{first.tree}/.kernel-cache"
    machine.promote()

    second = machine.run(command=ENV_BUILD, env=env)
    assert second.tree != first.tree
    assert second.builds[0].outcome == "cached" and machine.compiles() == 1
    assert second.builds[0].cache_key == built.cache_key
    library = second.tree / ".kernel-cache" / "key1" / "libflash_attention.so"
    assert library.read_text() == "lib\n"

    other = machine.run(command=ENV_BUILD, env=["FLASH_KERNEL_CACHE={tree}/.other"])
    assert other.builds[0].cache_key != built.cache_key  # another env: another key


def test_our_contract_renders_its_build_and_env():
    from orchestrator.kernel_tree.own import own_kernel
    from orchestrator.render import user_kernel_builds
    from results_schema import Plan

    (flash,) = own_kernel("flash", None).kernels
    from orchestrator.service.plans import plans_dir

    default = json.loads((plans_dir() / "default.json").read_text())
    plan = Plan.model_validate({**default, "user_kernels": [flash]})
    (build,) = user_kernel_builds(plan)
    assert build["env"] == ["FLASH_KERNEL_CACHE={tree}/.kernel-cache"]
    assert build["command"] == "python3 -m kernels.flash_attention.build"
    checked = shellcheck("#!/usr/bin/env bash\n" + render_build(build["command"], "", build["env"]))
    assert checked.returncode == 0, checked.stdout
