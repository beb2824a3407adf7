"""Options shared by several commands, and the Context every command builds from them."""

from __future__ import annotations

import re

import click

DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")


class Money(click.ParamType):
    name = "USD"

    def convert(self, value, param, ctx):
        try:
            amount = float(str(value).lstrip("$"))
        except ValueError:
            self.fail(f"{value!r} is not an amount in US dollars (e.g. 1.00)", param, ctx)
        if not amount > 0 or amount != amount or amount == float("inf"):
            self.fail(f"{value!r}: the budget must be a positive amount (e.g. 1.00)", param, ctx)
        return amount


class Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        match = DURATION_RE.match(str(value).strip())
        if not match or not any(match.groups()):
            self.fail(f"{value!r} is not a duration like 45m, 1h30m or 600s", param, ctx)
        hours, minutes, seconds = (int(g or 0) for g in match.groups())
        total = hours * 3600 + minutes * 60 + seconds
        if total <= 0:
            self.fail(f"{value!r}: the duration must be positive", param, ctx)
        return total


def backend_option(help_text: str = "where to run: local (this machine) or gce"):
    return click.option(
        "--backend", type=click.Choice(["local", "gce"]), default=None, help=help_text
    )


def dest_option(help_text: str):
    """Where fetched runs live: fetch writes DEST/<run id>/, report reads it."""
    from pathlib import Path

    return click.option(
        "--dest",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("results"),
        show_default=True,
        help=help_text,
    )


def yes_option():
    return click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")


def make_context(**flags):
    """Settings are built here, at command time, never at import time."""
    from orchestrator.config import load_config
    from orchestrator.service.context import Context

    return Context(load_config(flags={k: v for k, v in flags.items() if v is not None}))


def console():
    """Tables fit the terminal; plain lines are never broken by us (soft_wrap), so a run
    id or a path at the end of a line stays whole for copy and paste."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, emoji=False)


def comparison_options(command):
    """launch's A/B and profile options; together they fill a service PlanOptions."""
    options = [
        click.option(
            "--baseline",
            metavar="REF",
            default=None,
            help="A/B: time our kernel as the working tree has it against the kernels/ "
            "tree of REF: a git revision of this repository (HEAD, main, a commit) or a "
            "directory holding a kernels/ tree; both are built, gated and timed as "
            "flash and flash@baseline, interleaved in every round",
        ),
        click.option(
            "--candidate",
            metavar="IMPL",
            default=None,
            help="the implementation under test, a registry name (default: the plan's)",
        ),
        click.option(
            "--baseline-impl",
            metavar="IMPL",
            default=None,
            help="A/B of two registry implementations: compare --candidate with IMPL",
        ),
        click.option(
            "--profile",
            metavar="CONFIGS",
            is_flag=False,
            flag_value="",
            default=None,
            help="after the timing, Nsight Compute profiles of every implementation on "
            "these comma-separated configs (alone: three representative ones)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def plan_options(candidate, baseline, baseline_impl, profile):
    from orchestrator.service.plan_options import PlanOptions

    configs = None if profile is None else tuple(n for n in profile.split(",") if n.strip())
    return PlanOptions(
        candidate=candidate,
        baseline=baseline,
        baseline_impl=baseline_impl,
        profile=None if configs is None else tuple(n.strip() for n in configs),
    )
