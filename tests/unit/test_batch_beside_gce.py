"""`bench doctor` and `bench setup` take every billed backend these settings use, through
the protocols alone: two clouds registered under new names (as backends/batch/ is beside
backends/gce/) are both checked and both set up, in registration order, with no change to
service/."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.backends import names, registry
from orchestrator.backends.base import Check, SetupStep
from orchestrator.backends.local import LocalBackend
from orchestrator.config import BenchConfig
from orchestrator.service.context import Context
from orchestrator.service.doctor import run_doctor
from orchestrator.service.setup import apply_setup, plan_setup


class FirstCloud(LocalBackend):
    name = "first-cloud"
    capabilities = replace(LocalBackend.capabilities, billed=True, title="First")
    in_use = True

    @classmethod
    def unsearched_reason(cls, config):
        return None if cls.in_use else "not configured"

    def doctor_checks(self, gpu_keys, probe):
        yield Check(f"{self.name} project", True, "fine")

    def setup_steps(self, launchers=()):
        return [SetupStep(f"{self.name} grant", ["true"], lambda client: "granted")]

    def apply_setup(self, steps, on_done, on_wait):
        for step in steps:
            on_done(step, step.apply(None))

    def setup_followups(self, launchers=()):
        return [f"{self.name}: done"]


class SecondCloud(FirstCloud):
    name = "second-cloud"
    capabilities = replace(FirstCloud.capabilities, title="Second")


@pytest.fixture
def clouds(monkeypatch, tmp_path):
    monkeypatch.setattr(
        names,
        "BACKENDS",
        {
            "local": names.BACKENDS["local"],
            "first-cloud": f"{__name__}:FirstCloud",
            "second-cloud": f"{__name__}:SecondCloud",
        },
    )
    registry.backend_class.cache_clear()
    yield Context(BenchConfig(state_dir=tmp_path))
    registry.backend_class.cache_clear()
    SecondCloud.in_use = True


def test_doctor_and_setup_take_each_billed_backend_in_use_in_order(clouds):
    assert [c.name for c in run_doctor(clouds)] == ["first-cloud project", "second-cloud project"]
    plan = plan_setup(clouds)
    assert [step.title for step in plan.steps] == ["first-cloud grant", "second-cloud grant"]
    assert plan.followups == ["first-cloud: done", "second-cloud: done"]
    done = []
    apply_setup(clouds, plan, lambda step, what: done.append((step.title, what)))
    assert done == [("first-cloud grant", "granted"), ("second-cloud grant", "granted")]


def test_a_billed_backend_these_settings_do_not_use_is_left_out(clouds):
    SecondCloud.in_use = False
    assert [c.name for c in run_doctor(clouds)] == ["first-cloud project"]
    assert [step.title for step in plan_setup(clouds).steps] == ["first-cloud grant"]
