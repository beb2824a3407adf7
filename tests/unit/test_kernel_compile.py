"""CI checks of the kernel package without a GPU: generated units, nvcc compile, validation."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kernels.flash_attention import build, generate

EXPECTED_UNITS = {
    f"fwd_hdim{d}_{t}{'_causal' if c else ''}"
    for t in ("fp16", "bf16")
    for d in (64, 128)
    for c in (False, True)
}


def test_generator_writes_exactly_the_expected_units(tmp_path: Path):
    written = generate.write_sources(tmp_path)
    names = {p.stem for p in written}
    assert names == EXPECTED_UNITS | {"flash_dispatch"}
    assert {p.stem for p in tmp_path.glob("*.cu")} == names  # nothing else left behind
    dispatch = (tmp_path / "flash_dispatch.cu").read_text()
    for unit in generate.units():
        assert f"return {unit.symbol}(p, s);" in dispatch  # every unit is reachable
        source = (tmp_path / f"{unit.name}.cu").read_text()
        assert "#include <torch" not in source and f'extern "C" int {unit.symbol}(' in source


def test_sources_include_no_torch_header():
    for path in build.source_files():
        if path.suffix in {".h", ".cuh", ".cu"}:
            includes = [ln for ln in path.read_text().splitlines() if ln.startswith("#include")]
            assert includes, path.name
            for line in includes:
                assert not any(n in line for n in ("torch", "ATen", "c10")), f"{path.name}: {line}"


def test_source_hash_covers_generator_and_sources():
    names = {p.name for p in build.source_files()}
    assert {"generate.py", "flash_fwd_kernel.cuh", "flash_api.h"} <= names
    assert len(build.source_sha256()) == 64


@pytest.mark.parametrize("arch, expected", [("sm_89", "sm_89"), ("8.9", "sm_89"), ("90", "sm_90")])
def test_normalize_arch(arch, expected):
    assert build.normalize_arch(arch) == expected


def test_old_arch_is_refused():
    with pytest.raises(ValueError, match="sm_80 or newer"):
        build.normalize_arch("sm_75")


def test_cache_dir_follows_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("BENCH_KERNEL_CACHE", str(tmp_path))
    assert build.cache_root() == tmp_path


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_every_unit_compiles_for_l4_and_h100(tmp_path: Path):
    """Both arches of each unit go through one pool, sized for CI's 2 cores."""
    nvcc = build.find_nvcc()
    jobs = max(2, min(8, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            arch: pool.submit(
                build.compile_units,
                nvcc,
                tmp_path / arch / "src",
                tmp_path / arch / "obj",
                build.BASE_FLAGS + build.gencode_flags(arch),
                max(1, jobs // 2),
            )
            for arch in ("sm_89", "sm_90")
        }
        for arch, future in futures.items():
            seconds = future.result()
            assert set(seconds) == EXPECTED_UNITS | {"flash_dispatch"}, arch
            objects = {p.stem for p in (tmp_path / arch / "obj").glob("*.o")}
            assert objects == set(seconds), arch


def test_cpu_tensors_are_rejected_with_a_clear_message():
    from kernels.flash_attention import flash_attention

    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="q is on cpu; flash_attention runs on CUDA tensors only"):
        flash_attention(q, q, q)


def test_non_tensor_is_rejected():
    from kernels.flash_attention import flash_attention

    with pytest.raises(ValueError, match="q must be a torch.Tensor, got list"):
        flash_attention([1.0], None, None)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scale_is_rejected_before_anything_runs(scale):
    from kernels.flash_attention import flash_attention

    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        flash_attention(q, q, q, scale=scale)
