"""A launch whose startup script GCE would refuse is refused before anything is written or
created (issue 32): a user kernel whose build command pushes the VM's metadata past Google's
512 KiB in all (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations)
is exit 2 with the figures, no insert, no object in the bucket, no run in the registry. The
script checked is the one a start would send (tests/e2e/test_launch_renders_once.py), at the
rate of the boot disk's real size: the image is read (and the run's grants signed) first, nothing
else."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import main
from orchestrator.registry import RunRegistry
from tests.e2e.test_gce_cli import bucket_objects, plan_file
from tests.e2e.test_user_kernel import example_repository, git

pytestmark = pytest.mark.timeout(120)

BUILD_BYTES = 600_000  # alone more than 512 KiB


def test_a_startup_script_over_googles_metadata_limits_is_refused_before_anything_is_created(
    gce, gcs_server, gcs_bucket, bench_env, tmp_path, capsys
):
    repo = example_repository(tmp_path)
    contract = repo / "bench-kernel.toml"
    entry = 'entry = "simple_attention.ops:attention"'
    long_build = f'build = "true {"x" * BUILD_BYTES}"'
    contract.write_text(contract.read_text().replace(entry, f"{entry}\n{long_build}"))
    git(repo, "commit", "-qam", "a build command of 600 kB")

    args = ["launch", "--backend", "gce", "--budget", "1", "--kernel", str(repo)]
    assert main([*args, "--plan", plan_file(tmp_path)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    figures = re.search(r"would be ([\d,]+) bytes, keys included \(startup-script ([\d,]+),", line)
    assert figures, line
    total, startup = (int(figure.replace(",", "")) for figure in figures.groups())
    assert total > startup > BUILD_BYTES and "startup-script too long" in line
    assert "less than 524,288 (512 KiB) in all" in line and "Nothing was created" in line
    assert "launched run" not in captured.out
    # Only the image read (its disk size prices the run the script carries): no insert.
    assert [request.api_method for request in gce.requests] == ["images.getFromFamily"]
    assert bucket_objects(gcs_server, gcs_bucket) == []  # no payload either
    assert RunRegistry(bench_env / "state" / "runs.sqlite").all() == []
