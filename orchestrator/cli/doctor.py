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
def doctor(gpus):
    """Check a GCP project before spending money: one line per check, ✓ or ✗ with the fix.

    Checks credentials, the project, the Compute API, each configured zone
    (exists, offers the machine type and the GPU), the image family (resolves,
    not deprecated: names its successor), GPU quota (spot and on-demand per
    region, and GPUS_ALL_REGIONS), the bucket (this machine can write, read and
    delete an object) and the VM service account's object access on the
    bucket. Exit 0 when a launch can work, 4 otherwise. Creates nothing but
    one short-lived object in the bucket. With --gpu, each GPU type's zones,
    machine and accelerator types and quota are checked (quota for all of
    them running at once).

    \b
    Examples:
      bench doctor
      BENCH_PROJECT=my-project BENCH_BUCKET=my-bench bench doctor
      bench doctor --gpu l4,t4,a100,h100
    """
    from orchestrator.errors import CloudError
    from orchestrator.gpus import parse_gpu_list
    from orchestrator.service.doctor import run_doctor

    ctx = make_context(backend="gce")
    keys = parse_gpu_list(gpus) if gpus is not None else None
    out = console()
    failed = 0
    for check in run_doctor(ctx, keys):
        mark = "[green]✓[/]" if check.ok else "[bold red]✗[/]"
        line = f"{check.name}: {check.detail}"
        if not check.ok:
            failed += 1
            line += f" — fix: {check.fix}"
        out.print(mark, end=" ")
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if failed:
        raise CloudError(f"{failed} check(s) failed: fix the ✗ lines above, then run it again")
    out.print("bench: this project is ready for `bench launch`")
    return 0
