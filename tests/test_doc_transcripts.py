"""Every output block in README.md and docs/*.md is what its command prints now (see doc_transcripts.py).

A block that differs fails with the difference and the command that
rewrites it: ``python tests/doc_transcripts.py --write PAGE``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_transcripts as dt  # noqa: E402

SHOWN = [p for p in dt.PAGES if any(b.runnable for b in dt.transcripts(p.read_text())[0])]


def test_the_pages_show_outputs():
    assert {p.name for p in SHOWN} >= {"planning.md", "scenarios.md"}


# A page's parts (doc_transcripts.parts: blocks that start in a folder of their own) are tests of
# their own, so the two workers share a long page; a part over the suite's per-test budget is slow.
# --max-rate over 2 seeds; 25 fleets at 2 seeds (15-21 s of CPU)
_SLOW_PARTS = {("planning.md", 3), ("planning.md", 4)}
PARTS = [(p, i) for p in SHOWN for i in range(dt.part_count(p))]


@pytest.mark.parametrize("page,part", [pytest.param(p, i, marks=pytest.mark.slow) if (p.name, i) in _SLOW_PARTS
                                       else (p, i) for p, i in PARTS],
                         ids=[f"{p.relative_to(dt.ROOT).as_posix()}-{i}" for p, i in PARTS])
def test_every_output_block_is_what_its_command_prints(page, part):
    if "../shared" in page.read_text() and not (dt.ROOT.parent / "shared").exists():
        pytest.skip("the page's commands read ../shared/data, which is absent")
    diffs = dt.check_page(page, part=part)
    assert not diffs, ("\n\n".join(map(str, diffs))
                       + f"\n\nrewrite the blocks with: python tests/doc_transcripts.py --write {page.relative_to(dt.ROOT).as_posix()}")


def test_a_new_folder_mark_starts_a_part():
    text = "```\n$ llmsim a\n```\nx\n```\n$ llmsim b\n```\n" + dt.NEW_FOLDER + "\n```\n$ llmsim c\n```\n"
    blocks, _ = dt.transcripts(text)
    assert [[b.steps[0].command for b in g] for g in dt.parts(text, blocks)] == [["llmsim a", "llmsim b"], ["llmsim c"]]


def test_loose_only_where_it_says():
    shown = ["$ plan", "searched x; 12 runs in 16.2 s", "┃ a ┃ wall_time_s ┃", "│ 1 │ 2.5 │", "..."]
    printed = ["$ plan", "searched x; 12 runs in 3.0 s", "┃ a ┃ wall_time_s ┃", "│ 1 │ 10.25 │", "x", "y"]
    assert dt.matches(shown[1:], printed[1:])
    assert not dt.matches(["searched x; 13 runs in 16.2 s"], ["searched x; 12 runs in 16.2 s"])
    assert not dt.matches(["│ 1 │ 2.5 │"], ["│ 2 │ 2.5 │"])              # a simulated figure is exact
    assert dt.matches(["a", "...", "z"], ["a", "b", "c", "z"]) and not dt.matches(["a", "...", "z"], ["a", "b"])
    assert dt.rewritten(["head", "...", "tail"], ["h", "1", "2", "t"]) == ["h", "...", "t"]


def test_a_command_s_python_warning_is_printed_as_a_fresh_interpreter_prints_it(tmp_path, monkeypatch):
    """The commands run in the suite's process, whose warnings pytest records and whose registries
    show a warning once per place for the whole process; a user's shell starts an interpreter per
    command, which prints the warning on stderr, every command that raises it, so a page must show it."""
    import warnings

    import simulator.profiles.loader as loader

    real = loader.named_profile

    def warned(kind, name):
        warnings.warn("a library's complaint", UserWarning)
        warnings.warn("a deprecation", DeprecationWarning)     # hidden, as in a fresh interpreter
        return real(kind, name)

    monkeypatch.setattr(loader, "named_profile", warned)
    for _ in range(2):
        printed = dt.run("llmsim profiles show h100-sxm", tmp_path)
        assert sum(line.endswith("UserWarning: a library's complaint") for line in printed) == 1, printed
        assert not any("DeprecationWarning: a deprecation" in line for line in printed), printed


def test_consoles_built_under_a_terminal_s_settings_print_as_into_a_pipe(tmp_path, monkeypatch):
    """llmsim's consoles read COLUMNS, LINES, FORCE_COLOR and NO_COLOR once, when the suite first
    imports them (a CI job exporting FORCE_COLOR, a shell exporting COLUMNS), where a command in a
    shell's pipe builds them without: its tables print at their natural width and without colour."""
    from simulator.cli import app, output

    plain = dt.run("llmsim estimate request --gpu h100-sxm --model llama-3.1-8b --input 2000 --output 250", tmp_path)
    assert max(map(len, plain)) > 40 and not any("\x1b[" in line for line in plain)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("LINES", "10")
    built = output._Console(highlight=False)    # as an import under those settings builds it
    for console in (output.console, app.err_console):
        for attr in ("_color_system", "_width", "_height", "no_color"):
            monkeypatch.setattr(console, attr, getattr(built, attr))
    assert dt.run("llmsim estimate request --gpu h100-sxm --model llama-3.1-8b --input 2000 --output 250", tmp_path) == plain
