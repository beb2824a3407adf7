"""How long a run takes, phase by phase: a sourced model, refined by finished runs.

The figures are data (orchestrator/data/phases.toml), each with its source: a measurement
here or a public page. A phase that finished runs of the same plan and backend recorded in
their manifests is estimated from those instead (their median, with headroom). "The same
plan" is the same content (`history_key`), never only the same name: a plan file named
like a past one but measuring a thousand times more must not borrow its times. Which tree a
user's kernel came from is no part of it: an edit between runs keeps the kernel's history.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

from orchestrator.backends.registry import capabilities
from orchestrator.budget import MAX_RUN_SECONDS_CEILING
from orchestrator.errors import ConfigError
from results_schema import Manifest, Plan
from results_schema.kernel_contract import KernelIdentity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODEL_PHASES = (
    "boot",
    "environment",
    "payload",
    "build",
    "correctness",
    "benchmark",
    "upload",
    "shutdown",
)
# The startup script's own phases that the model folds into a neighbour.
SCRIPT_PHASE_TO_MODEL = {"preflight": "boot", "finish": "upload"}
# Past runs predict better than the model, but vary (boot times, installs): keep headroom.
HISTORY_HEADROOM = 1.25
# The past runs a phase's estimate is the median of: the newest, as the machine is now.
RECENT_RUNS = 5
# An image family of this prefix carries torch: the run installs nothing.
TORCH_IMAGE_PREFIX = "pytorch-"


@dataclass(frozen=True)
class PhaseFigure:
    phase: str
    seconds: float
    source: str


@dataclass(frozen=True)
class RuntimeEstimate:
    phases: tuple[PhaseFigure, ...]
    # Each past complete run of this plan here: the time its phases took over its estimate.
    past_ratios: tuple[float, ...] = ()

    def error_note(self) -> str:
        """How far this estimate may be off, from what past estimates of it did."""
        if not self.past_ratios:
            return "no finished run of this plan here yet: the phase model alone, its error unknown"
        low, high, runs = min(self.past_ratios), max(self.past_ratios), len(self.past_ratios)
        took = f"{low:.2f}x" if runs == 1 else f"{low:.2f}x-{high:.2f}x"
        if runs == 1:
            return f"1 past run of this plan here took {took} its estimate"
        return f"{runs} past runs of this plan here took {took} their estimates"

    @property
    def total_seconds(self) -> int:
        return math.ceil(sum(p.seconds for p in self.phases))

    def seconds_of(self, phase: str) -> float:
        return next(p.seconds for p in self.phases if p.phase == phase)


# Stands for every user kernel tree's identity in `history_key`.
_ANY_TREE = KernelIdentity(tree_sha256="0" * 64)


def history_key(plan: Plan) -> str:
    """The key the registry files a plan's phase times under (fetch) and launch reads them
    by: the plan's content (Plan.content_sha256) with its user kernels' trees left out, so
    that a kernel edited or committed between runs keeps its history; what it measures (the
    configs, samples, implementations, each tree's contract) is all in it. A plan without a
    user kernel keeps its content key."""
    if not plan.user_kernels:
        return plan.content_sha256()
    kernels = [kernel.model_copy(update={"source": _ANY_TREE}) for kernel in plan.user_kernels]
    return plan.model_copy(update={"user_kernels": kernels}).content_sha256()


def load_phase_catalog() -> dict:
    text = resources.files("orchestrator.data").joinpath("phases.toml").read_text()
    return tomllib.loads(text)


def machine_figures(backend: str, accelerator: str, catalog: dict) -> dict:
    """The figures for this backend and GPU type; ConfigError when the model has none."""
    declared = capabilities(backend)
    table = catalog[declared.phase_model]
    if not declared.phase_model_by_accelerator:
        return table
    figures = table.get(accelerator)
    if figures is None:
        known = ", ".join(table)
        raise ConfigError(f"no runtime model for {accelerator} in phases.toml; modelled: {known}")
    if "based_on" in figures:
        # A GPU type's table names the one it shares phases with and says what differs.
        return {**machine_figures(backend, figures["based_on"], catalog), **figures}
    return figures


def model_phases(
    plan: Plan,
    backend: str,
    accelerator: str = "",
    image_family: str = "",
    warm: bool = False,
    catalog: dict | None = None,
) -> RuntimeEstimate:
    """Every phase from the model alone. `warm`: the store's caches (environment, kernel
    build) already hold this run's entries, as on every run after the first."""
    catalog = catalog or load_phase_catalog()
    figures = machine_figures(backend, accelerator, catalog)
    by_device = not capabilities(backend).phase_model_by_accelerator
    rates = figures[plan.device] if by_device else figures

    def fixed(phase: str, key: str | None = None) -> PhaseFigure:
        entry = figures[key or phase]
        return PhaseFigure(phase, float(entry["seconds"]), entry["source"])

    if by_device:
        environment = fixed("environment")
    elif image_family.startswith(TORCH_IMAGE_PREFIX):
        environment = fixed("environment", "environment_image")
    else:
        environment = fixed("environment", "environment_cached" if warm else "environment_venv")
    phases = [
        fixed("boot") if "boot" in figures else PhaseFigure("boot", 0.0, "no machine to start"),
        environment,
        fixed("payload"),
        _build(plan, fixed("build", "build_cached" if warm else "build")),
        _correctness(plan, rates),
        _benchmark(plan, rates),
        fixed("upload"),
        fixed("shutdown") if "shutdown" in figures else PhaseFigure("shutdown", 0.0, "nothing"),
    ]
    return RuntimeEstimate(tuple(phases))


def _build(plan: Plan, one: PhaseFigure) -> PhaseFigure:
    """Each kernel tree with a build command counted as one build of ours (a tree's own time
    is unknown before it ran); the trees build at once, then an A/B baseline's after them
    (build.sh.j2): the phase takes the longest of the first, plus the baseline's."""
    at_once, baseline = (sum(1 for k in w if k.contract.build) for w in plan.build_waves())
    trees = at_once + baseline
    if not trees:
        return PhaseFigure("build", 0.0, "the plan builds no kernel")
    source = f"{trees} kernel tree{'s' if trees > 1 else ''}, each: {one.source}"
    if at_once > 1:
        source += f"; {at_once} at once" + (", then the baseline's" if baseline else "")
    rounds = bool(at_once) + bool(baseline)
    return PhaseFigure("build", rounds * one.seconds, source)


# Each table's correctness figure was measured on plans of this many identities (the
# default plan's flash, sdpa, sdpa-flash and its A/A control; cpu-smoke's four): the gate
# checks every identity on every config, each user kernel (a variant too) in a worker
# process it starts, so the phase grows in proportion (issue 54: 8 variants are 12 identities).
CORRECTNESS_MEASURED_IDENTITIES = 4


def _correctness(plan: Plan, rates: dict) -> PhaseFigure:
    identities = len(plan.identities)
    seconds = rates["correctness_per_config_seconds"] * len(plan.configs)
    seconds *= identities / CORRECTNESS_MEASURED_IDENTITIES
    source = rates["correctness_source"]
    if identities != CORRECTNESS_MEASURED_IDENTITIES:
        source += f"; × {identities}/{CORRECTNESS_MEASURED_IDENTITIES} identities"
    return PhaseFigure("correctness", seconds, source)


def _benchmark(plan: Plan, rates: dict) -> PhaseFigure:
    """Kernel time from the plan's FLOPs at a sustained rate, plus each sample's overhead,
    at the most samples a config may take: an A/B run samples until it is decided, up to
    its bound (results_schema/sampling.py), and the estimate is what the run may cost."""
    implementations = len(plan.identities)
    most = plan.look_schedule()[-1]
    kernel = sum(c.flops() for c in plan.configs) / (rates["sustained_tflops"] * 1e12)
    timed = most * implementations * kernel
    overhead = most * len(plan.configs) * implementations * rates["per_sample_seconds"]
    source = rates["benchmark_source"]
    if most > plan.samples_per_config:
        source += f"; at the sampling bound, {most} samples a config"
    return _with_profile(plan, rates, PhaseFigure("benchmark", timed + overhead, source))


def _with_profile(plan: Plan, rates: dict, figure: PhaseFigure) -> PhaseFigure:
    """A profile runs after the timing, inside the benchmark phase: one ncu run per call."""
    if plan.profile is None:
        return figure
    calls = len(plan.profile.configs) * len(plan.profiled_identities)
    seconds = calls * rates["profile_per_call_seconds"]
    return PhaseFigure(
        "benchmark",
        figure.seconds + seconds,
        f"{figure.source}; profile: {calls} calls × {rates['profile_source']}",
    )


def refine(
    model: RuntimeEstimate, past_runs: list[dict[str, float]], headroom: float = HISTORY_HEADROOM
) -> RuntimeEstimate:
    """Each phase that past complete runs of the same plan content recorded
    (registry.past_phase_seconds, oldest first): the median of the last RECENT_RUNS of them,
    times `headroom` (1 where the estimate bounds no bill). A machine's load comes and goes
    (cpu-smoke took 4-32 s on one 2-core host within minutes): the latest runs say most of
    what the next will take. A recorded time no run could have taken (beyond a day, GCE's
    longest cap) is not history."""
    phases = []
    for figure in model.phases:
        seen = [
            run[figure.phase]
            for run in past_runs
            if figure.phase in run and _possible_seconds(run[figure.phase])
        ]
        if not seen:
            phases.append(figure)
            continue
        recent = sorted(seen[-RECENT_RUNS:])
        middle = len(recent) // 2
        median = recent[middle] if len(recent) % 2 else (recent[middle - 1] + recent[middle]) / 2
        source = (
            f"median of the last {len(recent)} of {len(seen)} past runs"
            if len(seen) > len(recent)
            else f"median of {len(seen)} past run{'s' * (len(seen) > 1)}"
        )
        if headroom != 1.0:
            source += f" × {headroom}"
        phases.append(PhaseFigure(figure.phase, median * headroom, source))
    return RuntimeEstimate(tuple(phases))


def with_past_error(estimate: RuntimeEstimate, past: list[tuple[int, float]]) -> RuntimeEstimate:
    """`estimate` with the ratio (took / estimated) of each past run that had an estimate."""
    ratios = tuple(
        took / estimated
        for estimated, took in past
        if estimated > 0 and _possible_seconds(took) and took > 0
    )
    return RuntimeEstimate(estimate.phases, ratios)


def _possible_seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and 0 <= value <= MAX_RUN_SECONDS_CEILING


def recorded_phase_seconds(
    manifest: Manifest, created_at: datetime, max_run_seconds: float
) -> dict[str, float]:
    """A finished run's phases in the model's terms: its manifest's phase times (which the
    boundary held within the run's duration), and boot as the time from the launch to the
    script's start, at most the run's time cap."""
    seconds: dict[str, float] = {}
    if manifest.started_at is not None:
        boot = (manifest.started_at - created_at).total_seconds()
        seconds["boot"] = min(max(boot, 0.0), float(max_run_seconds))
    for record in manifest.phases:
        phase = SCRIPT_PHASE_TO_MODEL.get(record.name, record.name)
        seconds[phase] = seconds.get(phase, 0.0) + record.seconds
    return seconds
