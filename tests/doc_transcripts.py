"""Output blocks in README.md and docs/*.md are what their commands print, and can be rewritten from them.

A transcript is a fenced block whose first line is ``$ llmsim ...``: each
``$ `` line is a command (a trailing ``# comment`` is not part of it), and
the lines up to the next one are what it printed, stdout then stderr, as a
pipe gets them (tables at their natural width). Commands run in page
order in one folder laid out like a checkout (``scenarios/``,
``../shared``; a page's ``# NAME.yaml`` blocks written into it), so a
command may reuse what an earlier one wrote. A page whose blocks stand
alone may mark where a block starts afresh with ``<!-- transcript: new
folder -->`` before it: the blocks from there to the next mark are one
*part*, run in a folder of its own, and the suite checks each part as a
test of its own (the two workers share a long page). Three things compare
loosely:

* a line ``...`` stands for any number of lines (a table cut to its end);
* timings: ``in 12.5 s`` matches any number of seconds, and so does every
  cell of a ``wall_time_s`` column;
* table borders and padding (a cell's width follows the widest cell).

A block with a command llmsim's suite cannot run (``dask``, ``python -c``,
``--executor dask``) is left alone.

    python tests/doc_transcripts.py                     # check every page; exit 1 on a difference
    python tests/doc_transcripts.py --write docs/planning.md   # rerun the commands, rewrite the blocks

The suite runs the check (tests/test_doc_transcripts.py); after a change
that moves figures (the cost model, the engine), ``--write`` regenerates
every block, and the diff is the review.
"""
from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
#: Before a transcript block: it and the blocks after it (to the next mark) run in a folder of their own.
NEW_FOLDER = "<!-- transcript: new folder -->"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_YAML_FILE = re.compile(r"#\s*([\w.-]+\.ya?ml)\b.*")
#: Commands the suite cannot run: a Dask cluster, a Python one-liner standing for a comparison.
NOT_RUN = ("--executor dask", "$ dask ", "$ python ")
ELLIPSIS = "..."
_TIMING = re.compile(r"\bin [\d,]+(\.\d+)? s\b")
_BOX = "┃│┏┓┗┛┣┫┳┻╋┡┩╇┯┷┼├┤┌┐└┘┬┴━─"


@dataclass
class Step:
    command: str                  # as shown, comment and all
    shown: list[str]              # what the page says it printed


@dataclass
class Block:
    start: int                    # offsets of the block's body in the page's text
    end: int
    steps: list[Step] = field(default_factory=list)

    @property
    def runnable(self) -> bool:
        return not any(k in f"$ {s.command}" for s in self.steps for k in NOT_RUN)


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def transcripts(text: str) -> tuple[list[Block], list[tuple[int, str, str]]]:
    """The page's transcript blocks, and its ``# NAME.yaml`` blocks as (offset, name, body)."""
    blocks, files = [], []
    for m in _FENCE.finditer(text):
        body = m.group(2)
        first = body.split("\n", 1)[0].strip()
        if m.group(1) in ("yaml", "yml") and (fm := _YAML_FILE.fullmatch(first)):
            files.append((m.start(), fm.group(1), body))
            continue
        if not first.startswith("$ llmsim ") and not first.startswith("$ dask "):
            continue
        block = Block(m.start(2), m.end(2))
        for line in body.rstrip("\n").split("\n"):
            if line.startswith("$ "):
                block.steps.append(Step(line[2:], []))
            elif block.steps:
                block.steps[-1].shown.append(line)
        blocks.append(block)
    return blocks, files


def parts(text: str, blocks: list[Block]) -> list[list[Block]]:
    """``blocks`` (runnable ones, in page order) grouped into parts at each :data:`NEW_FOLDER` mark."""
    out: list[list[Block]] = []
    at = 0
    for block in blocks:
        if not out or NEW_FOLDER in text[at:block.start]:
            out.append([])
        out[-1].append(block)
        at = block.end
    return out


def commands(page: Path) -> set[str]:
    """Every command a transcript of ``page`` shows, as run (no comment)."""
    blocks, _ = transcripts(page.read_text())
    return {" ".join(_strip_comment(s.command).split()) for b in blocks for s in b.steps}


def _normal(line: str, masked: set[int]) -> str:
    """A line as compared: timings masked, box drawing and padding dropped."""
    line = _TIMING.sub("in <t> s", line.rstrip())
    if line[:1] in "┃│" and line[:1]:
        cells = [c.strip() for c in re.split(r"[┃│]", line)[1:-1]]
        if line[0] == "│":
            cells = ["<t>" if i in masked else c for i, c in enumerate(cells)]
        return "|" + "|".join(cells) + "|"
    if line[:1] in _BOX and line[:1]:
        return re.sub(f"[{_BOX}]+", "+", line)
    return line


def _masked_columns(lines: list[str]) -> set[int]:
    """Columns whose header (over its lines) is a timing."""
    heads = [re.split(r"┃", line)[1:-1] for line in lines if line.startswith("┃")]
    if not heads:
        return set()
    names = ["".join(h[i].strip() for h in heads if i < len(h)) for i in range(len(heads[0]))]
    return {i for i, n in enumerate(names) if n == "wall_time_s"}


def normalised(lines: list[str]) -> list[str]:
    masked = _masked_columns(lines)
    return [_normal(line, masked) for line in lines]


def matches(shown: list[str], printed: list[str]) -> bool:
    """``shown`` (with ``...`` lines for any lines) against ``printed``."""
    want, got = normalised(shown), normalised(printed)
    parts: list[list[str]] = [[]]
    for line in want:
        if line.strip() == ELLIPSIS:
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) == 1:
        return want == got
    head, *middle, tail = parts
    if got[:len(head)] != head or (tail and got[len(got) - len(tail):] != tail) or len(got) < len(head) + len(tail):
        return False
    at, stop = len(head), len(got) - len(tail)
    for part in middle:
        while at + len(part) <= stop and got[at:at + len(part)] != part:
            at += 1
        if at + len(part) > stop:
            return False
        at += len(part)
    return True


def rewritten(shown: list[str], printed: list[str]) -> list[str]:
    """What a block should show now: everything printed, or, where the page
    elides, as many leading and trailing lines as it showed around ``...``."""
    cut = [i for i, line in enumerate(shown) if line.strip() == ELLIPSIS]
    if not cut:
        return printed
    head, tail = cut[0], len(shown) - cut[-1] - 1
    return printed[:head] + [ELLIPSIS] + (printed[len(printed) - tail:] if tail else [])


def checkout(folder: Path) -> Path:
    """A folder laid out like a checkout beside ../shared, for the pages' relative paths."""
    work = folder / "llmsim"
    work.mkdir()
    for name in ("scenarios", "benchmarks", "workloads", "docs"):
        (work / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "baselines", work / "baselines")    # a page may --update-baseline
    shared = ROOT.parent / "shared"
    if shared.exists():
        (folder / "shared").symlink_to(shared)
    return work


#: What a shell's pipe gives a command that the suite's own process may not: no colour asked for, no
#: terminal width to lay tables out for.
_PIPE_ENV = {"NO_COLOR": "1", "COLUMNS": None, "LINES": None, "FORCE_COLOR": None}


def _set_env(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's own display of a warning, on the command's stderr (pytest's recorder would keep it)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def _warning_as_a_fresh_interpreter() -> Iterator[None]:
    """Warnings as the interpreter a shell starts for the command shows them: its default filters
    (deprecations hidden outside ``__main__``, anything else printed once a place), printed on stderr,
    and no place counted as shown already by an earlier command of this process."""
    with warnings.catch_warnings():     # (entering it makes every place's "shown once" count anew)
        warnings.resetwarnings()
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.filterwarnings("ignore", category=category, append=True)
        warnings.showwarning = _show_warning
        yield


#: What a rich console reads from the environment once, when it is built, and the values it takes in a
#: process started into a pipe under :data:`_PIPE_ENV`: no colour (its stdout is no terminal), no width
#: or height from COLUMNS and LINES, NO_COLOR.
_CONSOLE_IN_A_PIPE = {"_color_system": None, "_width": None, "_height": None, "no_color": True}


@contextmanager
def _consoles_into_a_pipe() -> Iterator[None]:
    """llmsim's consoles as the command's own process builds them: the suite's process built them when
    it first imported llmsim, under its own environment (a CI job's FORCE_COLOR, a shell's exported
    COLUMNS, a terminal's stdout), which :data:`_PIPE_ENV` set now no longer reaches."""
    from simulator.cli.app import err_console
    from simulator.cli.output import console

    saved = [(c, {k: getattr(c, k) for k in _CONSOLE_IN_A_PIPE}) for c in (console, err_console)]
    try:
        for c, _ in saved:
            for k, v in _CONSOLE_IN_A_PIPE.items():
                setattr(c, k, v)
        yield
    finally:
        for c, values in saved:
            for k, v in values.items():
                setattr(c, k, v)


@contextmanager
def _into_a_pipe(cwd: Path) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """This process as a command run from ``cwd`` into a pipe sees it: that folder, :data:`_PIPE_ENV`,
    stdout and stderr that are no terminal, llmsim's consoles as built there (no colour, tables at their
    natural width), and Python's warnings shown there as a fresh interpreter shows them; everything is
    put back after."""
    saved = {k: os.environ.get(k) for k in _PIPE_ENV}
    here = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        _set_env(_PIPE_ENV)
        os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err), _warning_as_a_fresh_interpreter(), _consoles_into_a_pipe():
            yield out, err
    finally:
        os.chdir(here)
        _set_env(saved)


def run(command: str, cwd: Path) -> list[str]:
    """``llmsim ARGS`` as a user's shell runs it into a pipe: stdout, then stderr. It runs in this process
    (:func:`_into_a_pipe`): a process of its own for each command cost an interpreter's start and
    llmsim's imports, about 1.3 s of CPU each, a fifth of the pages' check."""
    args = shlex.split(_strip_comment(command))
    assert args[0] == "llmsim", command
    import glob

    argv = [w for a in args[1:] for w in (sorted(glob.glob(a, root_dir=cwd)) if "*" in a else [a])]
    with _into_a_pipe(cwd) as (out, err):
        from simulator.cli.app import main

        try:
            main(argv)
        except SystemExit:
            pass        # the exit code is not shown; what it printed is
    text = (out.getvalue() + err.getvalue()).rstrip("\n")
    return [line.rstrip() for line in text.split("\n")] if text else []


@dataclass
class Difference:
    page: str
    command: str
    shown: list[str]
    printed: list[str]

    def __str__(self) -> str:
        import difflib

        diff = difflib.unified_diff(self.shown, self.printed, "shown", "printed", lineterm="", n=1)
        return f"{self.page}: $ {self.command}\n" + "\n".join(diff)


def part_count(page: Path) -> int:
    """How many parts (:func:`parts`) the page's runnable transcripts make."""
    text = page.read_text()
    return len(parts(text, [b for b in transcripts(text)[0] if b.runnable]))


def check_page(page: Path, write: bool = False, part: int | None = None) -> list[Difference]:
    """Run the page's transcripts (``part``: that part's alone); the differences (after rewriting
    the page when ``write``)."""
    text = page.read_text()
    blocks, files = transcripts(text)
    blocks = [b for b in blocks if b.runnable]
    if not blocks:
        return []
    groups = parts(text, blocks)
    diffs: list[Difference] = []
    for group in (groups if part is None else [groups[part]]):
        with tempfile.TemporaryDirectory(prefix="llmsim-doc-") as tmp:
            work = checkout(Path(tmp))
            for _, name, body in files:
                (work / name).write_text(body)
            for block in group:
                for step in block.steps:
                    printed = run(step.command, work)
                    if not matches(step.shown, printed):
                        diffs.append(Difference(page.name, step.command, step.shown, printed))
                        step.shown = rewritten(step.shown, printed)
    if write and diffs:
        out, at = [], 0
        for block in blocks:
            body = "".join(f"$ {s.command}\n" + "".join(f"{line}\n" for line in s.shown) for s in block.steps)
            out += [text[at:block.start], body]
            at = block.end
        page.write_text("".join(out) + text[at:])
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", type=Path, help="pages to check (default: README.md and docs/*.md)")
    ap.add_argument("--write", action="store_true", help="rewrite each block with what its commands print now")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))      # the checkout's llmsim, as the suite imports it
    diffs = [d for page in (a.pages or PAGES) for d in check_page(page.resolve(), a.write)]
    for d in diffs:
        print(d, end="\n\n")
    print(f"{len(diffs)} block(s) {'rewritten' if a.write else 'differ'}" if diffs else "every output block matches")
    return 1 if diffs and not a.write else 0


if __name__ == "__main__":
    sys.exit(main())
