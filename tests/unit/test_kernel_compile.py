"""CI checks of the kernel package without a GPU: generated units, nvcc compile, validation."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kernels import support
from kernels.flash_attention import build, generate
from tests import nvcc_cache

CONFIGS = {
    f"fwd_hdim{d}_{t}{'_causal' if c else ''}"
    for t in ("fp16", "bf16")
    for d in (64, 128, 256)
    for c in (False, True)
}
# FP8 (e4m3): Hopper only, one unit per head dim holding both causal settings.
FP8_UNITS = {"fwd_hdim128_e4m3_sm90", "fwd_hdim256_e4m3_sm90"}
EXPECTED_UNITS = {
    "sm_89": CONFIGS,
    "sm_90": CONFIGS | {name + "_sm90" for name in CONFIGS} | FP8_UNITS,
}


@pytest.mark.parametrize("arch", EXPECTED_UNITS)
def test_generator_writes_exactly_the_expected_units(tmp_path: Path, arch: str):
    written = generate.write_sources(tmp_path, arch)
    names = {p.stem for p in written}
    assert names == EXPECTED_UNITS[arch] | {"flash_dispatch"}
    assert {p.stem for p in tmp_path.glob("*.cu")} == names  # nothing else left behind
    dispatch = (tmp_path / "flash_dispatch.cu").read_text()
    for unit in generate.units(arch):
        assert f"{unit.symbol}(p, s)" in dispatch  # every unit is reachable
        source = (tmp_path / f"{unit.name}.cu").read_text()
        assert "#include <torch" not in source and f'extern "C" int {unit.symbol}(' in source
    # Each Hopper unit falls back to its sm_80 twin when it declines a call.
    for unit in generate.units(arch):
        if unit.path == generate.SM90:
            twin = generate.Unit(unit.dtype, unit.head_dim, unit.causal)
            assert f"FLASH_ERR_UNSUPPORTED ? {twin.symbol}(p, s) : code" in dispatch


@pytest.mark.parametrize("arch", EXPECTED_UNITS)
def test_fp8_entry_point_reaches_the_fp8_units_and_answers_unsupported_elsewhere(
    tmp_path: Path, arch: str
):
    generate.write_sources(tmp_path, arch)
    dispatch = (tmp_path / "flash_dispatch.cu").read_text()
    assert 'extern "C" int flash_attention_fwd_fp8(const FlashFp8Params* p' in dispatch
    body = dispatch.split("flash_attention_fwd_fp8(const FlashFp8Params* p", 1)[1]
    body = body.split("\n}\n", 1)[0]
    fp8 = generate.fp8_units(arch)
    assert {u.name for u in fp8} == (FP8_UNITS if arch == "sm_90" else set())
    for unit in fp8:
        assert f"p->base.head_dim == {unit.head_dim}) return {unit.symbol}(p, causal, s);" in body
        source = (tmp_path / f"{unit.name}.cu").read_text()
        assert f"launch_fwd_fp8<{unit.head_dim}, true>" in source
        assert f"launch_fwd_fp8<{unit.head_dim}, false>" in source
    # A non-positive (or NaN) scale and the 16-bit entry point's bad sizes are refused first.
    assert "!(p->base.scale > 0.f)" in body and "return FLASH_ERR_BAD_PARAMS;" in body
    assert body.rstrip().endswith("return FLASH_ERR_UNSUPPORTED;")


def test_dispatcher_refuses_a_kv_grouping_that_does_not_divide_the_heads(tmp_path: Path):
    dispatch = generate.dispatcher_source(generate.units("sm_90"))
    assert "p->q_heads_per_kv_head <= 0 || p->heads % p->q_heads_per_kv_head != 0" in dispatch
    assert 'extern "C" int flash_params_version(void) { return FLASH_PARAMS_VERSION; }' in dispatch
    header = (build.CSRC_DIR / "flash_api.h").read_text()
    assert "#define FLASH_PARAMS_VERSION 2" in header


def test_head_dims_are_one_list_and_the_rest_are_refused_with_a_reason():
    from kernels.flash_attention import api

    assert generate.HEAD_DIMS == support.HEAD_DIMS == api.SUPPORTED_HEAD_DIMS == (64, 128, 256)
    for head_dim in support.HEAD_DIMS:
        assert support.head_dim_unsupported_reason(head_dim) is None
    reason = support.head_dim_unsupported_reason(96)
    assert reason.startswith("head_dim 96 is not supported (96 is not a multiple of 64")
    assert reason.endswith("allowed: 64, 128, 256")
    assert "no unit is generated" in support.head_dim_unsupported_reason(80)


def _host_program_lines(program: Path, binary: Path) -> list[str]:
    """What a host program including the kernel's headers prints, compiled for sm_90a, by line."""
    flags = ["-std=c++17", "-arch=sm_90a", f"-I{build.CSRC_DIR}"]
    command = [build.find_nvcc(), *flags, str(program), "-o", str(binary)]
    compiled = nvcc_cache.run(command, program, binary)  # the program itself runs below
    assert compiled.returncode == 0, compiled.stderr
    return subprocess.run([str(binary)], capture_output=True, text=True).stdout.split("\n")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fp8_launcher_takes_no_turns_unless_forced(tmp_path: Path):
    """The shipped FP8 schedule (flags 0) takes no consumers' turns (NOTES "f1", "f2": 6-10 %
    slower with them at D = 128 causal, within the noise elsewhere); the measurement flags
    force either schedule, NO_PINGPONG winning. Host code: runs without a GPU."""
    program = tmp_path / "turns.cu"
    program.write_text(
        '#include <cstdio>\n#include "flash_fwd_sm90_fp8.cuh"\n'
        "#define T(d, c) (int)flash::fp8::fp8_takes_turns<d, c>(p, flags)\n"
        "int main() {\n"
        "  FlashFwdParams p{};\n"
        "  for (int group : {1, 8})\n"
        "    for (int flags = 0; flags < 4; ++flags) {\n"
        "      p.q_heads_per_kv_head = group;\n"
        '      std::printf("%d %d %d%d%d%d\\n", group, flags,\n'
        "        T(128, false), T(128, true), T(256, false), T(256, true));\n"
        "    }\n"
        "}\n"
    )
    lines = _host_program_lines(program, tmp_path / "turns")
    # group flags: turns at (D 128, D 128 causal, D 256, D 256 causal)
    assert lines[:8] == [
        "1 0 0000",  # shipped: none
        "1 1 0000",  # FLASH_FP8_NO_PINGPONG
        "1 2 1111",  # FLASH_FP8_PINGPONG
        "1 3 0000",
        "8 0 0000",
        "8 1 0000",
        "8 2 1111",
        "8 3 0000",
    ]


# D = 64 non-causal launches whose three-consumer grid leaves a partial last round on the H200's
# 132 SMs (NOTES.md h49): (batch, heads, length, the block bf16 takes). Measured there: two
# consumers 1.047-1.048x three at 10 heads, 0.79-0.99x at 8-9 and 11-16; the FA grid's shapes
# (B * S = 16k tokens, 32 heads) 0.86-0.93x at 1024-16k. Below 2048 rows and under two rounds
# of three the rule is not applied.
WAVE_PLAN_SHAPES = [(2, h, 4096, "2" if h == 10 else "3") for h in range(8, 17)]
WAVE_PLAN_SHAPES += [(1, h, 8192, "2" if h == 10 else "3") for h in range(8, 17)]
WAVE_PLAN_SHAPES += [(16384 // s, 32, s, "3") for s in (512, 1024, 2048, 4096, 8192, 16384)]
WAVE_PLAN_SHAPES += [(1, 45, 1024, "3"), (1, 3, 4096, "3"), (1, 2, 256, "2")]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_d64_plan_takes_two_consumers_where_three_leave_a_round_idle(tmp_path: Path):
    """sm90_plan's rounds rule (host code, no GPU): D = 64 non-causal takes two consumer
    warpgroups (128-row tiles) where 23 rounds of theirs take less than 30 of the three-consumer
    grid's (192-row tiles), from 2048 rows and two rounds of three; fp16 alike (h49b);
    FLASH_SM90_WAVE_PLAN=1 is the plan before (three from 257 rows), 2 the rule for bf16 alone.
    With the last round never split (FLASH_SM90_SPLIT_TAIL=1): where it is split (h50), three
    stay (test_d64_split_of_the_last_round). 45 heads at 1024 (3 rounds of either) stays
    three: below 2048 rows."""
    program = tmp_path / "plan.cu"
    shapes = ", ".join(f"{{{b}, {h}, {s}}}" for b, h, s, _ in WAVE_PLAN_SHAPES)
    program.write_text(
        "#ifndef FLASH_SM90_WAVE_PLAN\n#define FLASH_SM90_WAVE_PLAN @VALUE@\n#endif\n"
        "#define FLASH_SM90_SPLIT_TAIL 1\n"
        "#include <cstdio>\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
        '#include "flash_fwd_launch_sm90.cuh"\n'
        "int main() {\n"
        "  FlashFwdParams p{};\n"
        f"  const int shapes[][3] = {{{shapes}}};\n"
        "  for (const auto& s : shapes) {\n"
        "    p.batch = s[0]; p.heads = s[1]; p.seqlen_q = p.seqlen_k = s[2];\n"
        "    const bool bf = flash::sm90_plan<__nv_bfloat16, 64, false>(p, 132).three_consumers;\n"
        "    const bool fp = flash::sm90_plan<__half, 64, false>(p, 132).three_consumers;\n"
        "    std::printf(\"%c%c\\n\", bf ? '3' : '2', fp ? '3' : '2');\n"
        "  }\n"
        "}\n"
    )
    before = [("2" if s <= 256 else "3") for _, _, s, _ in WAVE_PLAN_SHAPES]
    expected = {
        0: [bf + bf for *_, bf in WAVE_PLAN_SHAPES],
        1: [b + b for b in before],
        2: [bf + b for (*_, bf), b in zip(WAVE_PLAN_SHAPES, before, strict=True)],
    }
    for plan, lines in expected.items():
        text = program.read_text().replace("@VALUE@", str(plan))
        variant = tmp_path / f"plan{plan}.cu"
        variant.write_text(text)
        printed = _host_program_lines(variant, tmp_path / f"plan{plan}")
        assert printed[: len(lines)] == lines, plan


# (batch, heads, rows): the three-consumer D = 64 non-causal grid on 132 SMs (192-row units, 128
# keys a key tile), and what sm90_tail_split makes of its last round, shipped and under
# FLASH_SM90_SPLIT_TAIL=2 (wherever partial): "-" none, else whole units, tail units, key tiles a
# unit, blocks sharing the tail.
SPLIT_RULE_SHAPES = [
    ((2, 10, 4096), "396 44 32 132", "396 44 32 132"),  # a third full: split
    ((2, 8, 4096), "264 88 32 132", "264 88 32 132"),  # two thirds
    ((2, 9, 4096), "-", "-"),  # 396 units: three whole rounds
    ((2, 15, 4096), "-", "-"),  # 660: five
    ((4, 32, 4096), "2772 44 32 132", "2772 44 32 132"),  # the FA grid at 4096
    ((2, 32, 8192), "-", "2640 112 64 132"),  # 85 % full: not shipped
    ((16, 32, 1024), "-", "3036 36 8 132"),  # 8 key tiles a unit: not shipped
    ((1, 20, 1153), "-", "132 8 10 40"),  # 10 key tiles; 40 blocks of 2 key tiles
    ((1, 2, 4096), "-", "-"),  # 44 units: no whole round
]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_d64_split_of_the_last_round(tmp_path: Path):
    """sm90_tail_split (host code, NOTES.md h50): the shipped rule splits the three-consumer
    grid's last round over the keys where it is at most three quarters full and a unit has 16
    key tiles or more, after at least one whole round; FLASH_SM90_SPLIT_TAIL=2 wherever it is
    partial. And sm90_plan keeps three consumers where the split is taken (10 heads at 4096
    rows, where the rounds rule alone takes two)."""
    shapes = ", ".join(f"{{{b}, {h}, {s}}}" for (b, h, s), _, _ in SPLIT_RULE_SHAPES)
    source = (
        "#define FLASH_SM90_SPLIT_TAIL @VALUE@\n"
        "#include <cstdio>\n#include <cuda_bf16.h>\n"
        '#include "flash_fwd_launch_sm90.cuh"\n'
        "using Three = flash::Sm90ThreeConsumersD64<__nv_bfloat16, false>;\n"
        "int main() {\n"
        "  FlashFwdParams p{};\n"
        f"  const int shapes[][3] = {{{shapes}}};\n"
        "  for (const auto& s : shapes) {\n"
        "    p.batch = s[0]; p.heads = s[1]; p.seqlen_q = p.seqlen_k = s[2];\n"
        "    const long long units = (s[2] + 191) / 192 * (long long)s[1] * s[0];\n"
        "    flash::TailSplit t{};\n"
        "    const bool three =\n"
        "        flash::sm90_plan<__nv_bfloat16, 64, false>(p, 132).three_consumers;\n"
        "    if (flash::sm90_tail_split<Three>(p, units, 132, &t))\n"
        '      std::printf("%d %d %d %d %d\\n", t.whole, t.tail_units, t.n_kt, t.blocks, three);\n'
        "    else\n"
        '      std::printf("- %d\\n", three);\n'
        "  }\n"
        "}\n"
    )
    for value, column in (("0", 1), ("2", 2)):
        program = tmp_path / f"split{value}.cu"
        program.write_text(source.replace("@VALUE@", value))
        printed = _host_program_lines(program, tmp_path / f"split{value}")
        expected = [row[column] for row in SPLIT_RULE_SHAPES]
        assert [line.rsplit(" ", 1)[0] for line in printed[: len(expected)]] == expected, value
        # Three consumers wherever the last round is split, 10 heads at 4096 rows among them.
        threes = [line.rsplit(" ", 1)[1] for line in printed[: len(expected)]]
        assert all(t == "1" for t, e in zip(threes, expected, strict=True) if e != "-"), value


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fp8_d128_schedule_per_key_count_and_flags(tmp_path: Path):
    """The FP8 launcher's kernel per call (host code, no GPU), as csrc/flash_api.h documents the
    flags: at D = 128, 224-key tiles a block per tile from 8192 keys non-causal and 16384 causal
    (NOTES "f6"); below, 128-key tiles: non-causal two S in flight from 4096 keys and one S
    on a persistent grid below (f9: 1.035-1.115x the two-S kernel at 1024-2048 keys, medians of
    four processes, 0.997 at 4096), causal one S a block per tile. FLASH_FP8_TWO_S (16)
    and FLASH_FP8_ONE_S (32, which wins) take 128-key tiles at every length; TILE_GRID (64) one
    block per tile always. Only the non-causal one-S kernel is persistent. D = 256: 128-key
    tiles, one S, a block per tile. The turns stay with their own bits. Each call: W wide,
    2 two-S, 1 one-S, P one-S persistent."""
    program = tmp_path / "tiles.cu"
    program.write_text(
        '#include <cstdio>\n#include "flash_fwd_sm90_fp8.cuh"\n'
        "using namespace flash::fp8;\n"
        "template <int D, bool C> char plan(const FlashFwdParams& p, int flags) {\n"
        "  if (D == 128 && fp8_wide<D, C>(p, flags))\n"
        "    return fp8_persistent<Fp8Traits<128, 224>, C>(flags) ? 'w' : 'W';  // w: not built\n"
        "  if (fp8_two_s<D, C>(p, flags)) return '2';\n"
        "  return fp8_persistent<Fp8Traits<D>, C>(flags) ? 'P' : '1';\n"
        "}\n"
        "int main() {\n"
        "  FlashFwdParams p{};\n"
        "  p.q_heads_per_kv_head = 1;\n"
        "  for (int keys : {2048, 4096, 8192, 16384})\n"
        "    for (int flags : {0, 1, 2, 16, 32, 48, 64, 96}) {\n"
        "      p.seqlen_k = keys;\n"
        '      std::printf("%d %d %c%c %c%c %d\\n", keys, flags,\n'
        "        plan<128, false>(p, flags), plan<128, true>(p, flags),\n"
        "        plan<256, false>(p, flags), plan<256, true>(p, flags),\n"
        "        (int)fp8_takes_turns<128, false>(p, flags));\n"
        "    }\n"
        "}\n"
    )
    lines = _host_program_lines(program, tmp_path / "tiles")
    # keys flags: D 128 non-causal and causal, D 256 non-causal and causal, the turns at D 128
    assert lines[:32] == [
        "2048 0 P1 11 0",
        "2048 1 P1 11 0",
        "2048 2 P1 11 1",
        "2048 16 22 11 0",
        "2048 32 P1 11 0",
        "2048 48 P1 11 0",
        "2048 64 11 11 0",
        "2048 96 11 11 0",
        "4096 0 21 11 0",
        "4096 1 21 11 0",
        "4096 2 21 11 1",
        "4096 16 22 11 0",
        "4096 32 P1 11 0",
        "4096 48 P1 11 0",
        "4096 64 21 11 0",
        "4096 96 11 11 0",
        "8192 0 W1 11 0",
        "8192 1 W1 11 0",
        "8192 2 W1 11 1",
        "8192 16 22 11 0",
        "8192 32 P1 11 0",
        "8192 48 P1 11 0",
        "8192 64 W1 11 0",
        "8192 96 11 11 0",
        "16384 0 WW 11 0",
        "16384 1 WW 11 0",
        "16384 2 WW 11 1",
        "16384 16 22 11 0",
        "16384 32 P1 11 0",
        "16384 48 P1 11 0",
        "16384 64 WW 11 0",
        "16384 96 11 11 0",
    ]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fp8_scratch_the_binding_allocates_holds_every_tile_layouts_images(tmp_path: Path):
    """The V^T scratch the binding allocates (api._fp8_scratch_bytes) is at least what the
    transpose writes for either key-tile layout (every tile's image, csrc/flash_fwd_sm90_fp8.cuh),
    for key counts on and off both tiles' multiples: a short buffer would be written past its
    end. Host code: no GPU."""
    from kernels.flash_attention import api

    program = tmp_path / "scratch.cu"
    program.write_text(
        '#include <cstdio>\n#include "flash_fwd_sm90_fp8.cuh"\n'
        "using namespace flash::fp8;\n"
        "template <typename T> long long need(int b, int h, int s) {\n"
        "  return (long long)b * h * key_tile_count<T>(s) * T::kVBytes;\n"
        "}\n"
        "int main() {\n"
        "  for (int s : {1, 127, 128, 224, 225, 1000, 4096, 16384})\n"
        '    std::printf("%d %lld %lld %lld\\n", s, need<Fp8Traits<128>>(2, 3, s),\n'
        "      need<Fp8Traits<128, 224>>(2, 3, s), need<Fp8Traits<256>>(2, 3, s));\n"
        "}\n"
    )
    rows = [line.split() for line in _host_program_lines(program, tmp_path / "scratch") if line]
    assert len(rows) == 8
    for s, narrow, wide, d256 in ((int(v) for v in row) for row in rows):
        assert api._fp8_scratch_bytes(2, 3, 128, s) >= max(narrow, wide), s
        assert api._fp8_scratch_bytes(2, 3, 256, s) >= d256, s
    # and not wastefully more than the larger layout needs at D = 128
    assert api._fp8_scratch_bytes(2, 3, 128, 16384) == max(int(v) for v in rows[-1][1:3])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_every_key_tile_waits_on_its_stages_own_use_parity_either_way_the_ring_is_carried(
    tmp_path: Path,
):
    """The Hopper K/V ring over a persistent block's tiles (RingPosition), carried as its count
    or each tile from stage 0 with the stages' use parities carried (Sm90Choices::kRingFromZero,
    three consumers): walked over tiles of 0 to 9 key tiles at 2 and 3 stages, every key tile's
    stage is the one its representation says and the phase it waits on is that stage's uses so
    far, mod 2 (what the full and empty barriers count), here on the host."""
    for from_zero in (0, 1):
        program = tmp_path / f"ring{from_zero}.cu"
        program.write_text(
            f"#define FROM_ZERO {from_zero}\n"
            '#include <cstdio>\n#include "flash_fwd_sm90_schedule.cuh"\n'
            "using namespace flash;\n"
            "template <int S> int walk() {\n"
            "  RingPosition<FROM_ZERO> ring;\n"
            "  int uses[S] = {}, count = 0, bad = 0;\n"
            "  const int tiles[] = {8, 0, 1, 5, 3, 2, 9, 4, 7, 6, 1, 1, 3, 0, 2};\n"
            "  for (int n : tiles) {\n"
            "    for (int j = 0; j < n; ++j) {\n"
            "      const int stage = ring.stage<S>(j);\n"
            "      bad += stage != (FROM_ZERO ? j % S : (count + j) % S);\n"
            "      bad += ring.phase<S>(j) != uint32_t(uses[stage]++ & 1);\n"
            "    }\n"
            "    ring.after<S>(n);\n"
            "    count += n;\n"
            "  }\n"
            "  return bad;\n"
            "}\n"
            'int main() { std::printf("%d %d\\n", walk<2>(), walk<3>()); }\n'
        )
        lines = _host_program_lines(program, tmp_path / f"ring{from_zero}")
        assert lines[0] == "0 0", (from_zero, lines)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fp8_d128_unit_holds_its_kernels_unserialized_and_unspilled(tmp_path: Path):
    """ptxas on the D = 128 FP8 unit, as a build compiles it: the wide-tile kernels, the one-S
    kernels a block per tile, the non-causal one persistent too (the default below 4096 keys,
    f9; the only persistent kernel built) and both two-S ones are there, no wgmma is serialized
    (C7514: a first two-S version kept an S accumulator in flight across its loop's back edge,
    and ptxas put a wait after every wgmma of the kernel; C7512 at 256-key tiles, too few
    registers), nothing spills (the two-S consumers hold O, two S tiles and P: 236 of their 240
    registers; the wide ones O, a 224-key S and its P) but the wide causal kernel's 8 bytes, which
    f13's wait after 6 of its 7 steps' exponentials costs and pays for (0.5-1.3 % faster than
    after 5, which spills nothing; NOTES.md "f13")."""
    unit = next(p for p in generate.write_sources(tmp_path, "sm_90") if "hdim128_e4m3" in p.stem)
    flags = build.build_flags("sm_90") + build.unit_flags(unit.stem, None) + ["-Xptxas=-v"]
    out = tmp_path / "unit.cubin"
    command = build.unit_command(build.find_nvcc(), unit, out, flags, step="-cubin")
    compiled = nvcc_cache.run(command, unit, out)  # a hit says what ptxas said
    assert compiled.returncode == 0, compiled.stderr
    log = compiled.stdout + compiled.stderr
    assert "C7514" not in log and "C7512" not in log and "serialized" not in log, log
    # Each kernel's spill line, by its mangled name after _ZN5flash3fp8, up to its parameters.
    spills = {
        name: (int(stores), int(loads))
        for name, stores, loads in re.findall(
            r"Function properties for _ZN5flash3fp8(\w+?)(?:EEvNS0_\w*)?\n"
            r"(?:.*\n)*?.*?(\d+) bytes spill stores, (\d+) bytes spill loads",
            log,
        )
    }
    kernels = ["20flash_fwd_fp8_kernelINS0_9Fp8TraitsILi128ELi128EEELb0ELb1E"]  # persistent
    for causal in (0, 1):
        kernels.append(f"26flash_fwd_fp8_two_s_kernelINS0_9Fp8TraitsILi128ELi128EEELb{causal}E")
        for keys in (128, 224):
            kernels.append(
                f"20flash_fwd_fp8_kernelINS0_9Fp8TraitsILi128ELi{keys}EEELb{causal}ELb0E"
            )
    assert sorted(name for name in spills if "flash_fwd" in name) == sorted(kernels)
    wide_causal = "20flash_fwd_fp8_kernelINS0_9Fp8TraitsILi128ELi224EEELb1ELb0E"
    assert spills[wide_causal][0] <= 8 and spills[wide_causal][1] <= 8, spills
    assert all(spills[kernel] == (0, 0) for kernel in kernels if kernel != wide_causal), spills


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_kv_head_map_divides_exactly_for_every_group(tmp_path: Path):
    """KvHeadMap (csrc/kernel_params.h) replaces head / group by a multiply-high: exact for
    every group up to 65535, over all heads for small groups and the largest heads (where the
    error term is largest) for the others."""
    # Head h = q * g + r (0 <= r < g) is expected on KV head q: written so, the check needs
    # no division and its loop vectorises (4.3e9 heads: 9 s with a division, 1 s without).
    program = tmp_path / "kv_heads.cu"
    program.write_text(
        '#include <cstdio>\n#include "kernel_params.h"\n'
        "int main() {\n"
        "  long bad = 0;\n"
        "  for (int g = 1; g <= 65535; ++g) {\n"
        "    const flash::KvHeadMap map = flash::KvHeadMap::make(g);\n"
        "    const int kv = 65535 / g;  // KV heads of this group's largest launch (kv * g)\n"
        "    for (int q = g <= 64 || kv < 2 ? 0 : kv - 2; q < kv; ++q)\n"
        "      for (int r = 0; r < g; ++r) bad += map.kv_head(q * g + r) != q;\n"
        "  }\n"
        '  std::printf("%ld\\n", bad);\n'
        "}\n"
    )
    binary = tmp_path / "kv_heads"
    nvcc = build.find_nvcc()
    # The host's own vector instructions: the program runs where it is built.
    flags = ["-O3", "-Xcompiler=-march=native", "-std=c++17", f"-I{build.CSRC_DIR}"]
    compiled = subprocess.run(
        [nvcc, *flags, str(program), "-o", str(binary)], capture_output=True, text=True
    )
    assert compiled.returncode == 0, compiled.stderr
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout.strip() == "0"


def test_dtype_table_is_one_for_c_and_python(tmp_path: Path):
    from kernels.flash_attention import api

    header = generate.dtype_header()
    for dtype in generate.DTYPES:
        assert f"FLASH_{dtype.name.upper()} = {dtype.code}," in header
        assert api.SUPPORTED_DTYPES[getattr(torch, dtype.torch_name)].code == dtype.code
    assert len({d.code for d in generate.DTYPES}) == len(generate.DTYPES)


def test_a_build_starts_the_fp8_units_first_then_the_rest_as_generated(tmp_path, monkeypatch):
    """The D = 128 FP8 unit is a Hopper build's longest compile (10-12 s of 86-97 s over 27
    units on the H200's host); generated last, it started last and ran alone to the end of a
    4-core build (issue 53 item 6, NOTES "f9"). compile_units starts the FP8 units first."""
    started = []

    def record(nvcc: str, src: Path, out: Path, flags: list[str]):
        started.append(src.stem)
        return src.stem, 0.0

    monkeypatch.setattr(build, "_compile_unit", record)
    build.compile_units("nvcc", tmp_path / "src", tmp_path / "obj", "sm_90a", [], jobs=1)
    generated = [unit.name for unit in generate.units("sm_90a")] + ["flash_dispatch"]
    assert set(started[:2]) == FP8_UNITS
    assert started[2:] == [name for name in generated if name not in FP8_UNITS]
    started.clear()
    build.compile_units("nvcc", tmp_path / "src89", tmp_path / "obj89", "sm_89", [], jobs=1)
    assert started == [unit.name for unit in generate.units("sm_89")] + ["flash_dispatch"]


def test_sm90_builds_target_sm90a_and_others_their_own_arch():
    assert build.gencode_flags("sm_90") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert build.gencode_flags("sm_89") == ["-gencode=arch=compute_89,code=sm_89"]


def test_measurement_switches_are_flags_and_part_of_the_cache_key():
    flags = build.define_flags({"FLASH_EMULATE_SMEM_PER_SM": 102400, "FLASH_FORCE_VARIANT": 2})
    assert flags == ["-DFLASH_EMULATE_SMEM_PER_SM=102400", "-DFLASH_FORCE_VARIANT=2"]
    assert build.cache_key("a" * 64, "13.0", "sm_90", flags) != build.cache_key(
        "a" * 64, "13.0", "sm_90", []
    )
    with pytest.raises(ValueError, match="unknown build switch"):
        build.define_flags({"FLASH_NO_SUCH_SWITCH": 1})
    with pytest.raises(ValueError, match="unknown build switch"):
        build.define_flags({"FLASH_FORCE_VARIANT": 7})
    assert build.parse_defines(["FLASH_DISABLE_SM90=1"]) == {"FLASH_DISABLE_SM90": 1}


def test_every_build_switch_is_declared_once_in_switches_h_and_defaults_to_zero():
    """A switch build.py accepts but switches.h lacks would compile to nothing; one switches.h
    declares but build.py refuses could never be set. A default build leaves them all at 0."""
    switches = (build.CSRC_DIR / "switches.h").read_text()
    assert sorted(re.findall(r"#ifndef (FLASH_\w+)", switches)) == sorted(build.SWITCHES)
    for name, accepted in build.SWITCHES.items():
        assert f"#ifndef {name}\n#define {name} 0\n#endif" in switches, name
        assert 0 in accepted


def test_register_usage_level_reaches_the_tabled_units_alone_and_the_switch_overrides_it():
    tabled = set(build.UNIT_REGISTER_USAGE_LEVEL)
    assert tabled == {"fwd_hdim128_fp16", "fwd_hdim128_bf16"}
    assert tabled <= {unit.name for unit in generate.units("sm_89")}
    for name in tabled:
        assert build.unit_flags(name, None) == ["-Xptxas=--register-usage-level=6"]
        assert build.unit_flags(name, {"FLASH_PTXAS_REG_LEVEL": 5}) == [
            "-Xptxas=--register-usage-level=5"
        ]
        assert build.unit_flags(name, {"FLASH_PTXAS_REG_LEVEL": 0}) == build.unit_flags(name, {})
    for unit in generate.units("sm_90"):
        if unit.name not in tabled:
            assert build.unit_flags(unit.name, {"FLASH_PTXAS_REG_LEVEL": 5}) == [], unit.name


# The unit both switch tests compile: the L4's non-causal D=128 unit, which holds the
# split-D kernel the register-level table is for. They compile it in nvcc's two device steps
# as build.build's flags drive them, and compare each step's output: the PTX (what the
# source and its switches make, before ptxas) and the cubin ptxas makes of it (what its
# flags make). A unit's host side, the rest of a full compile, is the same for every switch.
SWITCHED_ARCH, SWITCHED_UNIT = "sm_89", "fwd_hdim128_bf16"


def nvcc_step(
    step: str,
    source: Path,
    out: Path,
    defines: dict[str, int] | None,
    arch: str = SWITCHED_ARCH,
    unit: str = SWITCHED_UNIT,
) -> bytes:
    """One device step of a unit's compile (SWITCHED_UNIT's unless told) with these switches,
    by the build's own command and flags (the unit's too: `unit_flags`)."""
    flags = build.build_flags(arch, defines) + build.unit_flags(unit, defines)
    command = build.unit_command(build.find_nvcc(), source, out, flags, step)
    compiled = nvcc_cache.run(command, source, out)  # kept across runs where make test says
    assert compiled.returncode == 0, compiled.stderr
    return out.read_bytes()


def switched_unit_ptx(
    folder: Path,
    defines: dict[str, int] | None,
    arch: str = SWITCHED_ARCH,
    unit: str = SWITCHED_UNIT,
) -> bytes:
    """A unit's PTX (SWITCHED_UNIT's unless told) with these switches: the source as generated
    for its arch."""
    src = folder / "src"
    generate.write_sources(src, arch)
    return nvcc_step("-ptx", src / f"{unit}.cu", folder / "unit.ptx", defines, arch, unit)


@pytest.fixture(scope="module")
def shipped_unit_ptx(made_once) -> Path:
    """SWITCHED_UNIT's PTX as the shipped build makes it (no switch set), made once for the
    session: both switch tests compare theirs with it."""

    def make(folder: Path) -> str:
        switched_unit_ptx(folder, None)
        return str(folder / "unit.ptx")

    return Path(made_once("shipped-fwd-hdim128-bf16-sm89-ptx", make))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_register_usage_level_changes_the_code_ptxas_emits(tmp_path: Path, shipped_unit_ptx):
    """The table's level reaches ptxas: the L4's non-causal D=128 unit as shipped (the
    table's level 6, whose flag the test above pins) is other code than at ptxas's default
    level (5). The switch changes nothing before ptxas: level 6's PTX is the shipped PTX."""
    assert (
        switched_unit_ptx(tmp_path, {"FLASH_PTXAS_REG_LEVEL": 6}) == shipped_unit_ptx.read_bytes()
    )
    cubin = {
        name: nvcc_step("-cubin", shipped_unit_ptx, tmp_path / f"{name}.cubin", defines)
        for name, defines in [("shipped", None), ("level 5", {"FLASH_PTXAS_REG_LEVEL": 5})]
    }
    assert cubin["shipped"] != cubin["level 5"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_spread_group_switch_defaults_to_pairs(tmp_path: Path, shipped_unit_ptx):
    """The shipped build (FLASH_SPREAD_GROUP unset: 0) keeps the shipped tile order, a head's
    blocks starting in pairs: the L4's non-causal D=128 unit compiles to the PTX of an
    explicit group of 2, and to other PTX with one block per start (ptxas's flags are the
    same for both: equal PTX is equal code)."""
    group = {n: switched_unit_ptx(tmp_path / str(n), {"FLASH_SPREAD_GROUP": n}) for n in (2, 1)}
    assert shipped_unit_ptx.read_bytes() == group[2]
    assert shipped_unit_ptx.read_bytes() != group[1]


# Softmax choices of the Hopper plan that a refactor could drop silently: (unit, switch, the
# value the plan must compile to, the value it must not).
PLANNED_SOFTMAX = [
    # Two partial sums per row half at D = 128 (Sm90Choices::kSumParts, NOTES.md h32), not one
    # chain: a softmax step that dropped the choice compiled the one chain silently once.
    pytest.param("fwd_hdim128_bf16_sm90", "FLASH_SM90_TREE_SUM", 3, 1, id="d128-two-sums"),
    # bf16 row sums on the tensor core at D = 64 (Sm90Traits::kRowSumMma, NOTES.md h36), not in
    # FADDs as before h36 (1: FADDs for both dtypes).
    pytest.param("fwd_hdim64_bf16_sm90", "FLASH_SM90_ROW_SUM", 4, 1, id="bf16-d64-mma-sums"),
    # The solo (D = 64 causal) kernel's too (NOTES.md h47), not its FADDs as before h47.
    pytest.param("fwd_hdim64_bf16_causal_sm90", "FLASH_SM90_ROW_SUM", 4, 3, id="solo-mma-sums"),
    # The FP8 kernel's lazy rescaling at D = 256 (kFp8LazyRescale, NOTES.md f10), each row's
    # max exact at D = 128, where lazy read 0.970-1.006x (nothing gained).
    pytest.param("fwd_hdim256_e4m3_sm90", "FLASH_FP8_LAZY_RESCALE", 2, 1, id="fp8-d256-lazy"),
    pytest.param("fwd_hdim128_e4m3_sm90", "FLASH_FP8_LAZY_RESCALE", 1, 2, id="fp8-d128-exact"),
    # The FP8 key loops' wait for P V after all but the last 32-key step's exponentials (f13:
    # 3 of 4 at D = 256), not after the whole softmax (7, the tree before, 0.96-0.97x there).
    pytest.param("fwd_hdim256_e4m3_sm90", "FLASH_FP8_EXP_SPLIT", 3, 7, id="fp8-d256-split"),
]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize(("unit", "switch", "planned", "other"), PLANNED_SOFTMAX)
def test_hopper_softmax_choices_reach_the_shipped_unit(
    tmp_path: Path, unit: str, switch: str, planned: int, other: int
):
    """The shipped unit's PTX is the build that sets the plan's choice explicitly, and not
    the build with the other choice: the plan reaches the softmax."""
    builds = {"shipped": None, "planned": {switch: planned}, "other": {switch: other}}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(switched_unit_ptx, tmp_path / name, defines, "sm_90", unit)
            for name, defines in builds.items()
        }
        ptx = {name: future.result() for name, future in futures.items()}
    assert ptx["shipped"] == ptx["planned"], f"{unit} is not built as {switch}={planned}"
    assert ptx["shipped"] != ptx["other"], f"{unit} is built as {switch}={other}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_hopper_causal_d64_unit_builds_the_solo_kernel_alone(tmp_path: Path):
    """The shipped causal D = 64 Hopper unit holds the solo kernel and no producer/consumer
    kernel (kSm90Solo: causal D = 64 runs solo blocks at every length, NOTES.md h43)."""
    unit = "fwd_hdim64_bf16_causal_sm90"
    ptx = switched_unit_ptx(tmp_path, None, "sm_90", unit).decode()
    kernels = re.findall(r"\.entry\s+(\w+)", ptx)
    assert kernels and all("flash_fwd_sm90_solo_kernel" in name for name in kernels), kernels


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_solo_row_sums_on_the_tensor_core_keep_three_blocks_an_sm(tmp_path: Path):
    """The shipped solo D = 64 causal kernel sums its rows on the tensor core, P V as
    m64n72k16 against a block of ones (NOTES.md h47), where FLASH_SM90_ROW_SUM=3 (the plan
    before) adds them in FADDs (m64n64k16). ptxas holds it unspilled in registers that three
    blocks of 128 threads an SM have (65,536 / 384), and its shared memory, dynamic
    (Sm90Traits::kSmemBytes, the launcher's) and static (the barriers), with the system's 1 KB a
    block, is at most the SM's 228 KB three times: the ones take the alignment pad's place."""
    unit = "fwd_hdim64_bf16_causal_sm90"
    src = tmp_path / "src"
    generate.write_sources(src, "sm_90")
    shipped = nvcc_step("-ptx", src / f"{unit}.cu", tmp_path / "shipped.ptx", None, "sm_90", unit)
    fadds = {"FLASH_SM90_ROW_SUM": 3}
    before = nvcc_step("-ptx", src / f"{unit}.cu", tmp_path / "fadd.ptx", fadds, "sm_90", unit)
    assert b"m64n72k16" in shipped and b"m64n72k16" not in before
    flags = build.build_flags("sm_90") + build.unit_flags(unit, None)
    cubin = tmp_path / "shipped.cubin"
    command = build.unit_command(
        build.find_nvcc(), src / f"{unit}.cu", cubin, [*flags, "-Xptxas=-v"], "-cubin"
    )
    compiled = nvcc_cache.run(command, src / f"{unit}.cu", cubin)  # a hit says what ptxas said
    assert compiled.returncode == 0, compiled.stderr
    log = compiled.stdout + compiled.stderr
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    static = int(re.search(r"(\d+) bytes smem", log).group(1))
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert -(-registers // 8) * 8 * 128 * 3 <= 65536, registers  # allocated 8 a thread at a time
    program = tmp_path / "smem.cu"
    program.write_text(
        '#include <cstdio>\n#include <cuda_bf16.h>\n#include "flash_fwd_launch_sm90.cuh"\n'
        "int main() {\n"
        "  using T = flash::Sm90SoloD64<__nv_bfloat16>;\n"
        '  std::printf("%d %d %d\\n", (int)T::kRowSumMma, T::kSmemBytes, T::kBlocksPerSm);\n'
        "}\n"
    )
    mma, dynamic, blocks = map(int, _host_program_lines(program, tmp_path / "smem")[0].split())
    assert mma == 1 and blocks == 3
    assert (dynamic + static + 1024) * blocks <= 228 * 1024, (dynamic, static)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_d256_hopper_kernel_stores_o_by_tma_from_a_staging_block_that_fits(tmp_path: Path):
    """The shipped D = 256 Hopper unit stores O with TMA stores from a staging block of its own
    (Sm90Traits::kStageOHalves, NOTES.md h55: 1.12-1.17x at 1024 keys), where
    FLASH_SM90_O_STORE=1 (the tree before) stores each thread's 4-byte fragments; the block's
    dynamic shared memory with the 32 KB of staging and its static 1 KB (the barriers) is at
    most the 227 KB a block may opt in to, and with the system's 1 KB at most the SM's 228 KB."""
    unit = "fwd_hdim256_bf16_sm90"
    src = tmp_path / "src"
    generate.write_sources(src, "sm_90")
    ptx = {
        name: nvcc_step("-ptx", src / f"{unit}.cu", tmp_path / f"{name}.ptx", d, "sm_90", unit)
        for name, d in [("shipped", None), ("before", {"FLASH_SM90_O_STORE": 1})]
    }
    tma_store = b"cp.async.bulk.tensor.4d.global.shared::cta"
    assert tma_store in ptx["shipped"] and tma_store not in ptx["before"]
    program = tmp_path / "smem.cu"
    program.write_text(
        '#include <cstdio>\n#include <cuda_bf16.h>\n#include "flash_fwd_launch_sm90.cuh"\n'
        "int main() {\n"
        "  using T = flash::Sm90Config<__nv_bfloat16, 256, false>::type;\n"
        '  std::printf("%d %d %d\\n", (int)T::kStageOHalves, T::kOHalvesBytes, T::kSmemBytes);\n'
        "}\n"
    )
    halves, staging, dynamic = map(int, _host_program_lines(program, tmp_path / "smem")[0].split())
    assert halves == 1 and staging == 32 * 1024
    assert dynamic + 1024 <= 227 * 1024 and dynamic + 1024 + 1024 <= 228 * 1024, dynamic


def compact_shapes(head_dim: int) -> set[int]:
    """The shapes the launcher's CompactShape specialisations define for this head dim."""
    launcher = (build.CSRC_DIR / "flash_fwd_launch.cuh").read_text()
    return {int(n) for n in re.findall(rf"struct CompactShape<Elem, {head_dim}, (\d+)>", launcher)}


def test_compact_shape_switch_selects_only_the_shipped_shapes():
    """The tree holds the compact shapes a shipped launch takes: D=64's 2, D=256's 1, D=128's
    6 and, for short causal launches, 5 (CompactChoice). FLASH_COMPACT_SHAPE_D128 forces one of
    those two on every launch: build.py, switches.h's assertion and the launcher agree on 5 and
    6; the other candidates, and the D=64 and D=256 switches, are experiments/ patches."""
    assert {d: compact_shapes(d) for d in (64, 128, 256)} == {64: {2}, 128: {5, 6}, 256: {1}}
    name = "FLASH_COMPACT_SHAPE_D128"
    assert set(build.SWITCHES[name]) == {0} | compact_shapes(128)  # 0: the shipped choice
    switches = (build.CSRC_DIR / "switches.h").read_text()
    asserted = re.search(rf"static_assert\(({name} == \d+(?: \|\|\s+{name} == \d+)*),", switches)
    assert asserted is not None
    assert {int(n) for n in re.findall(r"== (\d+)", asserted.group(1))} == {0, 5, 6}
    for value in (1, 4, 7):
        with pytest.raises(ValueError, match="unknown build switch"):
            build.define_flags({name: value})
    assert not {"FLASH_COMPACT_SHAPE_D64", "FLASH_COMPACT_SHAPE_D256"} & set(build.SWITCHES)


EXPERIMENTS_DIR = build.PACKAGE_DIR / "experiments"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("patch", sorted(p.name for p in EXPERIMENTS_DIR.glob("*.patch")))
def test_experiment_patch_applies_alone_to_the_tree(patch: str):
    """Each switch taken out of the shipped source comes back by its patch, applied alone."""
    root = build.PACKAGE_DIR.parents[1]
    checked = subprocess.run(
        ["git", "apply", "--check", str(EXPERIMENTS_DIR / patch)],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


# A switch a patch brings back, and a unit its value reaches: the patched tree compiles it.
PATCHED_BUILDS = [
    pytest.param(
        "v9-compact-candidates.patch",
        "sm_89",
        "fwd_hdim64_bf16",
        {"FLASH_COMPACT_SHAPE_D64": 3},
        id="v9-d64-eight-warps",
    ),
    pytest.param(
        "h36-fp16-only-row-sums.patch",
        "sm_90",
        "fwd_hdim64_fp16_sm90",
        {"FLASH_SM90_ROW_SUM": 2},
        id="h36-fp16-only",
    ),
    pytest.param(
        "h54-prefetch-next-q.patch",
        "sm_90",
        "fwd_hdim256_bf16_sm90",
        {"FLASH_SM90_PREFETCH_Q": 2},
        id="h54-prefetch-q",
    ),
]
# The package's __init__ imports its torch binding (api.py, which no patch touches): ~1.5 s
# of CPU a child. The compile needs the patched tree's build.py and generate.py alone, found
# through a package of the same folder that runs no __init__.
PATCHED_COMPILE = """
import subprocess, sys, types
from pathlib import Path
package = types.ModuleType("kernels.flash_attention")
package.__path__ = [str(Path("kernels", "flash_attention").resolve())]
sys.modules[package.__name__] = package
from kernels.flash_attention import build, generate
assert "torch" not in sys.modules and build.__file__.startswith(str(Path.cwd()))
folder, arch, unit, defines = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
generate.write_sources(folder / "src", arch)
flags = build.build_flags(arch, build.parse_defines(defines)) + build.unit_flags(unit, None)
src = folder / "src" / f"{unit}.cu"
command = build.unit_command(build.find_nvcc(), src, folder / "unit.ptx", flags, "-ptx")
sys.exit(subprocess.run(command).returncode)
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize(("patch", "arch", "unit", "defines"), PATCHED_BUILDS)
def test_experiment_patch_builds_its_switch(
    tmp_path: Path, patch: str, arch: str, unit: str, defines: dict[str, int]
):
    """The tree with the patch applied accepts the switch it brings back and compiles a unit
    the switch reaches (the shipped build refuses the value)."""
    with pytest.raises(ValueError, match="unknown build switch"):
        build.define_flags(defines)
    tree = tmp_path / "tree"
    shutil.copytree(
        build.PACKAGE_DIR.parent, tree / "kernels", ignore=shutil.ignore_patterns("__pycache__")
    )
    applied = subprocess.run(
        ["git", "apply", str(EXPERIMENTS_DIR / patch)], cwd=tree, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr
    switches = [f"{name}={value}" for name, value in defines.items()]
    compiled = subprocess.run(
        [sys.executable, "-c", PATCHED_COMPILE, str(tmp_path / "out"), arch, unit, *switches],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr
    assert (tmp_path / "out" / "unit.ptx").stat().st_size > 0


def test_shipped_sources_read_no_environment():
    for path in build.source_files():
        if path.suffix in {".h", ".cuh", ".cu"}:
            assert "getenv" not in path.read_text(), path.name


def test_sources_include_no_torch_header():
    for path in build.source_files():
        if path.suffix in {".h", ".cuh", ".cu"}:
            includes = [ln for ln in path.read_text().splitlines() if ln.startswith("#include")]
            for line in includes:
                assert not any(n in line for n in ("torch", "ATen", "c10")), f"{path.name}: {line}"


def test_source_hash_covers_generator_and_sources():
    names = {p.name for p in build.source_files()}
    kernels = {"flash_fwd_kernel.cuh", "flash_fwd_kernel_sm90.cuh", "flash_api.h"}
    assert {"generate.py", *kernels} <= names
    assert len(build.source_sha256()) == 64


@pytest.mark.parametrize("arch, expected", [("sm_89", "sm_89"), ("8.9", "sm_89"), ("90", "sm_90")])
def test_normalize_arch(arch, expected):
    assert build.normalize_arch(arch) == expected


def test_old_arch_is_refused():
    with pytest.raises(ValueError, match="sm_80 or newer"):
        build.normalize_arch("sm_75")


def test_cache_dir_follows_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("FLASH_KERNEL_CACHE", str(tmp_path))
    assert build.cache_root() == tmp_path


# One representative unit per arch and path (bf16 D=128 causal: the most registers and code)
# plus the dispatcher: what CI can afford on 2 cores. Every unit compiles on the GPU machine.
COMPILED_IN_CI = {
    "sm_89": {"fwd_hdim128_bf16_causal", "flash_dispatch"},
    "sm_90": {"fwd_hdim128_bf16_causal_sm90", *FP8_UNITS, "flash_dispatch"},
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_representative_units_compile_for_l4_and_h100(tmp_path: Path, monkeypatch):
    nvcc = build.find_nvcc()
    compile_unit = build._compile_unit

    def compile_or_reuse(nvcc: str, src: Path, out: Path, flags: list[str]):
        """build's own compile of a unit, unless the tests' cache holds what it made of
        the same inputs (tests/nvcc_cache.py: `make test`'s later runs); the link is real."""
        kept = nvcc_cache.key(build.unit_command(nvcc, src, out, flags), src, out)
        if nvcc_cache.fetch(kept, out):
            return src.stem, 0.0
        compiled = compile_unit(nvcc, src, out, flags)
        nvcc_cache.keep(kept, out)
        return compiled

    monkeypatch.setattr(build, "_compile_unit", compile_or_reuse)
    jobs = max(2, min(8, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            arch: pool.submit(
                build.compile_units,
                nvcc,
                tmp_path / arch / "src",
                tmp_path / arch / "obj",
                arch,
                build.build_flags(arch),
                max(1, jobs // 2),
                only,
            )
            for arch, only in COMPILED_IN_CI.items()
        }
        for arch, future in futures.items():
            seconds = future.result()
            assert set(seconds) == COMPILED_IN_CI[arch], arch
            objects = {p.stem for p in (tmp_path / arch / "obj").glob("*.o")}
            assert objects == set(seconds), arch
            # They link into one library (the units left out are its undefined symbols): a
            # header that defines a plain function in two units fails here, not on the GPU.
            build._link(nvcc, tmp_path / arch / "obj", tmp_path / arch / build.LIBRARY_NAME)


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


def _fp8(*shape):
    return torch.zeros(*shape, dtype=torch.float8_e4m3fn)


def test_fp8_cpu_tensors_are_rejected_with_a_clear_message():
    from kernels.flash_attention import flash_attention

    q = _fp8(1, 2, 16, 128)
    with pytest.raises(ValueError, match="FP8 attention takes CUDA tensors of torch.float8_e4m3fn"):
        flash_attention(q, q, q)


def test_fp8_key_order_matches_the_e4m3_a_fragment():
    """The V^T slot order of csrc/flash_fwd_sm90_fp8.cuh (key_of_slot) against the PTX ISA's
    fragments: S's accumulator (thread t of a quad: columns 8i + 2t, 8i + 2t + 1 of n8 tile i)
    packed four to a register as pack_probabilities packs them, read back through the 8-bit A
    fragment of m64nNk32 (register r, byte e: row g for r in {0, 2}, g + 8 for {1, 3}; column
    4t + e, + 16 for r in {2, 3}), times V^T in slot order, is P V."""
    import re

    source = (build.CSRC_DIR / "flash_fwd_sm90_fp8.cuh").read_text()
    expr = re.search(r"int key_of_slot\(int c\) \{\s*return (.*?);", source, re.S).group(1)
    key_of_slot = eval("lambda c: " + expr.replace("/", "//"))  # C's int division
    assert sorted(key_of_slot(c) for c in range(32)) == list(range(32))
    torch.manual_seed(0)
    p, v = torch.randn(16, 32, dtype=torch.float64), torch.randn(32, 8, dtype=torch.float64)
    a = torch.zeros(16, 32, dtype=torch.float64)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc = {
            (i, e): p[g + 8 * (e >> 1), 8 * i + 2 * t + (e & 1)] for i in range(4) for e in range(4)
        }
        regs = [  # pack_probabilities, one k32 step
            [acc[0, 0], acc[0, 1], acc[1, 0], acc[1, 1]],
            [acc[0, 2], acc[0, 3], acc[1, 2], acc[1, 3]],
            [acc[2, 0], acc[2, 1], acc[3, 0], acc[3, 1]],
            [acc[2, 2], acc[2, 3], acc[3, 2], acc[3, 3]],
        ]
        for r in range(4):
            for e in range(4):
                a[g + 8 * (r % 2), 4 * t + e + 16 * (r // 2)] = regs[r][e]
    v_slots = torch.stack([v[key_of_slot(c)] for c in range(32)])
    torch.testing.assert_close(a @ v_slots, p @ v)


def test_descales_are_refused_for_16_bit_inputs():
    from kernels.flash_attention import flash_attention

    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="descale factors are for torch.float8_e4m3fn inputs"):
        flash_attention(q, q, q, q_descale=1.0)
