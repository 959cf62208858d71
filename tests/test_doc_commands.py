"""Every command README.md and docs/*.md show runs as written (at smoke size).

Commands are taken from the pages themselves: each line of a fenced block
that starts with ``llmsim`` (or ``$ llmsim``, continuation lines joined),
and each inline code span ``llmsim SUBCOMMAND ARGS...`` that has arguments.
A synopsis (``SCENARIO``, ``[-o DIR]``, ``...``) is a form, not a command,
and is left out; so is a name or an option named in a sentence
(```llmsim run```, ```llmsim run --shards 64```: no positional argument). A fenced YAML block
whose first line is ``# NAME.yaml`` is a file the page's commands use: it is
written before they run. Commands of a page run in the page's order, in one
folder that looks like a checkout (``scenarios/``, ``baselines/``,
``../shared``), so a command may read what an earlier one wrote.

Smoke size: every workload is cut to at most a few seconds of arrivals
(``SMOKE_*``) where the workload is built, and a measured table that
``llmsim validate`` replays to its first few rows, so a sharded, planned or swept
run is cut too; what is checked is that the command is accepted and ends
with exit code 0, not its numbers. ``python benchmarks/X.py ARGS`` lines
are checked for the script and each flag they pass (``--help``), since a
benchmark runs for minutes.
"""
from __future__ import annotations

import glob
import io
import json
import os
import re
import runpy
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_transcripts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = doc_transcripts.PAGES
SMOKE_SECONDS = 2.0
SMOKE_ARRIVALS = 1000
SMOKE_REQUESTS = 60
SMOKE_SESSIONS = 6
SMOKE_ROWS = 4

#: Files a page's commands take from the user (their own benchmark result): written here, small.
USER_FILES = {
    "run.json": {"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32,
                 "max_concurrency": 4, "request_rate": "inf", "mean_ttft_ms": 30.0, "mean_tpot_ms": 6.0},
}

#: Commands that cannot run in the suite, and why (each must still parse: see the test).
NOT_RUN = {
    "--executor dask": "needs a running Dask scheduler at the address given",
    "llmsim calibrate": "refits every GPU profile's dense kernels (about a minute) and rewrites the profiles",
}

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"(?<!`)`(llmsim [^`]+)`(?!`)")
_PLACEHOLDER = re.compile(r"\[|\.\.\.|<|\b[A-Z][A-Z_]{1,}\b")
_SUBCOMMANDS = {"run", "schema", "check", "compare", "plan", "sweep", "calibrate", "validate", "estimate",
                "profiles", "report"}


@dataclass(frozen=True)
class Command:
    page: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}: {self.text}"


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def page_items(page: Path) -> list[tuple[str, str]]:
    """("file", "name\\nbody"), ("cmd", text) and ("refused", "text\\nerror: ...") items in page
    order: a fenced command followed by the ``error:`` line it prints shows a refusal."""
    text = page.read_text()
    items: list[tuple[int, str, str]] = []
    fenced = []
    for m in _FENCE.finditer(text):
        fenced.append((m.start(), m.end()))
        lang, body = m.group(1), m.group(2)
        first = body.split("\n", 1)[0].strip()
        fm = re.fullmatch(r"#\s*([\w.-]+\.ya?ml)\b.*", first)
        if lang in ("yaml", "yml") and fm:
            items.append((m.start(), "file", f"{fm.group(1)}\n{body}"))
            continue
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith("$ "):
                line = line[2:]
            if line.startswith("llmsim ") or line.startswith("python benchmarks/"):
                cmd = line
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
                after = lines[i + 1].strip() if i + 1 < len(lines) else ""
                if after.startswith("error: "):
                    items.append((m.start() + i, "refused", f"{_strip_comment(cmd)}\n{after}"))
                else:
                    items.append((m.start() + i, "cmd", _strip_comment(cmd)))
            i += 1
    for m in _INLINE.finditer(text):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        if _is_command(m.group(1).split()):
            items.append((m.start(), "cmd", m.group(1).strip()))
    return [(kind, body) for _, kind, body in sorted(items, key=lambda x: x[0])]


def _is_command(words: list[str]) -> bool:
    """An inline span is a command, not a name or an option in a sentence:
    ``llmsim schema`` and ``llmsim profiles list`` as they are, ``llmsim
    estimate KIND`` and ``llmsim profiles show`` with their arguments, any other with a positional argument."""
    if words[1:] in (["schema"], ["profiles", "list"]):
        return True
    if words[1] in ("estimate", "profiles"):      # a group: its subcommand, then what it is given
        return len(words) > 3
    args = words[2:]
    return any(not a.startswith("-") and not (i and args[i - 1].startswith("-") and "=" not in args[i - 1])
               for i, a in enumerate(args))


def runnable(text: str) -> bool:
    return not _PLACEHOLDER.search(text)


def _all_commands() -> list[Command]:
    return [Command(p.name, body) for p in PAGES for kind, body in page_items(p) if kind == "cmd"]


def test_the_pages_show_commands():
    cmds = _all_commands()
    assert len([c for c in cmds if runnable(c.text)]) >= 30
    # the forms left out are forms: each has a placeholder
    assert all(_PLACEHOLDER.search(c.text) for c in cmds if not runnable(c.text))


def smoke_sized(wl, seconds: float = SMOKE_SECONDS, arrivals: int = SMOKE_ARRIVALS):
    """A workload cut to at most ``seconds`` of arrivals (or a few requests or sessions), and a fleet-scale
    rate (the 10M-DAU fleet's 5,000 req/s) to about ``arrivals`` of them."""
    update = {}
    if wl.duration_s is not None:
        rate = getattr(wl.arrival, "rate_per_s", None)
        few = arrivals / rate if isinstance(rate, (int, float)) and rate > 0 else seconds
        update["duration_s"] = min(wl.duration_s, seconds, max(few, 0.5))
    if wl.num_requests is not None:
        update["num_requests"] = min(wl.num_requests, SMOKE_REQUESTS)
    if getattr(wl, "num_sessions", None) is not None:
        update["num_sessions"] = min(wl.num_sessions, SMOKE_SESSIONS)
    if getattr(wl, "lead_in_s", 0):     # a warm start, as short as the window
        update["lead_in_s"] = min(wl.lead_in_s, seconds)
    return wl.model_copy(update=update)


#: Repeats a smoke-sized command keeps: its flags and their parsing are what the test checks, and the
#: seeds of a plan or the replicates of a run repeat the same smoke-sized work (a page's `--seeds 3`
#: plans were most of its time).
SMOKE_REPEATS = {"--seeds": 1, "--replicates": 2}


def smoke_repeats(argv: list[str]) -> list[str]:
    """``argv`` with each repeat count cut to :data:`SMOKE_REPEATS` (``--seeds 3`` runs as ``--seeds 1``)."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in SMOKE_REPEATS and out[i + 1].isdigit():
            out[i + 1] = str(min(int(out[i + 1]), SMOKE_REPEATS[word]))
    return out


@pytest.fixture
def smoke(monkeypatch):
    """Every workload cut to smoke size where it is built (plan and sweep
    workers are forked, so they inherit it), and every figure built but
    not drawn (:func:`figures_unrendered`)."""
    import simulator.runner as runner

    real = runner.make_source

    def small(wl, seed, base, subset=None):
        return real(smoke_sized(wl), seed, base, subset)

    monkeypatch.setattr(runner, "make_source", small)

    import simulator.validation.rows as rows

    real_rows = rows.rows_from_csv

    def few_rows(*args, **kwargs):      # a measured table replays row by row: a few (small) rows of it
        replayable = [r for r in real_rows(*args, **kwargs) if not r.skip]
        return sorted(replayable, key=lambda r: r.concurrency or 0)[:SMOKE_ROWS]

    monkeypatch.setattr(rows, "rows_from_csv", few_rows)

    figures_unrendered(monkeypatch)


def figures_unrendered(monkeypatch) -> None:
    """Every figure a smoke-sized command draws is built from its run and written as an empty file: laying
    it out and rasterising it was most of a smoke run's time (a ladder's 30 figures took 15 of 21 s; plans'
    Pareto charts, ladders' and intervals' charts a fifth of the pages' commands). Drawing them is left to
    tests/test_plots.py, test_plan.py, test_ladder.py and the pages' transcripts, which run at full size."""
    from matplotlib.figure import Figure

    def unrendered(fig, fname, *args, **kwargs):
        Path(fname).write_bytes(b"")

    monkeypatch.setattr(Figure, "savefig", unrendered)


def accepted(subcommand: str, r) -> bool:
    """Exit 0, or a verdict on smoke-sized traffic rather than refused input:
    check's and run's exit 1 (a missed SLO, an overloaded fleet), plan's exit
    1 with "no combination meets the SLO"."""
    return (r.code == 0 or (r.code == 1 and subcommand in ("check", "run"))
            or (r.code == 1 and subcommand == "plan" and "no combination meets the SLO" in r.err))


_checkout = doc_transcripts.checkout


def _help(script: Path, monkeypatch) -> tuple[int, str, str]:
    """``python SCRIPT --help`` run in this process, as ``__main__`` (runpy), from the current folder: its
    exit code, stdout and stderr. A process of its own for each of the pages' two dozen benchmark lines
    cost an interpreter's start and the script's imports (0.1-1 s of CPU each). What the script changes
    is put back: argv, sys.path, the environment, and the modules of its folder it imported (a test
    that loads one later gets its own, as helpers_bench.load_benchmark registers it)."""
    out, err = io.StringIO(), io.StringIO()
    environ, modules = dict(os.environ), set(sys.modules)
    with monkeypatch.context() as m, redirect_stdout(out), redirect_stderr(err):
        m.setattr(sys, "argv", [str(script), "--help"])
        m.setattr(sys, "path", [str(script.parent), *sys.path])     # as `python SCRIPT` puts its folder first
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        finally:
            os.environ.clear()
            os.environ.update(environ)
            folder = script.parent.resolve()
            for name in set(sys.modules) - modules:
                if Path(getattr(sys.modules[name], "__file__", None) or "/").resolve().parent == folder:
                    del sys.modules[name]
    return code, out.getvalue(), err.getvalue()


def _benchmark_flags_exist(text: str, cwd: Path, monkeypatch) -> None:
    args = shlex.split(text)
    script = cwd / args[1]
    assert script.is_file(), f"{text}: no {args[1]}"
    code, out, err = _help(script, monkeypatch)
    assert code == 0, f"{text}: --help failed: {err[-500:]}"
    for flag in (a.split("=")[0] for a in args[2:] if a.startswith("--")):
        assert flag in out, f"{text}: {args[1]} has no {flag}"


def _to_run(page: Path) -> list[str]:
    """The page's commands this test runs: runnable forms, not left to a
    benchmark's own run, not transcripts (test_doc_transcripts runs those)."""
    seen = doc_transcripts.commands(page)
    bodies = [" ".join(body.split("\n", 1)[0].split()) if kind == "refused" else " ".join(body.split())
              for kind, body in page_items(page) if kind != "file"]
    return [b for b in bodies if runnable(b) and not any(k in b for k in NOT_RUN) and b not in seen]


# Pages with nothing to run here (prose, or only transcripts and placeholder forms) get no case.
RUN_PAGES = [p for p in PAGES if _to_run(p)]
#: Pages whose commands take over 15 s even at smoke size (CI still runs them; -m 'not slow' leaves them out).
_SLOW_PAGES = {"case-studies-dau-quickcode.md", "case-studies.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in _SLOW_PAGES else p
                                  for p in RUN_PAGES], ids=[p.relative_to(ROOT).as_posix() for p in RUN_PAGES])
def test_every_command_on_the_page_runs(page, tmp_path, monkeypatch, cli, smoke):
    if not (ROOT.parent / "shared").exists() and "../shared" in page.read_text():
        pytest.skip("the page's commands read ../shared/data, which is absent")
    work = _checkout(tmp_path)
    monkeypatch.chdir(work)
    ran = 0
    # a transcript's commands run at full size, their output compared, in test_doc_transcripts
    seen: set[str] = doc_transcripts.commands(page)
    for kind, body in page_items(page):
        if kind == "file":
            name, content = body.split("\n", 1)
            (work / name).write_text(content)
            continue
        shown_error = None
        if kind == "refused":
            body, shown_error = body.split("\n", 1)
        body = " ".join(body.split())
        if not runnable(body) or any(k in body for k in NOT_RUN) or body in seen:
            continue
        seen.add(body)
        if body.startswith("python "):
            _benchmark_flags_exist(body, work, monkeypatch)     # a benchmark's run is its own: its flags must exist
            ran += 1
            continue
        words = shlex.split(body)
        argv = [w for a in words[1:] for w in (sorted(glob.glob(a)) if "*" in a else [a])]
        for name, content in USER_FILES.items():
            if name in argv and not (work / name).exists():
                (work / name).write_text(json.dumps(content))
        into = None
        if len(argv) > 2 and argv[-2] == ">":     # `llmsim profiles show h100-sxm > my-gpu.yaml`
            argv, into = argv[:-2], argv[-1]
        r = cli(*smoke_repeats(argv))
        if into is not None and r.code == 0:
            (work / into).write_text(r.out)
        if shown_error is not None:     # a refusal the page shows: one line, exit 2, the words it shows
            assert r.code == 2 and r.err.strip() == shown_error, \
                f"{page.name}: `{body}` should print `{shown_error}`, got exit {r.code}: {r.err[-800:]}"
            ran += 1
            continue
        assert accepted(argv[0], r), f"{page.name}: `{body}` exited {r.code}: {r.err[-800:]}"
        ran += 1
    assert ran > 0, f"{page.name}: no command ran"
