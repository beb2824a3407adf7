from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, console, make_context


@click.command()
@cloud_options
@click.option(
    "--gpu",
    "gpus",
    default=None,
    metavar="TYPES",
    help="check zones and quota for these GPU types (as launch --gpu), e.g. l4,t4,a100,h100",
)
@click.option(
    "--probe",
    is_flag=True,
    help="then start a tiny VM (e2-micro, spot, no GPU) that writes one object and deletes "
    "itself: proves the VM account works before any GPU is paid for",
)
def doctor(gpus, probe):
    """Check a GCP project before spending money: one line per check, ✓ or ✗ with the fix.

    Always the whole checklist: gcloud installed, project and bucket set, then
    the project's checks below; a check a failed one leaves unasked is listed
    as "not run: needs ...". Exit 2 while project or bucket is unset.

    Checks credentials, the project, the Compute API, each configured zone
    (exists, offers the machine type and the GPU), the image family (resolves,
    not deprecated: names its successor), GPU quota (spot and on-demand per
    region, and GPUS_ALL_REGIONS), the bucket (this machine can write, read and
    delete an object), the VM service account's object access on the
    bucket, that you may create VMs and act as the VM account
    (testIamPermissions), and that the VM account may delete its own VM (the
    binding `bench setup` makes). Exit 0 when a launch can work, 4 otherwise.
    Creates nothing but one short-lived object in the bucket. With --gpu,
    each GPU type's zones, machine and accelerator types and quota are
    checked (quota for all of them running at once).

    With Cloud Batch in use (backend = "batch", or a batch run launched from
    here) it then checks the Batch API answers in the job's region, that you
    may create, read and delete jobs, and that the VM account holds
    roles/batch.agentReporter and roles/logging.logWriter (what `bench setup`
    grants it).

    With --probe it then starts one e2-micro spot VM (no GPU, a fraction of a
    cent) as the VM account, which writes one object under its run's key and
    deletes itself; each step is reported with its time, and whatever is
    left is deleted (or named with the command that deletes it).

    \b
    Examples:
      bench doctor
      BENCH_PROJECT=my-project BENCH_BUCKET=my-bench bench doctor
      bench doctor --gpu l4,t4,a100,h100
      bench doctor --probe        # after `bench setup --apply`
    """
    from orchestrator.errors import CloudError, ConfigError
    from orchestrator.gpus import parse_gpu_list
    from orchestrator.service.doctor import run_doctor
    from orchestrator.text import markup_safe

    ctx = make_context()
    keys = parse_gpu_list(gpus) if gpus is not None else None
    out = console()
    failed, unset = 0, 0
    for check in run_doctor(ctx, keys, probe=probe):
        if check.needs:
            out.print(f"[dim]- {markup_safe(check.name)}: not run: needs {check.needs}[/]")
            continue
        mark = "[green]✓[/]" if check.ok else "[bold red]✗[/]"
        line = f"{check.name}: {check.detail}"
        if not check.ok and not check.required:
            mark = "[bold yellow]![/]"
            line += f" — advice: {check.fix}"
        elif not check.ok:
            failed += 1
            unset += check.name in ("project set", "bucket set")
            line += f" — fix: {check.fix}"
        out.print(f"{mark} {markup_safe(line, 2000)}")
    if unset:
        raise ConfigError("set what the ✗ lines above name, then run `bench doctor` again")
    if failed:
        raise CloudError(f"{failed} check(s) failed: fix the ✗ lines above, then run it again")
    out.print("bench: this project is ready for `bench launch`")
    return 0
