"""The payload tarball: only what the VM runs, the same bytes for the same tree."""

from __future__ import annotations

import io
import shutil
import tarfile

import pytest

from orchestrator.kernel_tree.collect import package_dir
from orchestrator.payload import PAYLOAD_PACKAGES, build_payload
from orchestrator.service.plan_options import PlanOptions, shape_plan
from orchestrator.service.plans import resolve_plan

REPO = package_dir("orchestrator").parent


def names_in(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getnames()


@pytest.mark.slow
def test_identical_trees_give_identical_bytes_wherever_they_are(tmp_path):
    plan, _ = resolve_plan("default", "gce")
    first, second = build_payload(plan), build_payload(plan)
    assert first.data == second.data and first.sha256 == second.sha256
    copy = tmp_path / "elsewhere" / "bench"
    for name in PAYLOAD_PACKAGES:
        shutil.copytree(REPO / name, copy / name)
    # A copy's files are new (other mtimes, maybe other modes): the tarball must not care.
    (copy / "benches" / "reference.py").touch()
    assert build_payload(plan, source_root=copy).sha256 == first.sha256


def test_a_changed_file_changes_the_sha256(tmp_path):
    plan, _ = resolve_plan("default", "gce")
    copy = tmp_path / "bench"
    for name in PAYLOAD_PACKAGES:
        shutil.copytree(REPO / name, copy / name)
    before = build_payload(plan, source_root=copy).sha256
    with (copy / "benches" / "reference.py").open("a") as f:
        f.write("\n# edited\n")
    assert build_payload(plan, source_root=copy).sha256 != before


def test_the_payload_holds_what_the_vm_runs_and_nothing_else():
    plan, _ = resolve_plan("default", "gce")
    shaped = shape_plan(plan, PlanOptions())
    names = names_in(build_payload(shaped.plan, kernel_trees=shaped.kernel_trees).data)
    assert "plan.json" in names and "benches/runner.py" in names
    # Our kernel travels as a kernel tree, its contract at that tree's root.
    assert "flash_kernel/kernels/flash_attention/csrc/flash_api.h" in names
    assert "flash_kernel/bench-kernel.toml" in names
    assert "results_schema/record.py" in names
    for name in names:
        top = name.split("/")[0]
        assert top in {*PAYLOAD_PACKAGES, "flash_kernel", "plan.json"}, name
        assert not name.startswith(("tools/", "tests/")), name
        assert "__pycache__" not in name and not name.endswith((".pyc", ".md", ".so")), name
        assert not name.startswith("results_schema/jsonschema"), name
    # The developer scripts live in tools/, outside every payload package.
    assert (REPO / "tools" / "crosscheck.py").is_file()
    assert not any("crosscheck" in n or "devrun_" in n for n in names)


def test_cache_directories_in_the_tree_stay_out(tmp_path):
    plan, _ = resolve_plan("default", "gce")
    copy = tmp_path / "bench"
    for name in PAYLOAD_PACKAGES:
        shutil.copytree(REPO / name, copy / name)
    (copy / "benches" / "__pycache__").mkdir(exist_ok=True)
    (copy / "benches" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (copy / "benches" / "build").mkdir()
    (copy / "benches" / "build" / "lib.so").write_bytes(b"\0")
    assert names_in(build_payload(plan, source_root=copy).data) == names_in(
        build_payload(plan).data
    )
