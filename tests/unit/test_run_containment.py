"""What keeps one run's VM away from other runs' things, on the controller's side: every run's
store key and instance name carry a secret of its own, and the shared build cache takes
only what a trusted run built (docs/security.md)."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli.launch import cache_trusted
from orchestrator.registry import RunRecord, RunRegistry
from orchestrator.service.cache import promote_cache_candidates
from orchestrator.stores.local import LocalStore
from tests.unit.test_gce_builder import make_spec

# GCE's resource name rule (https://cloud.google.com/compute/docs/naming-resources).
GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_every_run_has_its_own_secret_in_its_key_and_its_instance_name():
    first, second = _fresh_spec(), _fresh_spec()
    assert first.run_secret != second.run_secret and len(first.run_secret) == 26
    for spec in (first, second):
        assert spec.run_prefix == f"runs/{spec.run_id}-{spec.run_secret}"
        assert spec.instance_name == f"bench-{spec.run_id}-{spec.run_secret}"
        assert GCE_NAME.match(spec.instance_name) and len(spec.instance_name) <= 63


def test_the_registry_keeps_the_secret_and_the_trust(tmp_path):
    spec = _fresh_spec(cache_trusted=True)
    registry = RunRegistry(tmp_path / "runs.sqlite")
    registry.add(RunRecord(**spec.record_fields()))
    record = registry.get(spec.run_id)
    assert record.run_key == spec.run_prefix and record.cache_trusted is True


def _fresh_spec(**overrides):
    from orchestrator.spec import RunSpec

    fields = make_spec().model_dump()
    fields.pop("run_secret")
    fields.update(overrides)
    return RunSpec(**fields)


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


@pytest.mark.parametrize("trusted", [True, False])
def test_only_a_trusted_runs_well_named_candidates_enter_the_cache(tmp_path, trusted):
    store = LocalStore(tmp_path / "store")
    key = cache_record(trusted).run_key
    good = ["env/env-0123.tar.zst", "env/env-0123.sha256", "kernels/k-sm_89.tar.tar"]
    odd = ["kernels/lib.so", "other/x.sha256", "kernels/.hidden.sha256", "env/a/b.sha256"]
    for name in good + odd:
        store.put_bytes(f"{key}/cache/{name}", name.encode())
    promoted = promote_cache_candidates(store, cache_record(trusted))
    cached = store.list("cache/")
    if not trusted:
        assert promoted == [] and cached == []
        return
    assert sorted(cached) == sorted(f"cache/{name}" for name in good)
    assert promoted[-1] == "cache/env/env-0123.sha256"  # digests after their tarballs
    assert store.get_bytes("cache/env/env-0123.tar.zst") == b"env/env-0123.tar.zst"


@pytest.mark.parametrize(
    ("flag", "ci", "trusted"),
    [(None, None, True), (None, "true", False), (True, "true", True), (False, None, False)],
)
def test_a_launch_is_untrusted_under_ci_unless_told_otherwise(monkeypatch, flag, ci, trusted):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    assert cache_trusted(flag) is trusted
