"""What launch's options change in a plan: the user's kernel, the A/B comparison, the
public peers, the Nsight Compute profile and the margin of the run's verdicts.

Pure functions of a plan (the exceptions read trees: a git revision, a user's kernel
repository): the plan that comes out is what the payload carries, so the VM reads every
choice from plan.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.collect import TreeFiles
from orchestrator.kernel_tree.own import own_kernel_name, own_source, with_own_kernel
from orchestrator.kernel_tree.user import (
    MAX_CANDIDATE_REVISIONS,
    KernelTree,
    read_baseline,
    read_candidate,
    read_revision,
    variant_trees,
)
from results_schema import Comparison, Plan, ProfileRequest
from results_schema.kernel_contract import CONTRACT_FILE
from results_schema.models import Sampling
from results_schema.peers import PEER_NAMES, PEERS
from results_schema.targets import plan_problems

# The fixed section set every profile collects: throughput against the peaks, occupancy,
# launch resources, warp stalls, memory traffic (local-memory spills included) and pipes.
PROFILE_SECTIONS = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Tables",
    "ComputeWorkloadAnalysis",
)
DEFAULT_PROFILE_CONFIGS = 3
# The profile's time bound: a fixed start plus this much per profiled call (one process
# start, torch import, a few kernels replayed once per section pass). An upper bound.
PROFILE_START_SECONDS = 60
PROFILE_SECONDS_PER_CALL = 30


@dataclass(frozen=True)
class PlanOptions:
    kernel: Path | None = None  # a user's kernel repository (kernel_tree/user.py)
    candidates: tuple[str, ...] = ()  # further revisions of `kernel` timed beside it
    candidate: str | None = None
    # a git revision or a tree: of this repository's kernels/, or of `kernel`'s repository
    baseline: str | None = None
    baseline_impl: str | None = None  # or a registry implementation
    profile: tuple[str, ...] | None = None  # None: no profile; (): the representative configs
    peers: tuple[str, ...] = ()  # public libraries timed beside the baselines (`--peers`)
    margin: float | None = None  # every verdict's margin (`--margin`); None: the plan's
    samples: int | None = None  # the most samples a config may take (`--samples`)
    decide_on: str | None = None  # what sampling decides before it stops (`--gate-on`)


@dataclass(frozen=True)
class ShapedPlan:
    plan: Plan
    notes: tuple[str, ...] = ()
    # (folder in the payload, files): the kernel trees (a user's, or ours)
    kernel_trees: tuple[tuple[str, TreeFiles], ...] = ()


def shape_plan(
    plan: Plan, options: PlanOptions, repo: Path | None = None, candidate: KernelTree | None = None
) -> ShapedPlan:
    """The plan with the options applied, and the kernel trees' files for the payload.
    `candidate`: the tree at `options.kernel` where the caller has read it already (a launch
    reads it once, to resolve the plan and to shape it); else it is read here."""
    if options.baseline and options.baseline_impl:
        raise UsageError("--baseline and --baseline-impl name two baselines: give one")
    plan = with_peers(plan, options.peers)
    if options.margin is not None:
        plan = plan.model_copy(update={"margin": options.margin})
    if options.kernel is not None:
        return _shape_user_kernel_plan(plan, options, candidate or read_candidate(options.kernel))
    if options.candidates:
        raise UsageError("--candidates names revisions of a kernel tree: give --kernel DIR too")
    notes: list[str] = []
    if options.candidate or options.baseline_impl:
        plan = with_implementations(plan, options.candidate, options.baseline_impl, notes)
    ours = own_kernel_name()
    if options.baseline and plan.candidate != ours:
        raise UsageError(
            f"--baseline compares two trees of our kernel; the candidate is {plan.candidate}"
            " (for two registry implementations use --candidate and --baseline-impl)"
        )
    trees: tuple[tuple[str, TreeFiles], ...] = ()
    if ours in plan.implementations:
        # Our kernel travels and runs as any kernel with a contract does.
        plan, found = with_own_kernel(plan, options.baseline, repo)
        trees = found.trees
    else:
        plan = plan.model_copy(update={"candidate_source": own_source(repo)})
    if options.profile is not None:
        plan = with_profile(plan, options.profile)
    plan = with_sampling(plan, options.samples, options.decide_on)
    return ShapedPlan(Plan.model_validate(plan.model_dump()), tuple(notes), trees)


def with_sampling(plan: Plan, samples: int | None, decide_on: str | None) -> Plan:
    """`--samples N`: an A/B run samples each config until decided, up to N (its first look
    at the plan's samples, or N if fewer); a run with nothing to decide takes N. `--gate-on
    any`: its sampling decides every config too (results_schema/sampling.py)."""
    sampling = plan.sampling or Sampling()
    update: dict = {}
    if samples is not None:
        if plan.comparison is None:
            update["samples_per_config"] = samples
        else:
            update["samples_per_config"] = min(samples, plan.samples_per_config)
            sampling = sampling.model_copy(update={"max_samples_per_config": samples})
    if decide_on == "any" and plan.comparison is not None:
        sampling = sampling.model_copy(update={"decide_on": "any"})
    if sampling != Sampling():
        update["sampling"] = sampling
    return plan.model_copy(update=update) if update else plan


def _shape_user_kernel_plan(plan: Plan, options: PlanOptions, candidate: KernelTree) -> ShapedPlan:
    """The plan timing the user's kernel (and its --baseline revision) against the plan's
    baselines, our kernel left out; refused (UsageError) before anything is created."""
    if options.candidate or options.baseline_impl:
        raise UsageError("--kernel names the candidate: leave out --candidate and --baseline-impl")
    _refuse_our_name(candidate, f"--kernel {options.kernel}")
    candidates = [*variant_trees(candidate), *_revisions(options, candidate.kernel)]
    trees = list(candidates)
    comparison = None
    if options.baseline:
        first = candidates[0].kernel
        baseline, source = read_baseline(options.kernel, options.baseline, first)
        _refuse_our_name(baseline, f"--baseline {options.baseline}")
        trees.append(baseline)
        comparison = Comparison(
            baseline=baseline.kernel.identity,
            source=source,
            ref=options.baseline,
            commit=baseline.kernel.source.commit if source == "git" else None,
            candidate_dirty=candidate.kernel.source.dirty if source == "git" else None,
        )
    notes: list[str] = []
    shaped = with_user_kernels(plan, [t.kernel for t in trees], comparison, notes)
    shaped = shaped.model_copy(update={"variants": [t.kernel.identity for t in candidates[1:]]})
    if options.profile is not None:
        shaped = with_profile(shaped, options.profile)
    shaped = with_sampling(shaped, options.samples, options.decide_on)
    shaped = Plan.model_validate(shaped.model_dump())
    problems = plan_problems(shaped, has_gpu=True)  # the GPU itself was checked already
    if problems:
        raise UsageError(f"--kernel {options.kernel}: " + "; ".join(problems))
    # Variants that share a build share the candidate's folder: the payload carries it once.
    folders = tuple({t.kernel.directory: t.files for t in trees}.items())
    return ShapedPlan(shaped, notes=tuple(notes), kernel_trees=folders)


def with_first_candidates(plan: Plan, count: int) -> Plan:
    """`plan` timing only its first `count` candidates (the candidate and count - 1 of its
    variants): what a smaller budget could cover."""
    variants = plan.variants[: max(count - 1, 0)]
    dropped = set(plan.variants) - set(variants)
    kernels = [k for k in plan.user_kernels if k.identity not in dropped]
    return plan.model_copy(update={"variants": variants, "user_kernels": kernels})


def _revisions(options: PlanOptions, candidate) -> list[KernelTree]:
    """`--candidates REF,...`: each a further candidate, timed under its own identity."""
    refs = list(dict.fromkeys(options.candidates))
    if len(refs) > MAX_CANDIDATE_REVISIONS:
        raise UsageError(
            f"--candidates names {len(refs)} revisions: a run times at most "
            f"{MAX_CANDIDATE_REVISIONS}"
        )
    trees = [read_revision(options.kernel, ref, i, candidate) for i, ref in enumerate(refs)]
    seen: dict[str, str] = {}
    for ref, tree in zip(refs, trees, strict=True):
        _refuse_our_name(tree, f"--candidates {ref}")
        identity = tree.kernel.identity
        if identity in seen:
            raise UsageError(f"--candidates {seen[identity]} and {ref} are one tree ({identity})")
        seen[identity] = ref
    return trees


def _refuse_our_name(tree: KernelTree, label: str) -> None:
    """Our kernel's name is ours alone: a user's tree under it would be reported, plotted
    and cached as bench's own kernel (each tree's rows say `user:<name>@<commit>`, but the
    reports' headings, the history and the build cache go by the name)."""
    ours = own_kernel_name()
    if tree.kernel.contract.name.lower() == ours.lower():
        raise UsageError(
            f"{label}: its {CONTRACT_FILE} names the kernel {tree.kernel.contract.name!r}, the "
            f"name of bench's own kernel (kernels/{CONTRACT_FILE}); name yours otherwise"
        )


def with_user_kernels(
    plan: Plan, kernels: list, comparison: Comparison | None, notes: list[str]
) -> Plan:
    """The first kernel is the candidate; the plan's implementations but ours stay as its
    baselines (SDPA, the reference), so the verdicts are against them."""
    candidate = kernels[0].identity
    ours = own_kernel_name()
    # A kernel's own plan names it by its declared name, which its variants and revisions
    # stand in for ('<name>[<variant>]', '<name>@<commit>'): no implementation has that name.
    timed = {candidate, *(k.contract.name for k in kernels)}
    kept = [n for n in [plan.candidate, *plan.compared_with] if n != ours and n not in timed]
    dropped = [n for n in plan.implementations if n == ours]
    if dropped:
        notes.append(f"--kernel: our kernel ({', '.join(dropped)}) is not timed")
    if not kept:
        raise UsageError(f"plan {plan.name!r} has nothing to compare {candidate} with")
    control = plan.control if plan.control in kept else None
    if plan.control and control is None:
        notes.append(f"the A/A control {plan.control} is no longer timed: it left the plan")
    return plan.model_copy(
        update={
            "candidate": candidate,
            "compared_with": list(dict.fromkeys(kept)),
            "control": control,
            "comparison": comparison,
            "user_kernels": list(kernels),
        }
    )


def with_implementations(
    plan: Plan, candidate: str | None, baseline: str | None, notes: list[str]
) -> Plan:
    """Candidate and (optionally) the A/B baseline from the registry; the plan's other
    baselines stay, so the SDPA yardsticks are still timed alongside."""
    candidate = candidate or plan.candidate
    if baseline == candidate:
        raise UsageError(f"--baseline-impl {baseline} is the candidate itself")
    first = [baseline] if baseline else []
    others = [b for b in [plan.candidate, *plan.compared_with] if b not in (candidate, baseline)]
    baselines = list(dict.fromkeys([*first, *others]))
    if not baselines:
        raise UsageError(f"the plan has nothing to compare {candidate} with")
    control = plan.control if plan.control in (candidate, *baselines) else None
    if plan.control and control is None:
        notes.append(f"the A/A control {plan.control} is no longer timed: it left the plan")
    comparison = Comparison(baseline=baseline, source="implementation") if baseline else None
    return plan.model_copy(
        update={
            "candidate": candidate,
            "compared_with": baselines,
            "control": control,
            "comparison": comparison,
        }
    )


def with_peers(plan: Plan, peers: tuple[str, ...]) -> Plan:
    """The named public peers (results_schema/peers.py) join the plan's baselines, after
    the plan's own, so they are gated and timed as SDPA is; the target installs them."""
    if not peers:
        return plan
    unknown = [name for name in peers if name not in PEERS]
    if unknown:
        raise UsageError(
            f"--peers: unknown peer {', '.join(map(repr, unknown))} (known: "
            f"{', '.join(PEER_NAMES)})"
        )
    if plan.device != "cuda":
        raise UsageError(f"--peers needs a GPU plan; {plan.name} runs on the {plan.device}")
    baselines = [*plan.compared_with, *(p for p in peers if p != plan.candidate)]
    return plan.model_copy(update={"compared_with": list(dict.fromkeys(baselines))})


def representative_configs(plan: Plan, count: int = DEFAULT_PROFILE_CONFIGS) -> list[str]:
    """The least, the middle and the most FLOPs (in plan order): short, typical and long."""
    ordered = sorted(plan.configs, key=lambda c: c.flops())
    if len(ordered) <= count:
        return [c.name for c in plan.configs]
    picks = {ordered[round(i * (len(ordered) - 1) / (count - 1))].name for i in range(count)}
    return [c.name for c in plan.configs if c.name in picks]


def with_profile(plan: Plan, configs: tuple[str, ...]) -> Plan:
    if plan.device != "cuda":
        raise UsageError(f"--profile needs a GPU plan; {plan.name} runs on the {plan.device}")
    names = list(configs) or representative_configs(plan)
    unknown = sorted(set(names) - {c.name for c in plan.configs})
    if unknown:
        raise UsageError(
            f"--profile names configs the plan lacks: {', '.join(unknown)}; the plan has "
            f"{', '.join(c.name for c in plan.configs)}"
        )
    calls = len(names) * len(plan.profiled_identities)
    request = ProfileRequest(
        configs=names,
        sections=list(PROFILE_SECTIONS),
        timeout_seconds=PROFILE_START_SECONDS + PROFILE_SECONDS_PER_CALL * calls,
    )
    return plan.model_copy(update={"profile": request})
