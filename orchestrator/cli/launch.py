from __future__ import annotations

import os

import click

from orchestrator.cli.gate import gate_finished_run, gate_options, launch_gate
from orchestrator.cli.launch_output import how_it_ends, print_launch, say_runs_go_on
from orchestrator.cli.options import (
    Duration,
    Money,
    backend_option,
    bench_command,
    cloud_options,
    comparison_options,
    console,
    dest_option,
    json_option,
    make_context,
    plan_options,
)
from orchestrator.errors import UsageError


@click.command()
@cloud_options
@backend_option()
@click.option("--budget", type=Money(), required=True, help="most this run may cost, in USD")
@click.option(
    "--max-runtime",
    type=Duration(),
    default=None,
    help="lower the time cap: 45m, 1h30m (= 1h30), 600s; a unit is required. Never raises "
    "it: on gce the budget sets the cap, on local 2h",
)
@click.option(
    "--plan",
    "plan_ref",
    default="auto",
    show_default=True,
    help="plan name (see benches/plans), a plan .json file, or auto: the --kernel's own "
    "plan when its bench-kernel.toml names one, else by the target's GPU",
)
@click.option("--wait/--no-wait", default=False, help="follow the run with a progress bar")
@click.option(
    "--fetch",
    "fetch_after",
    is_flag=True,
    help="with --wait: fetch this run when it ends and print its summary (as `bench fetch "
    "RUN` would), so what you read is the run you launched",
)
@click.option("--on-demand-fallback", is_flag=True, default=None, help="gce: on-demand if no spot")
@click.option(
    "--allow-leftover-disk",
    is_flag=True,
    default=None,
    help="gce without `bench setup`'s account: launch anyway (refused otherwise); the VM "
    "powers off at its end and its boot disk bills (the $/h is printed) until fetch, --wait "
    "or stop-all deletes it",
)
@click.option(
    "--gpu",
    "gpus",
    default=None,
    metavar="TYPES",
    help="GPU types, comma-separated: l4, t4, a100, h100 (gce; default: the configured "
    "machine, an L4); local: `local` or this machine's GPU type. One budget for all",
)
@click.option(
    "--queue-minutes",
    type=click.FloatRange(min=1),
    default=None,
    help="batch: a job Batch still holds for lack of capacity after this many minutes is "
    "deleted (it never ran, it cost nothing) and its share of the monthly cap freed "
    "(default 60, bench.toml batch_queue_minutes)",
)
@click.option(
    "--trusted/--untrusted",
    "trusted",
    default=None,
    help="whether what this run builds may enter the shared build cache at fetch (default: "
    "trusted, untrusted when the CI variable is set); --untrusted for code you did not review",
)
@comparison_options
@gate_options
@dest_option("with --fetch or --fail-on: where the run is fetched to, as `bench fetch` would")
@json_option("the run id (each run's, with --gpu) and its worst-case cost")
def launch(
    backend,
    budget,
    max_runtime,
    plan_ref,
    wait,
    fetch_after,
    on_demand_fallback,
    allow_leftover_disk,
    gpus,
    queue_minutes,
    trusted,
    fail_on,
    margin,
    gate_on,
    dest,
    as_json,
    **comparison,
):
    """Start a benchmark run; the cloud enforces its budget as a time cap.

    Where it runs: gce when a GCP project is configured, this machine with
    --backend local (free). With neither, launch refuses (exit 2) and names
    both, rather than run here when you meant an L4.

    On gce, the VM gets max_run_duration = what --budget buys at the catalog
    rate (GCE deletes it then if it still runs, even if this laptop is gone);
    bench refuses a launch whose estimated cost exceeds the budget. When the
    run ends the VM deletes itself if its service account may (`bench setup`);
    otherwise it powers off and its disk bills until --wait's end, `bench
    fetch` or `bench stop-all` deletes it (`bench status` shows it).

    With --gpu, one VM per GPU type (a sweep, see `bench status SWEEP`): the
    budget is split in proportion to each run's estimated cost, each VM gets
    the time cap its share buys, and the sweep is refused before anything is
    created when a share cannot cover its run. A GPU type that cannot start
    (no capacity anywhere, quota) is reported; the others run.

    A/B: --baseline REF times the working tree's kernel against REF's in one
    run, on one GPU; the summary and `bench report` lead with the speedup per
    config and its geometric mean, each with an interval and a verdict.
    --profile adds Nsight Compute counters, taken after the timing.
    Many candidates: the kernel's declared variants ([kernel.variants]) and
    --candidates REFS are each gated and timed in every round of one run.

    The performance gate (CI): --fail-on slower with --wait fetches the run
    when it ends and exits 0 only when the candidate is shown not slower
    (its interval's lower bound at or above 1 - --margin, on the geometric
    mean or with --gate-on any on every config too, and the A/A control
    equivalent), 6 on a regression (the whole interval below 1 - margin), 7
    when the run cannot tell (undecided: it names what would decide it), 8
    when the candidate failed correctness; it writes gate.md and gate.json
    into DEST/<run id>/ and appends the markdown to $GITHUB_STEP_SUMMARY
    when that is set (docs/ci/). --margin sets the margin of every verdict
    of the run (default: the plan's, 2%).

    \b
    Examples:
      bench launch --backend local --budget 1.00 --wait
      bench launch --budget 1.00 --plan default --max-runtime 45m
      bench launch --budget 1.00 --baseline main            # did my edits help?
      # a CI gate:
      bench launch --budget 1.00 --baseline main --wait --fail-on slower
      bench launch --backend local --kernel ../my-attn --budget 1 --wait
      bench launch --budget 1.00 --kernel ../my-attn --baseline HEAD~1
      bench launch --budget 1.00 --kernel ../my-attn --candidates HEAD~1,v2
      bench launch --budget 1.00 --baseline ../old/kernels --profile
      bench launch --budget 1.00 --candidate sdpa-flash --baseline-impl sdpa-cudnn
      bench launch --budget 1.00 --profile fp16-b4h16s1024d64,bf16-b1h16s8192d64
      bench launch --gpu l4,t4,a100,h100 --budget 5.00
      bench launch --backend local --gpu local --budget 1 --wait
      bench launch --budget 1.00 --kernel ../my-attn --json   # for programs
    """
    from orchestrator.backends.registry import AUTO_FALLBACK
    from orchestrator.service.launch import LaunchRequest
    from orchestrator.service.launch import launch as launch_run

    ctx = make_context(
        backend=backend,
        on_demand_fallback=on_demand_fallback,
        allow_leftover_disk=allow_leftover_disk,
        batch_queue_minutes=queue_minutes,
    )
    name, reason = ctx.resolved_backend()
    if ctx.config.backend == "auto" and name == AUTO_FALLBACK:
        raise UsageError(no_backend_chosen())
    out = console(stderr=as_json)
    gate = launch_gate(fail_on, margin, gate_on, dest, wait=wait, gpus=gpus, comparison=comparison)
    if fetch_after and (not wait or gpus is not None):
        raise UsageError("--fetch fetches the one run --wait followed: add --wait, leave out --gpu")
    request = LaunchRequest(
        budget_usd=budget,
        plan=plan_ref,
        max_runtime_seconds=max_runtime,
        options=plan_options(**comparison, margin=margin, gate_on=gate_on),
        cache_trusted=cache_trusted(trusted),
    )
    if gpus is not None:
        from orchestrator.cli.sweep_output import launch_and_print_sweep

        started = _print_sweep_json if as_json else None
        return launch_and_print_sweep(ctx, out, request, gpus, name, reason, wait, started)
    result = launch_run(
        ctx,
        request,
        name,
        reason,
        on_validated=lambda: out.print(f"bench: backend [bold]{name}[/]: {reason}"),
    )
    if as_json:
        from orchestrator.cli.json_output import launched_run, print_json
        from results_schema.program_output import LaunchOutput

        print_json(LaunchOutput(runs=[launched_run(result)]))
    print_launch(out, result)
    bench, run_id = bench_command(), result.spec.run_id
    if wait:
        from orchestrator.cli.progress import follow

        try:
            code = follow(ctx, ctx.registry.get(run_id), out)
        except KeyboardInterrupt:
            say_runs_go_on(f"run {run_id} goes on ({how_it_ends(result)})", run_id)
            raise
        if gate:
            return gate_finished_run(ctx, out, run_id, gate)
        return fetch_finished_run(ctx, out, run_id, dest) if fetch_after and code == 0 else code
    out.print(f"follow it with: {bench} status {run_id}   then: {bench} fetch {run_id}")
    return 0


def _print_sweep_json(sweep) -> None:
    from orchestrator.cli.json_output import print_json, sweep_output

    print_json(sweep_output(sweep))


def fetch_finished_run(ctx, out, run_id: str, dest) -> int:
    """`bench fetch RUN` for the run just followed: verified, validated, summarised."""
    from orchestrator.cli.fetch import show_summary
    from orchestrator.service.fetch import fetch

    show_summary(out, fetch(ctx, ctx.registry.get(run_id), dest))
    return 0


def cache_trusted(flag: bool | None) -> bool:
    """--trusted/--untrusted, else trusted unless under CI (where a pull request is a
    stranger's code): docs/security.md."""
    return flag if flag is not None else not os.environ.get("CI")


def no_backend_chosen() -> str:
    """launch with no project and no --backend: the README promises an L4, so bench does
    not quietly run on this machine instead; it names both ways forward."""
    bench = bench_command()
    return (
        "no GCP project is configured, so there is no L4 to start: set `project` and "
        "`bucket` in bench.toml (README, 'Pointing bench at a GCP project'; then "
        f"`{bench} doctor`), or run on this machine for free with `{bench} launch "
        "--backend local ...`"
    )
