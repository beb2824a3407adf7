"""Options shared by several commands, and the Context every command builds from them."""

from __future__ import annotations

import re
from pathlib import Path

import click

# ASCII digits only: `\d` and int() also take other scripts' digits ('１２m').
DURATION_PART_RE = re.compile(r"([0-9]+)([hms]?)")
UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}
NEXT_UNIT = {"h": "m", "m": "s"}
# Longer text is no duration anyone means, and int() of thousands of digits is refused.
MAX_DURATION_CHARS = 32


def parse_duration(text: str) -> int:
    """Seconds in `45s`, `10m`, `1h30m`, `1h30m15s`; a number after the last unit counts in
    the next smaller one, as a clock reads it (`1h30` = 90 min, `2m30` = 150 s). A bare
    number has no unit a reader could agree on, so it is refused (ValueError)."""
    text, total, previous, at = text.strip().lower(), 0, "", 0
    if len(text) > MAX_DURATION_CHARS:
        raise ValueError("not a duration like 45m, 1h30m or 600s")
    for match in DURATION_PART_RE.finditer(text):
        if match.start() != at:
            break
        at = match.end()
        number, unit = int(match.group(1)), match.group(2)
        if not unit:
            if at != len(text):
                break
            if previous not in NEXT_UNIT:
                raise ValueError("give a unit: 45s, 10m, 1h30m")
            unit = NEXT_UNIT[previous]
        if previous and "hms".index(unit) <= "hms".index(previous):
            raise ValueError("units go h, m, s, each once")
        total, previous = total + number * UNIT_SECONDS[unit], unit
    if not text or at != len(text):
        raise ValueError("not a duration like 45m, 1h30m or 600s")
    return total


class Money(click.ParamType):
    """A budget in US dollars: ASCII, finite, positive and at most budget.MAX_BUDGET_USD."""

    name = "USD"

    def convert(self, value, param, ctx):
        from orchestrator.budget import MAX_BUDGET_USD

        text = str(value).strip().removeprefix("$")
        try:
            # float() also reads other scripts' digits ('１'): only ASCII is an amount here.
            amount = float(text) if text.isascii() else None
        except ValueError:
            amount = None
        if amount is None:
            self.fail(f"{value!r} is not an amount in US dollars (e.g. 1.00)", param, ctx)
        if not (0 < amount <= MAX_BUDGET_USD):  # also false for nan
            self.fail(
                f"{value!r}: the budget must be a positive amount of at most "
                f"${MAX_BUDGET_USD:,.0f} (e.g. 1.00)",
                param,
                ctx,
            )
        return amount


class Duration(click.ParamType):
    """A positive duration of at most the longest time cap bench sets."""

    name = "DURATION"

    def convert(self, value, param, ctx):
        from orchestrator.budget import MAX_RUN_SECONDS_CEILING
        from orchestrator.text import format_duration

        if isinstance(value, int):
            return value
        try:
            total = parse_duration(str(value))
        except ValueError as e:
            self.fail(f"{value!r}: {e}", param, ctx)
        if total <= 0:
            self.fail(f"{value!r}: the duration must be positive", param, ctx)
        if total > MAX_RUN_SECONDS_CEILING:
            self.fail(
                f"{value!r}: at most {format_duration(MAX_RUN_SECONDS_CEILING)}, the longest "
                "time cap bench sets",
                param,
                ctx,
            )
        return total


def backend_option(help_text: str = "where to run: local (this machine) or gce"):
    from orchestrator.backends.registry import names

    return click.option("--backend", type=click.Choice(names()), default=None, help=help_text)


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


def bench_command() -> str:
    """How to run bench again from a new shell: `bench` when the shell finds this very
    program, else the path it was started by (`make demo` runs .venv/bin/bench, which a new
    shell does not have on PATH)."""
    import os
    import shutil
    import sys
    from pathlib import Path

    started = Path(sys.argv[0])
    if started.name != "bench":
        return "bench"  # python -m, or a test runner: nothing better to say
    found = shutil.which("bench")
    if found and Path(found).resolve() == started.resolve():
        return "bench"
    started = Path(os.path.abspath(started))  # not resolved: a linked venv keeps its path
    try:
        return str(started.relative_to(os.path.abspath(os.getcwd())))
    except ValueError:
        return str(started)


def yes_option():
    return click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")


CLOUD_FLAGS_KEY = "bench.cloud_flags"


def _zone_list(ctx, param, value):
    return [z.strip() for z in value.split(",") if z.strip()] if value else None


def cloud_options(f):
    """--project, --bucket and --zones: they beat BENCH_* variables and bench.toml. They are
    handed to `make_context` through click's context, so a command's signature stays its own."""
    import functools

    @functools.wraps(f)
    def command(*args, project=None, bucket=None, zones=None, **kwargs):
        flags = {"project": project, "bucket": bucket, "zones": zones}
        click.get_current_context().meta[CLOUD_FLAGS_KEY] = flags
        return f(*args, **kwargs)

    options = [
        click.option("--project", default=None, help="GCP project id (beats BENCH_PROJECT)"),
        click.option("--bucket", default=None, help="results bucket (beats BENCH_BUCKET)"),
        click.option(
            "--zones",
            default=None,
            callback=_zone_list,
            help="zones to try in order, comma-separated (beats BENCH_ZONES)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def make_context(**flags):
    """Settings are built here, at command time, never at import time."""
    from orchestrator.config import load_config
    from orchestrator.service.context import Context

    current = click.get_current_context(silent=True)
    if current is not None:
        flags = {**current.meta.get(CLOUD_FLAGS_KEY, {}), **flags}
    return Context(load_config(flags={k: v for k, v in flags.items() if v is not None}))


def console(stderr: bool = False):
    """Tables fit the terminal; a line of text wraps at its spaces (cli/wrap.py), so a run
    id or a path stays whole for copy and paste. `stderr`: a command's `--json` keeps
    stdout for its one JSON object."""
    from rich.console import Console

    from orchestrator.cli.wrap import stated_columns

    class PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1; the reader leaving early (`| head`) is `main`'s to handle,
            # once for every command.
            raise BrokenPipeError

        def print(self, *objects, **kwargs):
            if len(objects) != 1 or not isinstance(objects[0], str) or set(kwargs) - WRAPPED:
                return super().print(*objects, **kwargs)
            if not self.is_terminal and stated_columns() is None:  # a pipe: as asked
                return super().print(*objects, **kwargs)
            text = self.render_str(
                objects[0],
                markup=kwargs.get("markup"),
                highlight=kwargs.get("highlight", False),
                style=kwargs.get("style", ""),
            )
            for line in _wrapped(text, self.width):
                super().print(line, soft_wrap=True)

    return PipedConsole(highlight=False, soft_wrap=True, emoji=False, stderr=stderr)


def json_option(what: str):
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=f"for programs: print {what} as one JSON object on stdout, everything else on "
        "stderr (docs/json.md)",
    )


# What console().print takes of a line of text it wraps itself (soft_wrap: it always wraps).
WRAPPED = {"markup", "highlight", "style", "soft_wrap"}


def _wrapped(text, width: int):
    """rich Text, each of its lines broken as cli/wrap.py breaks plain text (styles kept)."""
    from rich.text import Text

    from orchestrator.cli.wrap import hang_of, pieces

    for line in text.split("\n", allow_blank=True):
        plain = line.plain
        spans = pieces(plain, width)
        yield line[slice(*spans[0])]
        for span in spans[1:]:
            yield Text(hang_of(plain, width)) + line[slice(*span)]


def comparison_options(command):
    """launch's A/B and profile options; together they fill a service PlanOptions."""
    options = [
        click.option(
            "--kernel",
            metavar="DIR",
            type=click.Path(path_type=Path, file_okay=False),
            default=None,
            help="time the kernel the repository DIR declares in its bench-kernel.toml "
            "(default: the current directory when it holds one; else our kernel)",
        ),
        click.option(
            "--baseline",
            metavar="REF",
            default=None,
            help="A/B: time the kernel as the working tree has it against REF: a git "
            "revision (HEAD~1, main, a commit) or a directory, of the --kernel repository "
            "(timed as NAME@baseline) or else of this one's kernels/ tree (flash@baseline); "
            "both are built, gated and timed, interleaved in every round",
        ),
        click.option(
            "--candidates",
            metavar="REFS",
            default=None,
            help="also time these revisions of the --kernel repository, comma-separated (git "
            "revisions or directories), each gated and timed as its own implementation "
            "NAME@<commit 7> beside the working tree's kernel, in every round, on one GPU",
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
            "--peers",
            metavar="NAMES",
            default=None,
            # The names are results_schema/peers.py's (a test holds them equal): importing it
            # here would load pydantic for every --help.
            help="also time these public libraries, comma-separated: xformers, fa4, "
            "flashinfer, cudnn-fe; each is installed on the VM at its pinned version (on --backend "
            "local, only one installed already is timed): docs/peers.md",
        ),
        click.option(
            "--samples",
            type=click.IntRange(min=1),
            default=None,
            metavar="N",
            help="the most samples a config may take: an A/B run samples until its gate's "
            "statistics are decided, up to N (default: 4x the plan's samples); a run with "
            "nothing to decide takes N",
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


def plan_options(
    kernel,
    candidate,
    baseline,
    baseline_impl,
    profile,
    peers=None,
    margin=None,
    samples=None,
    gate_on=None,
    candidates=None,
):
    from orchestrator.kernel_tree.user import default_kernel_dir
    from orchestrator.service.plan_options import PlanOptions

    configs = None if profile is None else tuple(n for n in profile.split(",") if n.strip())
    return PlanOptions(
        kernel=kernel if kernel is not None else default_kernel_dir(Path.cwd()),
        candidate=candidate,
        candidates=_comma_list(candidates),
        baseline=baseline,
        baseline_impl=baseline_impl,
        profile=None if configs is None else tuple(n.strip() for n in configs),
        peers=_comma_list(peers),
        margin=margin,
        samples=samples,
        decide_on=gate_on,
    )


def _comma_list(text: str | None) -> tuple[str, ...]:
    """'a, b,,a' as ('a', 'b'): each name once, in order."""
    return tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
