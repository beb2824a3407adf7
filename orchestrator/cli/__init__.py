"""bench's command line: thin commands over the service layer, loaded lazily.

`bench --help` imports only click: the cloud SDKs cost seconds to import and torch is never
needed on the controller.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import traceback

import click

from orchestrator.errors import BenchError

# command name -> module in orchestrator.cli defining a click command of that name
COMMANDS = {
    "launch": "launch",
    "status": "status",
    "logs": "logs",
    "fetch": "fetch",
    "stop-all": "stop_all",
    "doctor": "doctor",
    "setup": "setup",
    "render": "render",
    "prices": "prices",
    "report": "report",
    "clean": "clean",
    "history": "history",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        module_name = COMMANDS.get(name)
        if module_name is None:
            return None
        module = importlib.import_module(f"orchestrator.cli.{module_name}")
        return getattr(module, module_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bench")
def cli() -> None:
    """Budget-capped GPU kernel benchmarks on Google Compute Engine, or on this machine.

    \b
    Quick start (free: runs here):
      bench launch --backend local --budget 1.00 --wait
      bench fetch
    On a spot L4 in your GCP project (set project and bucket in bench.toml):
      bench launch --budget 1.00 --wait
      bench stop-all            # the kill switch: every bench VM in every zone

    Settings come from bench.toml (your config dir, then ./), BENCH_* variables and
    flags; later ones win. Set BENCH_DEBUG=1 to see tracebacks.

    \b
    Exit codes:
      0    done
      1    unexpected error (a bug: rerun with BENCH_DEBUG=1)
      2    usage or configuration error; nothing was created
      3    refused: over the budget or the monthly cap
      4    cloud: no capacity in any zone, quota, permission
      5    results missing, incomplete or invalid
      6    --fail-on slower: the candidate is slower (a regression)
      7    --fail-on slower: inconclusive (the A/A control saw noise)
      8    --fail-on slower: the candidate failed correctness
      130  interrupted (a launched run goes on: see `bench stop-all`)
    """


def _fail(message: str, code: int) -> int:
    from orchestrator.cli.wrap import echo
    from orchestrator.text import printable

    # Messages may quote what a run wrote: one message, no control characters, wrapped
    # at its spaces to the terminal.
    echo(f"bench: error: {printable(message)}", err=True)
    return code


def main(argv: list[str] | None = None) -> int:
    debug = os.environ.get("BENCH_DEBUG") == "1"
    try:
        result = cli.main(args=argv, prog_name="bench", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except BrokenPipeError:
        return _reader_left()
    except BenchError as e:
        if debug:
            traceback.print_exc()
        return _fail(str(e), e.exit_code)
    except click.exceptions.Abort:
        return _fail("interrupted", 130)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except click.ClickException as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if getattr(e, "ctx", None) else ""
        return _fail(e.format_message().replace("\n", " ") + hint, 2)
    except Exception as e:  # a bug: say so, and how to see more
        if debug:
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (a bug; rerun with BENCH_DEBUG=1)", 1)


def _reader_left() -> int:
    """`bench prices | head -1`: the reader took what it wanted and left. Not an error; point
    stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def entry() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_left()
    # The interpreter's last act is a full collection over every object the command made:
    # 0.1 s of `bench prices`' 0.58 s, 1.2 s where torch, matplotlib and the cloud clients
    # were imported (2-core machine). Nothing needs a cycle collected then (finalizers run
    # through atexit): frozen, they are left to the process's end.
    gc.freeze()
    sys.exit(code)
