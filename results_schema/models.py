"""Pydantic models of every file the payload writes (DESIGN.md, "Bucket layout")."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from results_schema.containment import Containment, LeftoverSweep, TreeCheck
from results_schema.gpu_kinds import DensePeaks
from results_schema.implementations import BASELINE_SUFFIX, CONTROL_SUFFIX
from results_schema.kernel_contract import KernelIdentity, UserKernel, UserKernelBuild
from results_schema.ranking import Ranking

# One definition of both, in the stdlib-only record tool the startup script carries.
from results_schema.record import MAX_LEFTOVER_SWEEPS, PHASES
from results_schema.sampling import (
    FAMILY_ALPHA,
    SAMPLES_FACTOR,
    STOPS,
    look_confidence,
    look_schedule,
)
from results_schema.verdicts import DEFAULT_MARGIN, DIFFERENT, verdict

# float8_e4m3fn: q, k, v quantized per tensor to e4m3, each with a float32 descale, the output
# in bfloat16 (docs/kernel-contract.md, "FP8").
Dtype = Literal["float16", "bfloat16", "float32", "float64", "float8_e4m3fn"]
Device = Literal["cuda", "cpu"]
RunState = Literal["running", "complete", "partial", "failed"]
# single: one call a sample; graph: a CUDA graph of back-to-back calls a sample; batch: on
# the CPU, back-to-back calls a sample (each mode's time is per call).
TimingMode = Literal["single", "graph", "batch"]
# results_schema/verdicts.py says what each means; `indistinguishable` is what runs made
# before non-inferiority wrote for both not-slower and undecided (read, never written now).
Verdict = Literal["faster", "slower", "equivalent", "not-slower", "undecided", "indistinguishable"]
# Which statistics a gate judges (results_schema/gate_rule.py): the geometric mean over
# configs, or that and every config.
GateOn = Literal["geomean", "any"]
# Why a row gets no verdict: faster than the GPU's physical peak allows, an output taken
# from inside the timed loop was wrong, or samples a median cannot summarise: quantised (few
# distinct values, a timer's resolution) or bimodal (two groups apart, e.g. scheduler quanta).
Flag = Literal["impossible", "wrong-timed-output", "quantised", "bimodal"]
# The A/A control's one decision for a whole run (benches.noise).
NoiseVerdict = Literal["quiet", "noisy"]
# The backend a correctness row names for a kernel that cannot run there (benches.correctness):
# no verdict on the kernel, and no failure of it.
UNAVAILABLE_BACKEND = "unavailable"
CheckStage = Literal["gate", "graph-probe", "timed-first", "timed-last", "timing"]


def implementation_of(identity: str) -> str:
    """The registry implementation a timed identity runs (the A/A control runs its twin's)."""
    return identity.removesuffix(CONTROL_SUFFIX)


class _Strict(BaseModel):
    # A VM's numbers are untrusted: NaN and infinity are refused everywhere, not field by field.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AttentionConfig(_Strict):
    """One attention problem: q is (batch, heads, seq_len, head_dim), k and v
    (batch, kv_heads, seq_len, head_dim), contiguous."""

    name: str = Field(description="unique within a plan, e.g. 'fp16-b4h16s1024d64-causal'")
    batch: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(
        default=None,
        ge=1,
        description="k/v heads for grouped-query attention (heads must be a multiple); "
        "None: as many as heads",
    )
    seq_len: int = Field(ge=1)
    head_dim: int = Field(ge=1, le=256)
    dtype: Dtype
    causal: bool

    @model_validator(mode="after")
    def _whole_groups(self) -> AttentionConfig:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(
                f"{self.name}: {self.heads} heads over {self.kv_heads} k/v heads; grouped-query "
                "attention needs heads to be a multiple of kv_heads"
            )
        return self

    @property
    def key_heads(self) -> int:
        """How many heads k and v have (heads, unless grouped)."""
        return self.kv_heads or self.heads

    def flops(self) -> float:
        """Forward FLOPs, 4*B*H*S*S*D, halved for causal (FlashAttention's convention)."""
        full = 4.0 * self.batch * self.heads * self.seq_len * self.seq_len * self.head_dim
        return full / 2 if self.causal else full


class Comparison(_Strict):
    """The A/B question a run answers first: is the candidate faster than this baseline?"""

    baseline: str = Field(
        description="the identity compared with the candidate: '<candidate>@baseline' (our "
        "kernel built from another kernels/ tree) or a registry implementation"
    )
    source: Literal["git", "tree", "implementation"] = Field(
        description="git: the kernels/ tree of a revision of this repository; tree: a "
        "kernels/ directory; implementation: a registry implementation"
    )
    ref: str | None = Field(default=None, description="the revision or path as given")
    commit: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{40,64}$", description="git: the revision's commit"
    )
    candidate_dirty: bool | None = Field(
        default=None, description="git: the candidate is a working tree with uncommitted changes"
    )


class ProfileRequest(_Strict):
    """Nsight Compute after the timing: which configs, which sections, how long at most."""

    configs: list[str] = Field(min_length=1, description="names of the plan's configs")
    sections: list[str] = Field(min_length=1, description="ncu --section identifiers")
    timeout_seconds: int = Field(ge=10, description="the whole profiling step's time bound")


class Sampling(_Strict):
    """How long an A/B run samples (results_schema/sampling.py): until its gate's statistics
    are decided, at looks set before the run, within these bounds and the run's time cap."""

    max_samples_per_config: int | None = Field(
        default=None,
        ge=1,
        description="the most samples a config gets (looks at samples_per_config, doubling, "
        f"up to this); None: {SAMPLES_FACTOR} × samples_per_config",
    )
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        description="the timing's bound in seconds: no look starts that would end after it "
        "(the run's time cap bounds it too); None: the time cap alone",
    )
    decide_on: GateOn = Field(
        default="geomean",
        description="what must be decided before sampling stops: the geometric mean over "
        "configs (and the A/A control), or that and every config (`launch --gate-on any`)",
    )


class Plan(_Strict):
    """What a run measures. Plans are data files in benches/plans/, checked against this."""

    name: str
    description: str
    device: Device
    candidate: str = Field(description="the implementation under test, a benches.registry name")
    # Was `baselines` (still read from older plan files and manifests): "baseline" now means
    # only the other side of an A/B (`--baseline REF`, `--baseline-impl`, comparison.baseline).
    compared_with: list[str] = Field(
        min_length=1,
        validation_alias=AliasChoices("compared_with", "baselines"),
        description="implementations compared with it: the A/B baseline first if any, then "
        "the yardsticks (SDPA) and public peers",
    )
    variants: list[str] = Field(
        default_factory=list,
        description="further candidates timed beside the candidate, in every round, each "
        "gated and timed as its own implementation: a kernel's declared variants "
        "('<name>[<variant>]') and --candidates revisions ('<name>@<commit 7>'), all user "
        "kernels of the plan",
    )
    reference: str = Field(description="higher-precision implementation for the correctness gate")
    samples_per_config: int = Field(ge=1, description="timed samples per (config, implementation)")
    warmup_min: int = Field(default=3, ge=0, description="warmup calls before checking stability")
    warmup_max: int = Field(default=50, ge=0)
    flush_l2: bool = Field(
        default=True, description="zero a buffer larger than L2 before each sample"
    )
    graph_below_us: float = Field(
        default=0.0,
        ge=0,
        description="time configs whose single-launch median is under this many µs in "
        "CUDA-graph batch mode (0 = never)",
    )
    seed: int = 0
    placements: int = Field(
        default=1,
        ge=1,
        description="independent placements per implementation and config (fresh buffers, "
        "fresh graph captures, samples split evenly among them); 2 or more make the speedup "
        "interval a cluster bootstrap over placements",
    )
    margin: float = Field(
        default=DEFAULT_MARGIN,
        ge=0,
        lt=1,
        description="the margin δ of every verdict of the run and of its gate: slower needs "
        "the whole interval below 1-δ, not slower its lower bound at or above 1-δ, faster "
        "above 1+δ, equivalent inside [1-δ, 1+δ] (results_schema/verdicts.py)",
    )
    control: str | None = Field(
        default=None,
        description="an implementation of the plan timed a second time as '<name>@aa' (an "
        "A/A control): its verdict against itself is the run's noise floor",
    )
    comparison: Comparison | None = Field(
        default=None, description="an A/B comparison the summary and report lead with"
    )
    sampling: Sampling | None = Field(
        default=None,
        description="how long an A/B run samples until its comparison is decided; None: "
        f"up to {SAMPLES_FACTOR} × samples_per_config, on the geometric mean",
    )
    profile: ProfileRequest | None = Field(
        default=None, description="Nsight Compute profiles taken after the timing"
    )
    configs: list[AttentionConfig] = Field(min_length=1)
    user_kernels: list[UserKernel] = Field(
        default_factory=list,
        description="users' kernels the plan times (`bench launch --kernel DIR`), each under "
        "its identity: the candidate's declared name, and '<name>@baseline' for an A/B "
        "baseline revision",
    )
    candidate_source: KernelIdentity | None = Field(
        default=None,
        description="which kernels/ tree of this repository the candidate came from, read "
        "at launch (a user's kernel carries its own in user_kernels); provenance, not part "
        "of the content key",
    )

    @model_validator(mode="after")
    def _unique_config_names(self) -> Plan:
        names = [c.name for c in self.configs]
        if len(set(names)) != len(names):
            raise ValueError("config names must be unique within a plan")
        if self.control is not None and self.control not in self.implementations:
            raise ValueError("control must be the candidate or one it is compared with")
        if self.comparison is not None:
            _check_comparison(self, self.comparison)
        if self.profile is not None and set(self.profile.configs) - set(names):
            unknown = sorted(set(self.profile.configs) - set(names))
            raise ValueError(f"profile names configs the plan lacks: {', '.join(unknown)}")
        if len(set(self.identities)) != len(self.identities):
            raise ValueError("the plan times an identity twice (a variant among the others)")
        undeclared = [v for v in self.variants if self.user_kernel(v) is None]
        if undeclared:
            raise ValueError(f"variants the plan declares no kernel for: {', '.join(undeclared)}")
        untimed = [k.identity for k in self.user_kernels if k.identity not in self.identities]
        if untimed:
            raise ValueError(f"user kernels the plan does not time: {', '.join(untimed)}")
        most = self.sampling.max_samples_per_config if self.sampling else None
        if most is not None and most < self.samples_per_config:
            raise ValueError(
                f"sampling.max_samples_per_config {most} is below samples_per_config "
                f"{self.samples_per_config}, the first look's"
            )
        return self

    def look_schedule(self) -> list[int]:
        """Samples per config at each look set before the run (results_schema/sampling.py):
        doubling up to the bound with an A/B comparison to decide, else one look."""
        first = self.samples_per_config
        if self.comparison is None:
            return [first]
        most = self.sampling.max_samples_per_config if self.sampling else None
        return look_schedule(first, most or SAMPLES_FACTOR * first)

    @property
    def decide_on(self) -> GateOn:
        """What its sampling decides before it stops: the geometric mean, or every config."""
        return self.sampling.decide_on if self.sampling else "geomean"

    def gate_family(self) -> int:
        """How many gated statistics share a look's error (results_schema/sampling.py): the
        geometric mean, and with decide_on any each config too; 1 without a comparison."""
        if self.comparison is None or self.decide_on != "any":
            return 1
        return 1 + len(self.configs)

    @property
    def implementations(self) -> list[str]:
        return [self.candidate, *[b for b in self.compared_with if b != self.candidate]]

    @property
    def control_identity(self) -> str | None:
        return self.control + CONTROL_SUFFIX if self.control else None

    @property
    def baseline_identity(self) -> str | None:
        """The identity of a baseline kernel tree, timed besides the implementations."""
        compared = self.comparison
        return compared.baseline if compared and compared.source != "implementation" else None

    @property
    def identities(self) -> list[str]:
        """Everything timed: the implementations, the further candidates (variants), the
        baseline kernel tree's build, then the A/A control's second identity."""
        tree = [self.baseline_identity] if self.baseline_identity else []
        control = [self.control_identity] if self.control else []
        return [*self.implementations, *self.variants, *tree, *control]

    @property
    def candidates(self) -> list[str]:
        """The candidate and its variants: what a ranking orders."""
        return [self.candidate, *self.variants]

    @property
    def profiled_identities(self) -> list[str]:
        """What a profile covers: every identity but the A/A control, which runs its
        twin's code."""
        return [i for i in self.identities if i != self.control_identity]

    def kernel_folders(self) -> list[UserKernel]:
        """One user kernel per folder of the payload, the first to name it: what the build
        phase builds (build_shared variants share the candidate's folder and its build)."""
        first: dict[str, UserKernel] = {}
        for kernel in self.user_kernels:
            first.setdefault(kernel.directory, kernel)
        return list(first.values())

    def build_waves(self) -> tuple[list[UserKernel], list[UserKernel]]:
        """The kernel folders the build phase builds at once, and the A/B baseline's (if
        any), built once they all ended: its check against launch's digest just before its
        build then covers every other tree's build (build.sh.j2)."""
        folders = self.kernel_folders()
        baseline = self.baseline_identity
        return (
            [k for k in folders if k.identity != baseline],
            [k for k in folders if k.identity == baseline],
        )

    def user_kernel(self, identity: str) -> UserKernel | None:
        return next((k for k in self.user_kernels if k.identity == identity), None)

    def candidate_tree(self) -> KernelIdentity | None:
        """Which tree the candidate was built from: a user's kernel's own, else our
        kernels/ tree as launch read it; None for a plan launched before either was kept."""
        kernel = self.user_kernel(self.candidate)
        return kernel.source if kernel else self.candidate_source

    def samples_per_implementation(self) -> int:
        return self.samples_per_config * len(self.configs)

    def content_sha256(self) -> str:
        """The plan's content key: sha256 of its canonical JSON (sorted keys, defaults
        filled in), so two files that measure the same thing share it whatever their name.
        Fields added later are left out while unset, so older plans keep their key."""
        content = self.model_dump(mode="json")
        for name in _ADDED_FIELDS:
            if not content[name]:
                del content[name]
        for name in _PROVENANCE_FIELDS:
            del content[name]
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


# Plan fields newer than the content key: absent from it while empty (content_sha256).
_ADDED_FIELDS = ("user_kernels", "sampling", "variants")
# Where the candidate came from, not what is measured: a new commit keeps the plan's key
# (and the runtime model's history of it).
_PROVENANCE_FIELDS = ("candidate_source",)


def _check_comparison(plan: Plan, comparison: Comparison) -> None:
    if comparison.source == "implementation":
        if comparison.baseline not in plan.compared_with or comparison.baseline == plan.candidate:
            raise ValueError("comparison.baseline must be one the plan compares the candidate with")
    elif comparison.baseline != plan.candidate + BASELINE_SUFFIX:
        raise ValueError(f"a kernel tree baseline is timed as '{plan.candidate}{BASELINE_SUFFIX}'")


class Measurement(_Strict):
    """One timed sample: a row of measurements.csv (long format)."""

    run_id: str
    config: str
    implementation: str
    mode: TimingMode
    round: int = Field(ge=0, description="interleaving round; paired ratios match on it")
    placement: int = Field(
        default=0, ge=0, description="which of the config's placements the round belongs to"
    )
    calls: int = Field(ge=1, description="calls inside the timed region (graph mode batches)")
    latency_ms: float = Field(
        gt=0,
        description="time per call: the harness's own clock's, but for a kernel in a worker "
        "process on the GPU, whose own CUDA events' time this is (reported_ms, less what a "
        "worker's own events add over the harness's process in single launches), held by "
        "the harness's bracket (harness_ms; docs/security.md says why and what that leaves)",
    )
    reported_ms: float | None = Field(
        default=None,
        gt=0,
        description="time per call as the kernel's own process reported it (a kernel in a "
        "worker process only); a kernel whose reports stray far from the harness's times "
        "fails its row",
    )
    harness_ms: float | None = Field(
        default=None,
        description="time per call by the harness's bracket around a worker's call, less "
        "what a bracket adds (a kernel in a worker process only; may be negative from noise)",
    )
    # What NVML read after the sample (benches/telemetry.py); None without NVML.
    sm_clock_mhz: int | None = Field(default=None, ge=0, le=100_000)
    mem_clock_mhz: int | None = Field(default=None, ge=0, le=100_000)
    temperature_c: int | None = Field(default=None, ge=0, le=1_000)
    power_w: float | None = Field(default=None, ge=0, le=100_000)
    throttle_reasons: int | None = Field(default=None, description="NVML clocks-event bitmask")
    throttled: bool = False
    timestamp: AwareDatetime


class SummaryRow(_Strict):
    """Statistics of one (config, implementation): a row of summary.csv."""

    run_id: str
    config: str
    implementation: str
    backend: str = Field(description="which kernel actually ran, as the registry reports it")
    mode: TimingMode
    n: int = Field(ge=1)
    median_ms: float = Field(gt=0)
    p10_ms: float = Field(gt=0)
    p90_ms: float = Field(gt=0)
    mean_ms: float = Field(gt=0)
    std_ms: float = Field(ge=0)
    iqr_over_median: float = Field(ge=0)
    tflops: float = Field(ge=0)
    pct_of_peak: float | None = Field(default=None, ge=0)
    throttled_samples: int = Field(default=0, ge=0)
    # Filled on every row but the candidate's: the candidate's speedup over this one.
    speedup: float | None = Field(
        default=None, gt=0, description="median of paired ratios this/candidate"
    )
    speedup_ci_low: float | None = Field(default=None, gt=0)
    speedup_ci_high: float | None = Field(default=None, gt=0)
    verdict: Verdict | None = None
    versus: str | None = Field(
        default=None,
        description="whose speedup over this row `speedup` is: the candidate, or for the "
        "A/A control's row, its twin",
    )
    placements: int | None = Field(default=None, ge=1, description="placements sampled")
    flag: Flag | None = Field(default=None, description="why this row has no verdict")
    repro: str = Field(
        default="",
        description="the command that times this row again, run in the run's payload "
        "directory (docs/kernel-contract.md: Reproducing a row)",
    )

    @model_validator(mode="after")
    def _speedup_with_its_interval(self) -> SummaryRow:
        _check_interval(self.speedup, self.speedup_ci_low, self.speedup_ci_high)
        return self

    def judged_at(self, margin: float) -> SummaryRow:
        """The row with its verdict made again from its interval by the one rule at
        `margin` (a row without a verdict, flagged, stays without)."""
        if self.verdict is None or self.speedup_ci_low is None:
            return self
        word = verdict(self.speedup_ci_low, self.speedup_ci_high, margin)
        return self.model_copy(update={"verdict": word})


def _check_interval(point: float | None, low: float | None, high: float | None) -> None:
    """A speedup comes with its interval or not at all, and the interval is ordered. The
    point may lie outside it: a bootstrap percentile interval need not contain it."""
    given = [value is not None for value in (point, low, high)]
    if any(given) and not all(given):
        raise ValueError("speedup, speedup_ci_low and speedup_ci_high are given together")
    if low is not None and high is not None and low > high:
        raise ValueError(f"the interval's low end {low} is above its high end {high}")


class CorrectnessRow(_Strict):
    """The correctness gate for one (config, implementation): a row of correctness.csv."""

    run_id: str
    config: str
    implementation: str
    backend: str
    passed: bool
    rel_l2_error: float | None = Field(default=None, ge=0)
    max_abs_error: float | None = Field(default=None, ge=0)
    tolerance: float | None = Field(default=None, ge=0)
    nonfinite: int = Field(default=0, ge=0)
    message: str = ""
    stage: CheckStage = Field(
        default="gate",
        description="gate: fresh inputs, poisoned output; graph-probe: the call captured in "
        "a CUDA graph and replayed on fresh inputs (work off the calling stream is lost); "
        "timed-first/-last: an output from the timed loop's first/last round; timing: a "
        "user's kernel whose worker process was lost (crash, hang) while being timed",
    )
    repro: str = Field(
        default="",
        description="the command that checks this row again, run in the run's payload "
        "directory (docs/kernel-contract.md: Reproducing a row)",
    )

    def reason(self) -> str:
        """Why the row failed, in one line: its message (an exception, a check's finding),
        with its error against the tolerance where the message lacks them."""
        text = " ".join(self.message.split()) or "failed, no reason recorded"
        measured = self.max_abs_error is not None and self.tolerance is not None
        if measured and "tolerance" not in text:
            text += f" (max error {self.max_abs_error:.3g}, tolerance {self.tolerance:.3g})"
        return text

    def failure(self) -> str:
        """A failed row in a few words: 'unavailable' for a kernel that cannot run here, else
        'FAILED <stage>'."""
        return "unavailable" if self.backend == UNAVAILABLE_BACKEND else f"FAILED {self.stage}"

    def failure_line(self) -> str:
        """A failed row as a summary or a report lists it, in one line: '<config>
        <identity>: FAILED <stage>: <reason>' (VM text: the caller escapes it)."""
        return f"{self.config} {self.implementation}: {self.failure()}: {self.reason()}"


def first_failures(checks) -> dict[tuple[str, str], CorrectnessRow]:
    """(config, identity) -> its first failed check (correctness.csv's before
    timed_checks.csv's, as read), for each that failed one."""
    failed: dict[tuple[str, str], CorrectnessRow] = {}
    for check in checks:
        if not check.passed:
            failed.setdefault((check.config, check.implementation), check)
    return failed


class IntervalMethod(_Strict):
    """How summary.csv's speedup intervals and verdicts were computed (statistics.json)."""

    method: Literal["placement-cluster-bootstrap", "round-bootstrap"]
    description: str
    confidence: float
    resamples: int
    placements: int
    margin: float
    control: str | None = None


class OverallSpeedup(_Strict):
    """One identity's row speedups across every config: a geometric mean of the
    per-config median paired ratios, with a cluster-bootstrap interval (comparison.json)."""

    identity: str = Field(description="the identity compared, as summary.csv names it")
    versus: str = Field(description="whose speedup over it: the candidate, or the A/A twin")
    configs: int = Field(ge=1, description="configs with a verdict-worthy speedup")
    geomean: float = Field(gt=0)
    ci_low: float = Field(gt=0)
    ci_high: float = Field(gt=0)
    verdict: Verdict
    method: str

    @model_validator(mode="after")
    def _ordered_interval(self) -> OverallSpeedup:
        _check_interval(self.geomean, self.ci_low, self.ci_high)
        return self

    def judged_at(self, margin: float) -> OverallSpeedup:
        """The line with its verdict made again by the one rule at `margin`."""
        return self.model_copy(update={"verdict": verdict(self.ci_low, self.ci_high, margin)})


class ControlInterval(_Strict):
    """One of the A/A control's simultaneous intervals: a config's speedup of the control
    over its twin, or (config None) their geometric mean over the judged configs."""

    config: str | None = Field(description="the config; None: the geometric mean")
    speedup: float = Field(gt=0)
    ci_low: float = Field(gt=0)
    ci_high: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered_interval(self) -> ControlInterval:
        _check_interval(self.speedup, self.ci_low, self.ci_high)
        return self


class Noise(_Strict):
    """Whether the run's machine was quiet enough for its verdicts: the A/A control judged
    once for the whole run (noise.json, carried by the manifest)."""

    control: str = Field(description="the A/A control's identity, e.g. 'sdpa@aa'")
    verdict: NoiseVerdict = Field(description="noisy: the run's verdicts are not reliable")
    reason: str
    margin: float = Field(ge=0, lt=1, description="the plan's δ the verdict was made at")
    confidence: float = Field(gt=0, lt=1, description="family-wise, over all the intervals")
    intervals: list[ControlInterval] = Field(
        default_factory=list, description="simultaneous intervals: each config's, the mean's"
    )
    unjudged: list[str] = Field(
        default_factory=list, description="configs whose control rows have no verdict (flags)"
    )
    method: str

    def different(self, margin: float) -> list[ControlInterval]:
        """The intervals that call two identical implementations different at `margin`
        (the gate re-judges them at its own)."""
        return [i for i in self.intervals if verdict(i.ci_low, i.ci_high, margin) in DIFFERENT]

    def noisy_at(self, margin: float) -> bool:
        """The decision at `margin`: noisy when the control could not vouch for the run or
        called its twin different there."""
        return not self.vouches() or bool(self.different(margin))

    def vouches(self) -> bool:
        """Whether the control judged at least half the run's configs: where most of its
        rows were flagged (bimodal, quantised), the machine was noisy whatever the rest say."""
        judged = sum(i.config is not None for i in self.intervals)
        return judged > 0 and 2 * judged >= judged + len(self.unjudged)


SamplingStop = Literal[tuple(STOPS)]  # type: ignore[valid-type]


class SamplingRecord(_Strict):
    """Why a run's sampling stopped (sampling.json, carried by the manifest): the looks it
    took of those set before it (results_schema/sampling.py), and what was open at the last."""

    stopped: SamplingStop = Field(description="; ".join(f"{k}: {v}" for k, v in STOPS.items()))
    reason: str = Field(description="the same in words, with what was still undecided")
    schedule: list[int] = Field(
        min_length=1, max_length=64, description="samples per config at each look set"
    )
    looks: int = Field(ge=1, description="looks taken")
    samples_per_config: int = Field(ge=1, description="samples a config had at the last look")
    confidence: float = Field(gt=0, lt=1, description="of the intervals made at that look")
    family: int = Field(
        default=1,
        ge=1,
        description="gated statistics sharing the run's error, each judged at its share "
        "(1; with --gate-on any, 1 + the plan's configs: Bonferroni)",
    )
    undecided: list[str] = Field(
        default_factory=list,
        max_length=300,
        description="what was still undecided at the last look: configs, 'the geometric "
        "mean', 'the A/A control'",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SamplingRecord:
        if self.looks > len(self.schedule):
            raise ValueError(f"{self.looks} looks taken of {len(self.schedule)} set")
        if self.schedule != look_schedule(self.schedule[0], self.schedule[-1]):
            raise ValueError(f"schedule {self.schedule} is not one look_schedule sets")
        if self.samples_per_config != self.schedule[self.looks - 1]:
            raise ValueError("samples_per_config is not the last look's")
        expected = look_confidence(self.schedule, self.looks - 1, FAMILY_ALPHA / self.family)
        if abs(self.confidence - expected) > 1e-9:
            raise ValueError(
                f"confidence {self.confidence} is not look {self.looks}'s "
                f"(for a family of {self.family})"
            )
        if self.stopped == "max-samples" and self.looks != len(self.schedule):
            raise ValueError("max-samples before the last look")
        if self.stopped == "decided" and self.undecided:
            raise ValueError("decided with statistics undecided")
        return self


ProfileState = Literal["profiled", "no-ncu", "restricted", "timeout", "failed", "skipped"]


class ProfileRow(_Strict):
    """Nsight Compute's view of one (config, implementation): a row of profile.csv. The
    duration sums every kernel the call launched; the rest is the longest kernel's."""

    run_id: str
    config: str
    implementation: str
    state: ProfileState
    message: str = ""
    report: str | None = Field(default=None, description="results/<name>.ncu-rep, if kept")
    kernels: int | None = Field(default=None, ge=0, description="kernels the call launched")
    kernel: str | None = Field(default=None, description="the longest kernel's name")
    duration_us: float | None = Field(default=None, ge=0)
    sm_throughput_pct: float | None = Field(default=None, ge=0)
    tensor_pipe_pct: float | None = Field(default=None, ge=0)
    dram_throughput_pct: float | None = Field(default=None, ge=0)
    achieved_occupancy_pct: float | None = Field(default=None, ge=0)
    registers_per_thread: int | None = Field(default=None, ge=0)
    shared_mem_per_block_bytes: int | None = Field(default=None, ge=0)
    local_memory_bytes: float | None = Field(
        default=None, ge=0, description="local-memory (spill) traffic, loads + stores"
    )
    top_stalls: str = Field(
        default="",
        description="the top warp-stall reasons, 'reason:cycles;…' per issued instruction",
    )
    tensor_flops: float | None = Field(
        default=None,
        ge=0,
        description="tensor-pipe FLOPs Nsight Compute counted over the call's kernels "
        "(sm__ops_path_tensor_src_*: an FMA is two)",
    )
    formula_flops: float | None = Field(
        default=None, ge=0, description="the FLOP formula's: 4·B·H·S²·D, halved for causal"
    )
    dram_bytes: float | None = Field(
        default=None, ge=0, description="DRAM bytes read and written (dram__bytes.sum)"
    )
    formula_dram_bytes: float | None = Field(
        default=None, ge=0, description="the least traffic: q, k, v read and o written once"
    )
    sm_clock_mhz: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="the SM clock over the longest kernel (sm__cycles_elapsed.avg.per_second)",
    )


class Status(_Strict):
    """The heartbeat: status.json, rewritten at every phase and during the benchmark."""

    run_id: str
    phase: Literal[PHASES]  # type: ignore[valid-type]
    state: RunState
    done: int = Field(default=0, ge=0)
    total: int = Field(default=0, ge=0)
    updated_at: AwareDatetime
    message: str = ""


class FileEntry(_Strict):
    path: str = Field(description="relative to the run's directory, e.g. results/summary.csv")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)
    rows: int | None = Field(default=None, ge=0, description="data rows, for CSV files")


class PhaseRecord(_Strict):
    name: Literal[PHASES]  # type: ignore[valid-type]
    seconds: float = Field(ge=0)
    exit_code: int


class EnvironmentFingerprint(BaseModel):
    """What the numbers were measured on. Unknown values stay None; extra keys are kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    gpu_name: str | None = None
    gpu_uuid: str | None = None
    gpu_count: int | None = Field(default=None, ge=0)
    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = Field(
        default=None,
        pattern=r"^[0-9]{1,9}$",
        description="the cuDNN torch loaded, as torch.backends.cudnn.version() gives it "
        "(e.g. 91900: 9.19.0); None where torch has no cuDNN (a CPU build)",
    )
    torch: str | None = None
    triton: str | None = None
    numpy: str | None = None
    python: str | None = None
    nvcc: str | None = None
    platform: str | None = None
    cpu: str | None = None
    image: str | None = None
    machine_type: str | None = None
    zone: str | None = None
    spot: bool | None = None
    cpu_threads: int | None = Field(
        default=None,
        ge=1,
        description="torch's intra-op threads in the harness and in each kernel's worker, "
        "set alike where they time on the CPU (benches/cpu_threads.py); None where torch's "
        "default was left (CUDA)",
    )
    peak_tflops: float | None = Field(
        default=None, ge=0, description="dense 16-bit tensor peak used for %"
    )
    fp8_peak_tflops: float | None = Field(
        default=None, ge=0, description="dense e4m3 tensor peak used for % of FP8 configs"
    )
    peak_gbytes_per_s: float | None = Field(
        default=None, description="memory bandwidth peak: faster than it is impossible"
    )

    def dense_peaks(self) -> DensePeaks:
        """The peaks a summary row's % of peak and `impossible` flag are taken against."""
        return DensePeaks(self.peak_tflops, self.fp8_peak_tflops)

    # NVML's ceilings for the clocks and power measurements.csv records per sample.
    sm_clock_max_mhz: int | None = Field(default=None, ge=0, le=100_000)
    mem_clock_max_mhz: int | None = Field(default=None, ge=0, le=100_000)
    power_limit_w: float | None = Field(
        default=None, ge=0, le=100_000, description="the power limit in force (enforced)"
    )
    # When the run started (NVML, else nvidia-smi); measurements.csv has them per sample.
    sm_clock_mhz: int | None = Field(default=None, ge=0, le=100_000)
    mem_clock_mhz: int | None = Field(default=None, ge=0, le=100_000)
    power_draw_w: float | None = Field(default=None, ge=0, le=100_000)


class KernelBuild(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    source_sha256: str
    arch: str
    flags: list[str]
    # Flags some units get beyond `flags` (e.g. a ptxas register-usage level), by unit name.
    unit_flags: dict[str, list[str]] = Field(default_factory=dict)
    seconds: float = Field(ge=0)
    cached: bool
    nvcc: str | None = None
    library: str | None = None


class Cost(_Strict):
    backend: str
    rate_usd_per_hour: float = Field(ge=0)
    budget_usd: float = Field(ge=0)
    max_run_seconds: int = Field(ge=0)
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    estimated_usd: float | None = Field(default=None, ge=0)


class Manifest(_Strict):
    """manifest.json: written last; a run without one is incomplete."""

    schema_version: Literal["1"]
    run_id: str
    status: Literal["complete", "partial", "failed"]
    reason: str = ""
    failed_phase: str | None = None
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime
    phases: list[PhaseRecord] = []
    plan: Plan | None = None
    environment: EnvironmentFingerprint | None = None
    kernel_build: KernelBuild | None = None
    baseline_build: KernelBuild | None = Field(
        default=None, description="the A/B baseline kernel tree's build"
    )
    user_builds: list[UserKernelBuild] | None = Field(
        default=None, max_length=8, description="how each user kernel tree's build went"
    )
    cost: Cost | None = None
    statistics: IntervalMethod | None = None
    comparison: list[OverallSpeedup] | None = Field(
        default=None, description="the candidate over each identity across all configs"
    )
    noise: Noise | None = Field(
        default=None, description="the A/A control's decision on the run (noise.json)"
    )
    sampling: SamplingRecord | None = Field(
        default=None, description="why the timing stopped sampling (sampling.json)"
    )
    ranking: Ranking | None = Field(
        default=None,
        description="the candidates ranked by speedup over the baseline, with simultaneous "
        "intervals (ranking.json: docs/ranking.md)",
    )
    trees: list[TreeCheck] | None = Field(
        default=None,
        max_length=64,
        description="each tree's files checked just before use (the harness, kernel trees)",
    )
    containment: Containment | None = Field(
        default=None, description="how the kernel trees were held apart (containment.json)"
    )
    leftovers: list[LeftoverSweep] | None = Field(
        default=None,
        max_length=MAX_LEFTOVER_SWEEPS,
        description="processes a build or the measure phase left running, ended",
    )
    files: list[FileEntry] = []

    def file(self, path: str) -> FileEntry | None:
        return next((f for f in self.files if f.path == path), None)

    def ab_overall(self) -> OverallSpeedup | None:
        """An A/B run's geometric mean over configs (its comparison line for the baseline),
        its verdict made by the one rule at the run's margin, as the gate judges it; None
        without an A/B comparison or a compared config."""
        plan = self.plan
        if plan is None or plan.comparison is None:
            return None
        baseline = plan.comparison.baseline
        line = next((o for o in self.comparison or [] if o.identity == baseline), None)
        return line.judged_at(plan.margin) if line else None
