"""The ``llmsim`` command line.

Each command group lives in its own module and registers itself on ``app``;
``main`` is the one place that turns user errors into a message and exit
code 2, so no command needs its own try/except.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import LlmsimError
from ..fields import Fields, declare_results

if TYPE_CHECKING:
    import click

app = typer.Typer(
    name="llmsim",
    help="Discrete-event capacity planner for LLM inference fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """One warning line on stderr, as every command prints them ("warning:" in yellow, the text as written)."""
    err_console.print(Text.assemble(("warning:", "yellow"), f" {text}"))


def checked_engine(engine: str, name: str = "--engine") -> None:
    """Refuse, in one line, an engine that names none of the fleet's engines; ``name``: where it was given
    (the flag, or the notebook API's ``engine`` argument)."""
    from ..fleet.pool import ENGINES

    if engine not in ENGINES:
        raise LlmsimError(f"expected {' or '.join(ENGINES)} (got {engine!r})", key_path=name)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from . import calibrate, check, compare, estimate, plan, profiles, report, run, sweep, validate  # noqa: F401
    declare_results(results_fields)


def results_fields() -> Fields:
    """results.json's declarations, put together on first use (``llmsim --help`` needs none)."""
    from ..report.results_reference import RESULTS

    return RESULTS


class Terminated(SystemExit):
    """Ctrl-C, SIGTERM or SIGHUP, raised where the program is, so that every
    ``finally`` runs: staging folders are removed and worker processes
    stopped. (A SystemExit, not a KeyboardInterrupt: typer turns the latter
    into a silent exit 130 before ``main`` could say what was kept.)"""


def _terminate(signum: int, _frame) -> None:
    raise Terminated(128 + signum)


def _handle_signals() -> dict:
    """Install the handlers; returns the previous ones (restored on return,
    so the in-process test runner keeps its own)."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue          # started with the signal ignored (nohup, a background job): keep it so
            previous[sig] = signal.signal(sig, _terminate)
        except ValueError:    # not the main thread: leave signals alone
            break
    return previous


_kept: list[str] = []


@contextmanager
def kept_if_stopped(describe: Callable[[], str]) -> Iterator[None]:
    """Around work that keeps something when stopped midway (a sweep's
    finished points): if an interrupt or termination ends it, ``describe()``
    is the line ``main`` prints about what was kept."""
    try:
        yield
    except (Terminated, KeyboardInterrupt):
        try:
            _kept.append(describe())
        except Exception:      # describing must not hide the interrupt
            pass
        raise


def _stopped(how: str) -> str:
    kept: Optional[str] = _kept.pop() if _kept else None
    _kept.clear()
    return f"{how}: {kept or 'nothing was written (an -o folder is left as it was)'}"


@lru_cache(maxsize=None)
def _command() -> "click.Command":
    """The click command typer builds from ``app``, once a process: ``app(...)`` rebuilds it on
    every call, reading every command's signature (about 25 ms), which each in-process call
    paid (a notebook's, the test suite's thousands); ``pretty_exceptions_enable=False`` leaves
    typer's call nothing else to do. Call after :func:`_register`."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    _register()
    previous = _handle_signals()
    try:
        # Standalone mode: typer/click handle their own usage errors (exit 2)
        # and exit codes; only llmsim's input errors reach us here.
        _command()(args=argv, prog_name="llmsim")
    except LlmsimError as e:
        err_console.print(Text.assemble(("error:", "bold red"), " ", e.render()))   # the message as written
        sys.exit(e.exit_code)
    except Terminated as e:
        signum = int(e.code) - 128
        err_console.print(_stopped("interrupted" if signum == signal.SIGINT else f"terminated (signal {signum})"),
                          markup=False, highlight=False)
        raise
    except KeyboardInterrupt:
        err_console.print(_stopped("interrupted"), markup=False, highlight=False)
        sys.exit(130)
    except SystemExit as e:
        if e.code == 130:     # typer's silent answer to a KeyboardInterrupt raised inside a command
            err_console.print(_stopped("interrupted"), markup=False, highlight=False)
        raise
    except OSError as e:
        # The last net for the machine's refusals (a full disk, a read-only
        # filesystem) where no command caught them with a better message.
        where = f"{e.filename}: " if e.filename else ""
        err_console.print(Text.assemble(("error:", "bold red"), f" {where}{e.strerror or e}"))
        sys.exit(2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
