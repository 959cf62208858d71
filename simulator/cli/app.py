"""The ``llmsim`` command line.

Each command group lives in its own module and registers itself on ``app``;
``main`` is the one place that turns user errors into a message and exit
code 2, so no command needs its own try/except.
"""
from __future__ import annotations

import signal
import sys

import typer
from rich.console import Console
from rich.text import Text

from ..errors import LlmsimError

app = typer.Typer(
    name="llmsim",
    help="Discrete-event capacity planner for LLM inference fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from . import calibrate, check, compare, estimate, plan, profiles, report, run, sweep, validate  # noqa: F401


class Terminated(SystemExit):
    """SIGTERM or SIGHUP, raised where the program is, so that every
    ``finally`` runs: staging folders are removed and worker processes
    stopped, as for Ctrl-C."""


def _terminate(signum: int, _frame) -> None:
    raise Terminated(128 + signum)


def _handle_signals() -> dict:
    """Install the handlers; returns the previous ones (restored on return,
    so the in-process test runner keeps its own)."""
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, _terminate)
        except ValueError:    # not the main thread: leave signals alone
            break
    return previous


def main(argv: list[str] | None = None) -> None:
    _register()
    previous = _handle_signals()
    try:
        # Standalone mode: typer/click handle their own usage errors (exit 2)
        # and exit codes; only llmsim's input errors reach us here.
        app(args=argv, prog_name="llmsim")
    except LlmsimError as e:
        err_console.print(Text.assemble(("error:", "bold red"), " ", e.render()))   # the message as written
        sys.exit(e.exit_code)
    except Terminated as e:
        err_console.print(f"terminated (signal {int(e.code) - 128})")
        raise
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except OSError as e:
        # The last net for the machine's refusals (a full disk, a read-only
        # filesystem) where no command caught them with a better message.
        where = f"{e.filename}: " if e.filename else ""
        err_console.print(Text.assemble(("error:", "bold red"), f" {where}{e.strerror or e}"))
        sys.exit(2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
