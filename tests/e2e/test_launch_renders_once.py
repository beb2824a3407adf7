"""A launch renders its scripts once, from the spec as it starts the run (the rate and time
cap at the boot disk's real size, the run's grants signed): the request check holds to
GCE's metadata limits the very script the insert sends, and the launch's result names its
sha256. Before, the check rendered its own script, unsigned and at the rate assumed before
the image was read, and the start rendered another."""

from __future__ import annotations

import hashlib
import json

import pytest

from orchestrator import render
from orchestrator.backends.gce.backend import GceBackend
from orchestrator.cli import main
from orchestrator.service import launch as launch_service
from tests.e2e.test_gce_cli import image_gb, plan_file

pytestmark = pytest.mark.timeout(120)


def inserted_script(body: dict, key: str = "startup-script") -> str:
    (script,) = [item["value"] for item in body["metadata"]["items"] if item["key"] == key]
    return script


def test_the_script_checked_is_the_script_launched_rendered_once(
    gce, tmp_path, monkeypatch, capsys
):
    gce.config.run_scripts = False
    renders, checked, results = [], [], []
    real_context, real_check = render.startup_context, GceBackend.instance_request_json
    real_launch = launch_service.launch

    def counted_render(spec, *args, **kwargs):  # each startup script's render asks for it
        renders.append(spec.run_id)
        return real_context(spec, *args, **kwargs)

    def recorded_check(self, spec, startup, shutdown, *args, **kwargs):
        checked.append(startup)
        return real_check(self, spec, startup, shutdown, *args, **kwargs)

    def kept_launch(*args, **kwargs):
        results.append(real_launch(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(render, "startup_context", counted_render)
    monkeypatch.setattr(GceBackend, "instance_request_json", recorded_check)
    monkeypatch.setattr(launch_service, "launch", kept_launch)
    # The image's disk is not the size assumed before it is read: the rate, and so the
    # script's cost line, changes once it is.
    assert image_gb(gce) != 0
    assert main(["launch", "--backend", "gce", "--budget", "1", "--plan", plan_file(tmp_path)]) == 0
    (body,) = gce.inserted
    launched = inserted_script(body)
    assert len(renders) == 1  # one render: the one sent
    assert checked == [launched]  # the request check saw those very bytes
    cost = json.loads(launched.split("COST_JSON=", 1)[1].split("\n", 1)[0].strip("'"))
    assert cost["max_run_seconds"] == int(body["scheduling"]["maxRunDuration"]["seconds"])
    (result,) = results
    assert result.scripts.startup == launched
    assert result.scripts.shutdown == inserted_script(body, "shutdown-script")
    assert result.scripts.startup_sha256 == hashlib.sha256(launched.encode()).hexdigest()
