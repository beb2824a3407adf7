"""Renders the startup and shutdown scripts: pure functions of a RunSpec and settings.

Rules (DESIGN.md, "Startup script rules"): StrictUndefined, so a missing value is an
error rather than an empty string; every interpolated value passes `shquote`; decisions
are made here in Python and reach the template as plain values.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2

from orchestrator.backends.registry import capabilities
from orchestrator.payload import PAYLOAD_PIP_INDEX_ARGS, image_requirements, payload_requirements
from orchestrator.spec import RunSpec
from results_schema import PHASES
from results_schema.peers import PEERS

# Per-phase caps. Environment may install torch (minutes on a fresh image); the benchmark's
# cap comes from the plan's estimate.
PHASE_TIMEOUTS = {
    "preflight": 120,
    "environment": 1800,
    "payload": 300,
    "build": 120,  # the phase's own work (cache lookups, records); each tree's bounds added
    "correctness": 900,
    "upload": 300,
    "finish": 60,
}
# The gate and the timing run in one process (partials/measure.sh.j2, `benches run`), which
# records both phases itself: the script runs `measure` where PHASES has the two.
HARNESS_PHASES = ("correctness", "benchmark")
SCRIPT_PHASES = tuple(
    "measure" if p == HARNESS_PHASES[0] else p for p in PHASES if p != HARNESS_PHASES[1]
)
# Each public peer's install (all of its pins together): a few wheels, the largest a few
# hundred MB (FA4's CuTe DSL, flashinfer's dependencies).
PEER_INSTALL_SECONDS = 600
SHUTDOWN_GRACE_SECONDS = 25
# What the timing leaves of its phase's timeout and the run's time cap for what follows it
# (summaries, upload, finish: seconds on a normal run), a profile's bound added.
SAMPLING_RESERVE_SECONDS = 120
# Preflight waits this long for a baked-in NVIDIA driver to answer (inside its 120 s cap).
DRIVER_WAIT_SECONDS = 90
# apt waits this long for the dpkg lock that a booting image's unattended-upgrades holds.
APT_LOCK_TIMEOUT_SECONDS = 300


def shquote(value: Any) -> str:
    """Quote any value as one shell word; booleans become true/false."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    return shlex.quote(str(value))


@functools.cache
def template_environment() -> jinja2.Environment:
    """One environment a process: it keeps each template compiled (a startup script's
    templates cost ~10-15 ms of CPU to compile; a sweep renders one script a member) and
    reloads one whose file changed."""
    root = resources.files("startup_templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # Bash's ${#var} would open a Jinja comment; templates comment with shell's own #.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["shquote"] = shquote
    return env


def record_tool_source() -> str:
    return resources.files("results_schema").joinpath("record.py").read_text(encoding="utf-8")


def benchmark_timeout_seconds(spec: RunSpec) -> int:
    """Three times the estimate, at least 10 minutes: a slow GPU should not look like a hang;
    plus the profile's own time bound when the plan asks for one."""
    profile = spec.plan.profile.timeout_seconds if spec.plan.profile else 0
    return max(600, 3 * spec.estimated_seconds) + profile


def user_kernel_builds(plan) -> list[dict]:
    """What the build phase does for each user kernel tree (build.sh.j2): the trees build at
    once, then an A/B baseline's, alone (`after_the_others`): its check against launch's
    digest just before it builds then covers every other tree's build."""
    trees, baseline = plan.build_waves()
    return [
        {
            "directory": kernel.directory,
            "identity": kernel.identity,
            "timeout": kernel.contract.build_timeout_seconds,
            # requirements, command, env: '{tree}' is replaced by the tree's path on the target
            **kernel.contract.build_words(),
            "after_the_others": bool(trees) and kernel.identity == plan.baseline_identity,
        }
        for kernel in trees + baseline
    ]


def kernel_user_name(directory: str) -> str:
    """The unprivileged user a kernel tree is built and run as where the run confines
    kernels: one per tree folder, so no tree's processes or files are another's."""
    return "bench-" + directory.replace("_", "-")


def kernel_users(plan, backend: str) -> str:
    """FOLDER=USER words, one per kernel tree, where the backend's machine confines kernels
    (the startup script's KERNEL_USERS, the workers' BENCH_KERNEL_USERS); else empty."""
    if not capabilities(backend).confines_kernels:
        return ""
    folders = plan.kernel_folders()
    return " ".join(f"{k.directory}={kernel_user_name(k.directory)}" for k in folders)


def tree_sha256s(spec: RunSpec) -> str:
    """TREE=SHA256 words: each tree's digest as launch packed it, which the script checks
    just before the tree is used."""
    return " ".join(f"{tree}={sha}" for tree, sha in sorted(spec.tree_sha256s.items()))


def peer_installs(plan, backend: str) -> list[dict]:
    """What the peers partial installs before the gate: each public peer the plan times,
    with its pins, preferred first, and the options pip adds to each (results_schema/peers.py).
    Only on gce: on the local backend the payload's python is the user's own, into which bench
    installs nothing."""
    if not capabilities(backend).sets_up_python:
        return []
    return [
        {
            "name": name,
            "pins": " ".join(PEERS[name].pins),
            "options": " ".join(PEERS[name].pip_options),
        }
        for name in plan.implementations
        if name in PEERS
    ]


def correctness_timeout_seconds(spec: RunSpec) -> int:
    """The gate's bound, plus each peer's install bound (the install runs in that phase)."""
    installs = len(peer_installs(spec.plan, spec.backend))
    return PHASE_TIMEOUTS["correctness"] + installs * PEER_INSTALL_SECONDS


def build_timeout_seconds(spec: RunSpec) -> int:
    """The phase's own bound, plus the longest of the trees built at once and then the A/B
    baseline's (build.sh.j2), where a tree's requirements and its build may each take its
    build_timeout. Where trees share a python (nothing confines them), their requirements'
    installs take turns: those add up."""
    shared_python = not capabilities(spec.backend).confines_kernels
    seconds = PHASE_TIMEOUTS["build"]
    for wave in spec.plan.build_waves():
        installs = [bool(k.contract.requirements) * k.contract.build_timeout_seconds for k in wave]
        builds = [bool(k.contract.build) * k.contract.build_timeout_seconds for k in wave]
        if shared_python:
            seconds += sum(installs) + max(builds, default=0)
        else:
            seconds += max((i + b for i, b in zip(installs, builds, strict=True)), default=0)
    return seconds


def startup_context(spec: RunSpec, work_dir: str, backend_vars: Mapping[str, Any]) -> dict:
    plan = spec.plan
    on_gpu = plan.device == "cuda"
    builds_on_gpu = on_gpu and any(k.contract.build for k in plan.user_kernels)
    cost = {
        "backend": spec.backend,
        "rate_usd_per_hour": spec.rate_usd_per_hour,
        "budget_usd": spec.budget_usd,
        "max_run_seconds": spec.max_run_seconds,
    }
    return {
        "run_id": spec.run_id,
        "backend": spec.backend,
        "run_key": spec.run_prefix,
        "work_dir": work_dir,
        "payload_sha256": spec.payload_sha256,
        "plan_name": plan.name,
        "max_run_seconds": spec.max_run_seconds,
        "heartbeat_seconds": capabilities(spec.backend).heartbeat_seconds,
        "backend_partial": capabilities(spec.backend).script_partial,
        "reason_window_seconds": capabilities(spec.backend).reason_window_seconds,
        "cost_json": json.dumps(cost, sort_keys=True),
        "pip_packages": payload_requirements(spec.backend, plan.device),
        "image_packages": image_requirements(spec.backend, plan.device),
        "pip_index_args": PAYLOAD_PIP_INDEX_ARGS[plan.device],
        "record_tool_source": record_tool_source(),
        "phases": SCRIPT_PHASES,
        "phase_timeouts": {
            **PHASE_TIMEOUTS,
            "build": build_timeout_seconds(spec),
            "measure": correctness_timeout_seconds(spec) + benchmark_timeout_seconds(spec),
        },
        "sampling_reserve_seconds": SAMPLING_RESERVE_SECONDS
        + (plan.profile.timeout_seconds if plan.profile else 0),
        "user_kernel_builds": user_kernel_builds(plan),
        "kernel_folders": [k.directory for k in plan.kernel_folders()],
        "kernel_users": kernel_users(plan, spec.backend),
        "tree_sha256s": tree_sha256s(spec),
        "peer_installs": peer_installs(plan, spec.backend),
        "peer_install_seconds": PEER_INSTALL_SECONDS,
        "needs_gpu": on_gpu,
        "needs_nvcc": builds_on_gpu,
        "preflight_tools": backend_vars.get("preflight_tools", []),
        "min_free_mb": 2000 if on_gpu else 200,
        "driver_wait_seconds": DRIVER_WAIT_SECONDS,
        "apt_lock_timeout_seconds": APT_LOCK_TIMEOUT_SECONDS,
        "payload_python": backend_vars.get("payload_python", ""),
        **backend_vars,
    }


def render_startup(spec: RunSpec, work_dir: str, backend_vars: Mapping[str, Any]) -> str:
    template = template_environment().get_template("startup.sh.j2")
    return template.render(startup_context(spec, work_dir, backend_vars))


def render_shutdown(spec: RunSpec, work_dir: str) -> str:
    template = template_environment().get_template("shutdown.sh.j2")
    return template.render(
        run_id=spec.run_id, work_dir=work_dir, grace_seconds=SHUTDOWN_GRACE_SECONDS
    )


@dataclass(frozen=True)
class RunScripts:
    """A run's startup and shutdown scripts, rendered once: a launch's request check, its
    start and its result hold the same text."""

    startup: str
    shutdown: str

    @property
    def startup_sha256(self) -> str:
        return hashlib.sha256(self.startup.encode()).hexdigest()


def render_scripts(spec: RunSpec, work_dir: str, backend_vars: Mapping[str, Any]) -> RunScripts:
    return RunScripts(render_startup(spec, work_dir, backend_vars), render_shutdown(spec, work_dir))
