"""What keeps one run's VM away from other runs' things, on the controller's side: no run's
store key or instance name carries a secret (every name is public: the run's own grants are
signed at launch, backends/gce/signing.py), and the shared build cache takes
only what a trusted run may build: a run of a user's tree its own tree's build alone, under
the key the controller derives for it (docs/security.md)."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli.launch import cache_trusted
from orchestrator.registry import RunRecord, RunRegistry
from orchestrator.service.cache import MAX_CANDIDATES, CacheDecision, promote_cache_candidates
from orchestrator.service.plan_options import with_user_kernels
from orchestrator.service.plans import resolve_plan
from orchestrator.stores.local import LocalStore
from results_schema import Plan
from results_schema.kernel_contract import KernelContract, KernelIdentity, UserKernel
from tests.unit.test_gce_builder import make_spec

# GCE's resource name rule (https://cloud.google.com/compute/docs/naming-resources).
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_no_name_of_a_run_carries_a_secret():
    spec = make_spec()
    assert spec.run_prefix == f"runs/{spec.run_id}"
    assert spec.instance_name == f"bench-{spec.run_id}"
    assert GCE_NAME.match(spec.instance_name) and len(spec.instance_name) <= 63


def test_the_registry_keeps_the_trust_and_a_legacy_runs_secret(tmp_path):
    registry = RunRegistry(tmp_path / "runs.sqlite")
    spec = make_spec(cache_trusted=True)
    registry.add(RunRecord(**spec.record_fields()))
    record = registry.get(spec.run_id)
    assert record.run_key == spec.run_prefix and record.cache_trusted is True
    legacy = cache_record(True, run_id="20261001-120000-fedcba")  # launched with a secret
    registry.add(legacy)
    assert registry.get(legacy.run_id).run_key == f"runs/{legacy.run_id}-{'a' * 26}"


def cache_record(trusted: bool, run_id: str = "20261125-120000-abcdef", secret: str = "a" * 26):
    """A finished run as fetch sees it, for the cache's promotion."""
    return RunRecord(
        run_id=run_id,
        backend="gce",
        plan="default",
        budget_usd=1.0,
        rate_usd_per_hour=0.3,
        max_run_seconds=600,
        estimated_seconds=60,
        created_at="2026-11-25T12:00:00+00:00",
        run_secret=secret,
        cache_trusted=trusted,
    )


class CopyOrder(LocalStore):
    """The local store, noting the order of its copies."""

    def __init__(self, root):
        super().__init__(root)
        self.copied: list[str] = []

    def copy(self, source: str, dest: str) -> None:
        super().copy(source, dest)
        self.copied.append(dest)


TOOLCHAIN = "-" + "5" * 24  # what the target appends to a tree's prefix


def user_kernel(name: str = "mine", tree: str = "ab" * 32, **contract) -> UserKernel:
    declared = KernelContract(
        **{"name": name, "entry": "mine.ops:attention", "build": "make", **contract}
    )
    source = KernelIdentity(tree_sha256=tree)
    return UserKernel(identity=name, directory="user_kernel", contract=declared, source=source)


def kernel_run_plan(*kernels: UserKernel) -> Plan:
    """What `launch --kernel` makes of cpu-smoke: the user's kernel its candidate."""
    plan, _ = resolve_plan("cpu-smoke", "local", has_gpu=False)
    return with_user_kernels(plan, list(kernels) or [user_kernel()], None, [])


def our_kernel_plan() -> Plan:
    """The default plan as launch makes it: our kernel's tree (flash_kernel/) among them."""
    return resolve_plan("default", "gce", has_gpu=True)[0]


def plant(store: LocalStore, record: RunRecord, *entries: str, files=(".tar.zst", ".sha256")):
    for entry in entries:
        for suffix in files:
            store.put_bytes(f"{record.run_key}/cache/{entry}{suffix}", entry.encode())


def decided(decisions) -> dict[str, tuple[bool, str]]:
    return {d.entry: (d.promoted, d.why) for d in decisions}


def test_a_run_of_bench_own_kernel_gives_the_environment_and_our_build(tmp_path):
    store, record, plan = CopyOrder(tmp_path / "store"), cache_record(True), our_kernel_plan()
    (ours,) = plan.user_kernels
    flash = ours.build_cache_prefix() + TOOLCHAIN
    plant(store, record, "env/env-0123", flash, "user-kernels/flash-0123" + TOOLCHAIN)
    plant(store, record, "kernels/k-sm_89", "env/.hidden", "other/x")
    plant(store, record, "env/half", files=(".tar.tar",))
    plant(store, record, "env/a/b", files=(".sha256",))
    decisions = decided(promote_cache_candidates(store, record, plan))
    assert {e for e, (promoted, _) in decisions.items() if promoted} == {"env/env-0123", flash}
    assert decisions[flash] == (True, "flash's build")
    assert decisions["user-kernels/flash-0123" + TOOLCHAIN] == (
        False,
        "no key bench derives for this run's trees (flash)",
    )
    for name in ("kernels/k-sm_89", "env/.hidden", "other/x", "env/a/b"):
        assert decisions[name] == (False, "no cache entry's name (env/KEY or user-kernels/KEY)")
    assert decisions["env/half"] == (False, "not an entry's two files (a tarball and its .sha256)")
    assert store.copied == [  # each digest after its tarball
        "cache/env/env-0123.tar.zst",
        "cache/env/env-0123.sha256",
        f"cache/{flash}.tar.zst",
        f"cache/{flash}.sha256",
    ]
    assert sorted(store.list("cache/")) == sorted(store.copied)
    assert store.get_bytes("cache/env/env-0123.tar.zst") == b"env/env-0123"


def test_a_kernel_run_gives_its_own_trees_build_alone(tmp_path):
    """Its build ran on the machine and could have written any candidate: the environment
    and our kernel's build are refused saying so, and of kernel trees' builds only the one
    under the prefix the controller derives for its tree (not the machine's say) is taken."""
    store, record = LocalStore(tmp_path / "store"), cache_record(True)
    plan = kernel_run_plan()
    (mine,) = plan.user_kernels
    own = mine.build_cache_prefix() + TOOLCHAIN
    other_tree = user_kernel(tree="cd" * 32).build_cache_prefix() + TOOLCHAIN
    other_build = user_kernel(build="make fast").build_cache_prefix() + TOOLCHAIN
    flash = our_kernel_plan().user_kernels[0].build_cache_prefix() + TOOLCHAIN
    planted = ["env/env-0123", own, other_tree, other_build, flash, own + "0"]
    plant(store, record, *planted)
    decisions = decided(promote_cache_candidates(store, record, plan))
    assert decisions[own] == (True, "mine's build")
    assert decisions["env/env-0123"] == (
        False,
        "the environment comes only from runs that build nothing but bench's own kernel; "
        "this run built mine",
    )
    for name in (other_tree, other_build, flash, own + "0"):
        assert decisions[name] == (False, "no key bench derives for this run's trees (mine)")
    assert sorted(store.list("cache/")) == [f"cache/{own}.sha256", f"cache/{own}.tar.zst"]


def test_our_kernels_build_beside_a_users_tree_is_refused(tmp_path):
    """A plan timing both (a plan file naming flash beside a user's tree): the user's build
    ran beside ours, so ours is not taken."""
    store, record = LocalStore(tmp_path / "store"), cache_record(True)
    (ours,) = our_kernel_plan().user_kernels
    plan = kernel_run_plan(user_kernel())
    plan = plan.model_copy(
        update={
            "compared_with": [*plan.compared_with, "flash"],
            "user_kernels": [*plan.user_kernels, ours],
        }
    )
    flash = ours.build_cache_prefix() + TOOLCHAIN
    plant(store, record, flash)
    (decision,) = promote_cache_candidates(store, record, Plan.model_validate(plan.model_dump()))
    assert (decision.promoted, decision.why) == (
        False,
        "our kernel's build (flash) comes only from runs that build nothing but bench's own "
        "kernel; this run built mine",
    )


@pytest.mark.parametrize(
    ("trusted", "plan", "why"),
    [
        (
            False,
            "ours",
            "the run was launched --untrusted (or under CI): it gives the cache nothing",
        ),
        (True, None, "the registry knows no plan of this run: whose build it is is unknown"),
    ],
)
def test_an_untrusted_run_or_one_of_unknown_plan_gives_nothing(tmp_path, trusted, plan, why):
    store, record = LocalStore(tmp_path / "store"), cache_record(trusted)
    plan = our_kernel_plan() if plan else None
    plant(store, record, "env/env-0123", "user-kernels/flash-0123" + TOOLCHAIN)
    decisions = promote_cache_candidates(store, record, plan)
    assert [(d.promoted, d.why) for d in decisions] == [(False, why)] * 2
    assert store.list("cache/") == []


def test_past_the_bound_the_candidates_are_refused_unread(tmp_path):
    store, record = LocalStore(tmp_path / "store"), cache_record(True)
    plant(store, record, *(f"env/env-{n:02d}" for n in range(MAX_CANDIDATES + 4)))
    decisions = promote_cache_candidates(store, record, our_kernel_plan())
    assert len(decisions) == MAX_CANDIDATES + 1 and all(d.promoted for d in decisions[:-1])
    assert decisions[-1].line() == "cache: refused 4 more entries: a run saves at most 16"


def test_a_decision_line_shows_the_machines_text_inert():
    decision = CacheDecision("env/\x1b[2Jx" + "y" * 200, False, "no cache entry's name")
    line = decision.line()
    assert "\x1b" not in line and "\\x1b[2J" in line and len(line) < 200


@pytest.mark.parametrize(
    ("flag", "ci", "trusted"),
    [(None, None, True), (None, "true", False), (True, "true", True), (False, None, False)],
)
def test_a_launch_is_untrusted_under_ci_unless_told_otherwise(monkeypatch, flag, ci, trusted):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    assert cache_trusted(flag) is trusted
