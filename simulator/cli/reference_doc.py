"""Generate the CLI reference (docs/reference/cli.md) from the commands' own help.

The help a command prints is the one description of its options kept next
to the code; the page is that help laid out for reading, so it cannot drift
from what ``llmsim COMMAND --help`` says. A test fails when the page is stale:
``python -m simulator.cli.reference_doc`` rewrites it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

PAGE = "docs/reference/cli.md"

_INTRO = """# Command line

Every `llmsim` command with its arguments and options, as its `--help`
prints them (this page is generated from that help: `python -m
simulator.cli.reference_doc` rewrites it). Exit codes are the same for
every command: 0 done, 1 a verdict against the run (an SLO missed, a fleet
overloaded, a regression), 2 input llmsim refuses, with one line saying
which file and key and what was expected.
"""


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    if getattr(command, "hidden", False):
        return
    yield path, command
    for name in sorted(getattr(command, "commands", {})):
        yield from _commands(command.commands[name], [*path, name])


def _text(s: str) -> str:
    """Help text as markdown: one line, and no character read as markup."""
    s = " ".join(s.split())
    return re.sub(r"([\\*|<>\[\]])", r"\\\1", s)


def _section(path: list[str], command: Any) -> list[str]:
    ctx = command.context_class(command, info_name=" ".join(path))
    usage = command.get_usage(ctx).removeprefix("Usage: ")
    lines = [f"## `{' '.join(path)}`", "", "```text", usage, "```", ""]
    for paragraph in (command.help or "").split("\n\n"):
        if paragraph.strip():
            lines += [_text(paragraph), ""]
    rows = [r for p in command.params if not getattr(p, "hidden", False) and (r := p.get_help_record(ctx))]
    if rows:
        lines += ["| argument or option | meaning |", "|---|---|"]
        lines += [f"| `{name}` | {_text(help_)} |" for name, help_ in rows]
        lines.append("")
    examples = [e.strip() for e in (command.epilog or "").removeprefix("Examples:").split("\n\n") if e.strip()]
    if examples:
        lines += ["Examples:", "", "```bash", *examples, "```", ""]
    return lines


def generate() -> str:
    import typer

    from .app import _register, app

    _register()
    root = typer.main.get_command(app)
    lines = [_INTRO]
    for path, command in _commands(root, ["llmsim"]):
        lines += _section(path, command)
    return "\n".join(lines).rstrip("\n") + "\n"


def update(path: str = PAGE) -> None:
    Path(path).write_text(generate())


if __name__ == "__main__":
    update()
