from __future__ import annotations

import click

from orchestrator.cli.options import cloud_options, console, make_context


@click.command()
@cloud_options
@click.option("--apply", "apply_", is_flag=True, help="perform the steps (default: print them)")
@click.option(
    "--launcher",
    "launchers",
    multiple=True,
    metavar="MEMBER",
    help="who will run `bench launch` (repeatable), as an IAM member: user:EMAIL, "
    "group:EMAIL or serviceAccount:EMAIL; granted roles/iam.serviceAccountTokenCreator on "
    "the signer account alone, and with Cloud Batch in use roles/batch.jobsEditor on the "
    "project and roles/iam.serviceAccountUser on the VM account alone (default: these "
    "credentials, when a service account's)",
)
def setup(apply_, launchers):
    """Print (or with --apply perform) the least-privilege one-time setup of a project.

    Creates the bucket; a service account for bench VMs with object access to
    that bucket only; a custom role holding only compute.instances.delete and
    compute.disks.delete, granted to that account on instances and disks named
    bench-* only. With `service_account` set to that account, each run's VM
    deletes itself when it ends: nothing is left billing. With Cloud Batch in use
    (backend = "batch", or a batch run launched from here) it also grants that
    account roles/batch.agentReporter and roles/logging.logWriter on the
    project, what a Batch job's VMs need. Each --launcher may sign each run's
    storage grants as the signer account, which `bench launch` needs (and, with
    Batch, create jobs and act as the VM account). Without
    --apply it only prints the gcloud commands, so you can check them line by
    line (or run them yourself).
    --apply runs the same steps through Google's APIs and is safe to repeat; it
    waits (up to about two minutes) for the new account to become usable.

    \b
    Examples:
      bench setup                 # print the commands
      bench setup --apply   # do it (needs a project Owner or the IAM admin roles)
      bench setup --apply --launcher user:alice@example.com  # alice may launch
    """
    from orchestrator.cli.wrap import shell_command, shell_comment, stated_columns
    from orchestrator.service.setup import apply_setup, plan_setup

    ctx = make_context()
    out = console()
    plan = plan_setup(ctx, launchers=launchers)
    if not apply_:
        # Lines to paste into a shell: a comment wraps as comments, a command with ` \`.
        width = out.width if out.is_terminal or stated_columns() is not None else None
        out.print(
            shell_comment(
                "# bench setup: run these (or `bench setup --apply`), then set the account",
                width,
            ),
            markup=False,
        )
        for number, step in enumerate(plan.steps, 1):
            out.print(shell_comment(f"# {number}. {step.title}", width), markup=False)
            out.print(shell_command(list(step.command), width), markup=False, highlight=False)
    else:
        apply_setup(
            ctx,
            plan,
            lambda step, what: out.print(f"bench: {step.title}: {what}", markup=False),
            lambda step, delay: out.print(
                f"bench: {step.title}: the new service account is not visible yet "
                f"(Google: up to a minute or more); trying again in {delay:g} s",
                markup=False,
            ),
        )
    for line in plan.followups:
        out.print(line, markup=False)
    return 0
