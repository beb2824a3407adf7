"""Nsight Compute profiles of the plan's chosen configs, taken after the timing, never during.

Each (config, implementation) is one `ncu` run of a fresh process (benches/profile_target.py)
that warms the implementation up, then makes one call between cudaProfilerStart/Stop: only
that call's kernels are profiled, with the plan's fixed section set. ncu's defaults that
would touch the machine are turned off: `--clock-control none` (a benchmark host's clocks
are not ours to lock). The step has its own time bound (plan.profile.timeout_seconds);
whatever it could not do becomes a row that says why: no ncu, counters restricted to admins
(ERR_NVGPUCTRPERM), timed out, failed. A run always completes without its profile.

Outputs: results/profile-NNN.ncu-rep (binary, Nsight Compute's own) and results/profile.csv
(results_schema.ProfileRow), the metrics read back from each report with
`ncu --import --csv --page raw --print-units base`.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from results_schema import Plan, ProfileRow
from results_schema.record import PROFILE_REPORT_NAME

# The largest report kept (the controller's bound too); a bigger one is deleted and noted.
MAX_REPORT_BYTES = 32 << 20
IMPORT_TIMEOUT_SECONDS = 60
RESTRICTED_MARK = "ERR_NVGPUCTRPERM"
TOP_STALLS = 3
# Raw-page metric names (base units: nanoseconds, bytes, percent).
DURATION = "gpu__time_duration.sum"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = (
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
REGISTERS = "launch__registers_per_thread"
SHARED_MEMORY = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
# The tensor pipes' names differ by architecture (hmma on Ampere/Ada, gmma on Hopper):
# the busiest one counts.
TENSOR_PIPE = re.compile(r"sm__pipe_tensor\w*\.avg\.pct_of_peak_sustained_active")
LOCAL_BYTES = re.compile(r"l1tex__t_bytes_pipe_lsu_mem_local_op_(ld|st)\.sum")
LOCAL_SECTORS = re.compile(r"l1tex__t_sectors_pipe_lsu_mem_local_op_(ld|st)\.sum")
SECTOR_BYTES = 32
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
# Measured work beside the formula's (issue 53): the tensor pipes' math ops by source type,
# where one op is a multiply or an add, so an FMA counts two and ops are FLOPs (a GEMM reads
# 2·M·N·K: sm__ops_path_tensor_src_fp8.sum on an RTX 4090); DRAM bytes; the SM clock.
# A source's total (no _dst_) where the GPU has one, else its per-destination counters.
TENSOR_OPS = re.compile(r"sm__ops_path_tensor_src_(fp16|bf16|fp8)(?:_dst_(fp16|fp32))?\.sum")
TENSOR_OPS_BASES = tuple(
    f"sm__ops_path_tensor_src_{source}{dst}"
    for source in ("fp16", "bf16", "fp8")
    for dst in ("", "_dst_fp16", "_dst_fp32")
)
DRAM_BYTES = "dram__bytes"
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"  # Hz in base units
WORK_METRIC_BASES = (*TENSOR_OPS_BASES, DRAM_BYTES, "sm__cycles_elapsed")
QUERY_TIMEOUT_SECONDS = 60


def find_ncu() -> str | None:
    """ncu on PATH, else in the CUDA toolkit the build used."""
    found = shutil.which("ncu")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ncu").is_file():
            return str(Path(home) / "bin" / "ncu")
    return None


def report_name(index: int) -> str:
    name = f"profile-{index:03d}.ncu-rep"
    assert PROFILE_REPORT_NAME.fullmatch(name)
    return name


def work_metrics(available: set[str]) -> list[str]:
    """The counters of measured work this GPU has (`ncu --query-metrics`' base names): a
    metric ncu does not know on a chip fails the whole profile, so only those are asked."""
    wanted = [base for base in WORK_METRIC_BASES if base in available]
    return [SM_CLOCK if base == "sm__cycles_elapsed" else f"{base}.sum" for base in wanted]


def parse_metric_names(text: str) -> set[str]:
    """The base metric names of `ncu --query-metrics`: the first word of each table row."""
    names = set()
    for line in text.splitlines():
        word = line.split(maxsplit=1)[0] if line.strip() else ""
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", word):
            names.add(word)
    return names


def profile_command(
    ncu: str, plan: Plan, report: Path, target: list[str], metrics: list[str] = ()
) -> list[str]:
    sections = [arg for s in plan.profile.sections for arg in ("--section", s)]
    extra = ["--metrics", ",".join(metrics)] if metrics else []
    return [
        ncu,
        *sections,
        *extra,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--export",
        str(report),
        "--force-overwrite",
        *target,
    ]


# --- reading a report back ---------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_raw_page(text: str) -> list[dict[str, str]]:
    """`ncu --import R --csv --page raw`: a header of metric names, a units row, then one
    row per kernel. Returns one {metric: value} per kernel."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        return []
    header, body = rows[start], rows[start + 1 :]
    if body and body[0] and body[0][0] == "":  # the units row (base units were asked for)
        body = body[1:]
    return [dict(zip(header, r, strict=False)) for r in body if len(r) == len(header)]


def _first(kernel: dict[str, str], names) -> float | None:
    for name in (names,) if isinstance(names, str) else names:
        value = _number(kernel.get(name, ""))
        if value is not None:
            return value
    return None


def _matching(kernel: dict[str, str], pattern: re.Pattern) -> list[tuple[str, float]]:
    found = []
    for name, text in kernel.items():
        match = pattern.fullmatch(name)
        value = _number(text)
        if match and value is not None:
            found.append((match.group(1) if pattern.groups else name, value))
    return found


def local_memory_bytes(kernel: dict[str, str]) -> float | None:
    as_bytes = _matching(kernel, LOCAL_BYTES)
    if as_bytes:
        return sum(v for _, v in as_bytes)
    sectors = _matching(kernel, LOCAL_SECTORS)
    return sum(v for _, v in sectors) * SECTOR_BYTES if sectors else None


def top_stalls(kernel: dict[str, str], count: int = TOP_STALLS) -> str:
    stalls = sorted(_matching(kernel, STALL), key=lambda s: -s[1])
    return ";".join(f"{name}:{value:.2f}" for name, value in stalls[:count] if value > 0)


def tensor_flops(kernel: dict[str, str]) -> float | None:
    """The kernel's tensor-pipe FLOPs: per source type its total, else its destinations'."""
    by_source: dict[str, dict[str | None, float]] = {}
    for name, text in kernel.items():
        match = TENSOR_OPS.fullmatch(name)
        value = _number(text)
        if match and value is not None:
            by_source.setdefault(match.group(1), {})[match.group(2)] = value
    if not by_source:
        return None
    return sum(
        counts[None] if None in counts else sum(counts.values()) for counts in by_source.values()
    )


def work_of(kernels: list[dict[str, str]]) -> dict:
    """What every kernel of the call did, summed: tensor FLOPs and DRAM bytes; and the SM
    clock of the longest kernel, in MHz (None where the page lacks a counter)."""
    flops = [tensor_flops(k) for k in kernels]
    dram = [_first(k, f"{DRAM_BYTES}.sum") for k in kernels]
    durations = [_first(k, DURATION) or 0.0 for k in kernels]
    main = kernels[max(range(len(kernels)), key=durations.__getitem__)]
    clock = _first(main, SM_CLOCK)
    return {
        "tensor_flops": sum(f for f in flops if f is not None) if any(flops) else None,
        "dram_bytes": sum(b for b in dram if b is not None)
        if any(b is not None for b in dram)
        else None,
        "sm_clock_mhz": clock / 1e6 if clock is not None else None,
    }


def metrics_of(kernels: list[dict[str, str]]) -> dict:
    """A call's metrics: every kernel's duration and work summed, the rest from the longest
    kernel."""
    if not kernels:
        return {}
    durations = [_first(k, DURATION) or 0.0 for k in kernels]
    main = kernels[max(range(len(kernels)), key=durations.__getitem__)]
    shared = [_first(main, name) for name in SHARED_MEMORY]
    tensor = [v for _, v in _matching(main, TENSOR_PIPE)]
    registers = _first(main, REGISTERS)
    return {
        "kernels": len(kernels),
        "kernel": main.get("Kernel Name", "")[:200] or None,
        "duration_us": sum(durations) / 1e3,
        "sm_throughput_pct": _first(main, SM_THROUGHPUT),
        "tensor_pipe_pct": max(tensor) if tensor else None,
        "dram_throughput_pct": _first(main, DRAM_THROUGHPUT),
        "achieved_occupancy_pct": _first(main, OCCUPANCY),
        "registers_per_thread": int(registers) if registers is not None else None,
        "shared_mem_per_block_bytes": (
            int(sum(s for s in shared if s is not None))
            if any(s is not None for s in shared)
            else None
        ),
        "local_memory_bytes": local_memory_bytes(main),
        "top_stalls": top_stalls(main),
        **work_of(kernels),
    }


# --- the step ----------------------------------------------------------------------------


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


class Profiler:
    """Runs the profiles one by one inside the step's time bound."""

    def __init__(self, plan: Plan, run_id: str, plan_file: Path, results_dir: Path, stop):
        self.plan, self.run_id, self.plan_file = plan, run_id, plan_file
        self.results_dir, self.stop = results_dir, stop
        self.deadline = time.monotonic() + plan.profile.timeout_seconds
        self.ncu = find_ncu()
        self.blocked: tuple[str, str] | None = None  # (state, why): every later row says it
        self._metrics: list[str] | None = None  # asked of ncu once, at the first profile
        if self.ncu is None:
            self.blocked = ("no-ncu", "Nsight Compute (ncu) is not installed on this machine")

    def metrics(self) -> list[str]:
        """The measured-work counters this GPU has (none where the query fails: the
        profile then goes without them)."""
        if self._metrics is None:
            try:
                proc = subprocess.run(
                    [self.ncu, "--query-metrics"],
                    capture_output=True,
                    text=True,
                    timeout=QUERY_TIMEOUT_SECONDS,
                    check=False,
                )
                self._metrics = work_metrics(parse_metric_names(proc.stdout))
            except (OSError, subprocess.TimeoutExpired):
                self._metrics = []
        return self._metrics

    def formula(self, config: str) -> dict:
        """The FLOP formula's and the least traffic's figures for the config (benches.stats)."""
        from benches.stats import attention_bytes

        found = next(c for c in self.plan.configs if c.name == config)
        return {"formula_flops": found.flops(), "formula_dram_bytes": attention_bytes(found)}

    def row(self, config: str, identity: str, state: str, message: str = "", **metrics):
        return ProfileRow(
            run_id=self.run_id,
            config=config,
            implementation=identity,
            state=state,
            message=message,
            **metrics,
        )

    def profile(self, index: int, config: str, identity: str) -> ProfileRow:
        if self.blocked:
            return self.row(config, identity, *self.blocked)
        if self.stop():
            return self.row(config, identity, "skipped", "the run was interrupted")
        remaining = self.deadline - time.monotonic()
        if remaining < 5:
            return self.row(config, identity, "timeout", "the profile's time bound was spent")
        report = self.results_dir / report_name(index)
        target = [sys.executable, "-m", "benches.profile_target", "--plan", str(self.plan_file)]
        target += ["--config", config, "--identity", identity]
        command = profile_command(self.ncu, self.plan, report, target, self.metrics())
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=remaining, check=False
            )
        except subprocess.TimeoutExpired:
            report.unlink(missing_ok=True)
            self.blocked = ("timeout", "the profile's time bound was spent")
            return self.row(config, identity, "timeout", f"ncu ran past {remaining:.0f} s")
        output = proc.stdout + proc.stderr
        if RESTRICTED_MARK in output:
            report.unlink(missing_ok=True)
            self.blocked = (
                "restricted",
                f"{RESTRICTED_MARK}: GPU performance counters are restricted to admin users "
                "on this machine (the driver's NVreg_RestrictProfilingToAdminUsers)",
            )
            return self.row(config, identity, *self.blocked)
        if proc.returncode != 0 or not report.is_file():
            report.unlink(missing_ok=True)
            return self.row(config, identity, "failed", _last_line(output) or "ncu failed")
        return self._read_back(report, config, identity)

    def _read_back(self, report: Path, config: str, identity: str) -> ProfileRow:
        command = [self.ncu, "--import", str(report), "--csv", "--page", "raw"]
        command += ["--print-units", "base"]
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_SECONDS
            )
        except subprocess.TimeoutExpired:
            return self.row(config, identity, "failed", "ncu --import timed out")
        kernels = parse_raw_page(proc.stdout)
        if not kernels:
            message = _last_line(proc.stderr) or "no kernel was profiled"
            return self.row(config, identity, "failed", message, report=self._kept(report))
        return self.row(
            config,
            identity,
            "profiled",
            report=self._kept(report),
            **metrics_of(kernels),
            **self.formula(config),
        )

    def _kept(self, report: Path) -> str | None:
        if report.stat().st_size > MAX_REPORT_BYTES:
            report.unlink()
            return None
        return report.name


def profile_plan(
    plan: Plan, run_id: str, plan_file: Path, results_dir: Path, passed, stop
) -> list[ProfileRow]:
    """A row per (chosen config, profiled identity); `passed` holds the (config, identity)
    pairs that passed the correctness gate: nothing else is run."""
    from benches.writers import CsvWriter

    profiler = Profiler(plan, run_id, plan_file, results_dir, stop)
    identities = plan.profiled_identities
    rows: list[ProfileRow] = []
    started = time.monotonic()
    with CsvWriter(results_dir / "profile.csv", ProfileRow) as writer:
        for config in plan.profile.configs:
            for identity in identities:
                if (config, identity) not in passed:
                    row = profiler.row(config, identity, "skipped", "failed the correctness gate")
                else:
                    row = profiler.profile(len(rows), config, identity)
                writer.write([row])
                rows.append(row)
                print(f"profile: {config} {identity}: {row.state} {row.message}", file=sys.stderr)
    print(f"profile: {len(rows)} calls in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return rows
