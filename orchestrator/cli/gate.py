"""The gate's flags (`launch` and `report` share them) and what `launch --fail-on` does once
the run is over: fetch it, judge it, write gate.md and gate.json beside its results, append
the markdown to a GitHub job summary, and exit with the outcome's code."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.cli.wrap import echo
from orchestrator.errors import UsageError

GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
GATE_FILES = ("gate.md", "gate.json")  # written into DEST/<run id>/, beside manifest.json


class Percent(click.ParamType):
    """'2%' or a fraction below 1 ('0.02'); a bare '2' is refused as ambiguous."""

    name = "PERCENT"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            fraction = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a percentage: write 2% (or 0.02)", param, ctx)
        if not text.endswith("%") and fraction >= 1:
            self.fail(f"{value!r}: write {text}% for {text} percent", param, ctx)
        if not 0 <= fraction < 1:
            self.fail(f"{value!r}: a margin lies in [0%, 100%)", param, ctx)
        return fraction


def gate_options(command):
    """--fail-on, --margin, --gate-on: the performance gate of an A/B run."""
    from orchestrator.gate_policy import DEFAULT_GATE_ON

    options = [
        click.option(
            "--fail-on",
            type=click.Choice(["slower"]),
            default=None,
            help="the performance gate: exit 0 only when the candidate is shown not slower "
            "(the interval's lower bound at or above 1 - margin, the A/A control equivalent "
            "within it), 6 when it is slower (the whole interval below 1 - margin), 7 when "
            "the run cannot tell (undecided, the control judged identical implementations "
            "different, too few configs compared), 8 when the candidate failed correctness",
        ),
        click.option(
            "--margin",
            type=Percent(),
            default=None,
            help="the margin of every verdict: slower means the whole interval lies below "
            "1 - margin, not slower its lower bound at or above it (default: the plan's, "
            "2% in the shipped plans; `launch` sets the run's, `report` judges again at it)",
        ),
        click.option(
            "--gate-on",
            type=click.Choice(["geomean", "any"]),
            default=DEFAULT_GATE_ON,
            show_default=True,
            help="judge the geometric mean over configs (one statistic) or it and every "
            "config (catches a slowdown of one shape; a run launched so splits its error "
            "over them all, so each interval is wider and may need more samples)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass(frozen=True)
class GateRequest:
    margin: float
    gate_on: str
    dest: Path

    def options(self):
        from orchestrator.service.gate import GateOptions

        return GateOptions(margin=self.margin, gate_on=self.gate_on)


def launch_gate(fail_on, margin, gate_on, dest, *, wait, gpus, comparison) -> GateRequest | None:
    """The gate `launch` runs after --wait, or None; refused (exit 2) before anything is
    created when it could not judge the run."""
    if fail_on is None:
        return None
    if not wait:
        raise UsageError("--fail-on judges the run when it ends: add --wait")
    if gpus is not None:
        raise UsageError("--fail-on gates one run: leave out --gpu")
    if not (comparison.get("baseline") or comparison.get("baseline_impl")):
        raise UsageError(
            "--fail-on needs an A/B run: --baseline REF (our kernel, or --kernel DIR's) or "
            "--candidate IMPL --baseline-impl IMPL"
        )
    return GateRequest(margin=margin, gate_on=gate_on, dest=dest)


def gate_finished_run(ctx, out, run_id: str, gate: GateRequest) -> int:
    """Fetch the complete run, judge it, write the report files; the outcome's exit code."""
    from orchestrator.cli.fetch import show_cache
    from orchestrator.cli.gate_markdown import render_json, render_markdown
    from orchestrator.service.fetch import fetch
    from orchestrator.service.gate import judge_run_dir

    fetched = fetch(ctx, ctx.registry.get(run_id), gate.dest)
    show_cache(out, fetched)
    report = judge_run_dir(fetched.directory, gate.options())
    markdown = render_markdown(report)
    (fetched.directory / GATE_FILES[0]).write_text(markdown, encoding="utf-8")
    (fetched.directory / GATE_FILES[1]).write_text(render_json(report), encoding="ascii")
    append_step_summary(markdown)
    show_outcome(out, report)
    from orchestrator.text import markup_safe

    where = markup_safe(fetched.directory / GATE_FILES[0])  # --dest is the user's: as written
    out.print(f"bench: gate report: {where} (and gate.json)")
    return report.exit_code


def append_step_summary(markdown: str) -> None:
    """GitHub Actions shows what a step appends to this file on the run's page."""
    path = os.environ.get(GITHUB_STEP_SUMMARY)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(markdown)
    except OSError as error:  # the verdict still stands; only its display is lost
        echo(f"bench: note: could not append to ${GITHUB_STEP_SUMMARY}: {error}", err=True)


def show_outcome(out, report) -> None:
    from orchestrator.text import markup_safe

    colour = {"pass": "green", "regression": "red", "inconclusive": "yellow"}.get(
        report.outcome, "red"
    )
    out.print(f"bench: gate [bold {colour}]{report.outcome}[/] (exit {report.exit_code})")
    for reason in report.reasons:
        out.print(f"bench: gate: {markup_safe(reason, 1200)}", soft_wrap=True)
    for config in report.slower_configs[:20]:
        out.print(f"bench: gate: slower: {markup_safe(config, 80)}")
    for config in report.undecided_configs[:20]:
        out.print(f"bench: gate: undecided: {markup_safe(config, 80)}")
    for failure in report.failures[:20]:
        out.print(
            f"bench: gate: failed: {markup_safe(failure.config, 80)} ({failure.stage}): "
            f"{markup_safe(failure.reason, 300)}",
            soft_wrap=True,
        )
    for way in report.to_decide:
        out.print(f"bench: gate: to decide: {markup_safe(way, 400)}", soft_wrap=True)
