"""The ``llmsim`` command line.

Each command group lives in its own module and registers itself on ``app``;
``main`` is the one place that turns user errors into a message and exit
code 2, so no command needs its own try/except.
"""
from __future__ import annotations

import sys

import typer
from rich.console import Console

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
    from . import calibrate, check, compare, estimate, plan, profiles, run, sweep, validate  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        # Standalone mode: typer/click handle their own usage errors (exit 2)
        # and exit codes; only llmsim's input errors reach us here.
        app(args=argv, prog_name="llmsim")
    except LlmsimError as e:
        err_console.print(f"[bold red]error:[/] {e.render()}", markup=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
