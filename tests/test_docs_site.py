"""The docs site builds from docs/ without a warning, and its generated pages are current.

``mkdocs build --strict`` fails on a broken link or anchor, a page missing
from the nav or a nav entry naming no page (mkdocs.yml turns each into a
warning), so a page renamed or a heading reworded without its links fails
here. The site's index is the README's "next steps"; the CLI reference is
the commands' own help (``python -m simulator.cli.reference_doc`` rewrites
it).
"""
from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO_ROOT

from simulator.cli import reference_doc


def test_the_site_builds_without_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "WARNING" not in log, log
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "tutorial/index.html", "reference/cli/index.html"} <= pages


def _links(text: str) -> list[tuple[str, str]]:
    return re.findall(r"\[([^\]]+)\]\(([^)]+)\)", text)


def test_the_index_is_the_readme_next_steps():
    readme = (REPO_ROOT / "README.md").read_text()
    steps = readme[readme.index("## Next steps"):]
    steps = steps[:steps.index("\n## ", 1)]
    index = (REPO_ROOT / "docs" / "index.md").read_text()
    from_readme = [(text, target.removeprefix("docs/")) for text, target in _links(steps)
                   if target.startswith("docs/")]
    assert len(from_readme) >= 15
    assert _links(index) == from_readme


def test_the_cli_reference_is_the_commands_help():
    page = REPO_ROOT / reference_doc.PAGE
    assert page.read_text() == reference_doc.generate(), \
        f"{reference_doc.PAGE} is stale: run `python -m simulator.cli.reference_doc`"


def _tiny_site(tmp_path, page: str):
    tmp_path.mkdir()
    """The repository's mkdocs.yml (validation rules and hooks) over two pages of our own."""
    import yaml

    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n## Intervals: how often the 90 % interval holds\n\nText.\n")
    (docs / "page.md").write_text(page)
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}, {"Page": "page.md"}],
                  hooks=[str(REPO_ROOT / h) for h in config["hooks"]])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_broken_anchor_fails_and_a_github_anchor_does_not(tmp_path):
    good = _tiny_site(tmp_path / "good", "# Page\n\n[90 %](index.md#intervals-how-often-the-90--interval-holds)\n")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _tiny_site(tmp_path / "bad", "# Page\n\n[gone](index.md#no-such-heading)\n")
    assert bad.returncode != 0 and "no-such-heading" in bad.stdout + bad.stderr


def _pages(entries) -> list[str]:
    out = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            out += _pages(value) if isinstance(value, list) else [value]
    return out


def test_explanation_pages_are_read_in_one_sitting():
    """An explanation page over 25 KB (25 × 1024 bytes) is split by section into pages of its own."""
    import yaml

    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    (explanation,) = [e["Explanation"] for e in nav if isinstance(e, dict) and "Explanation" in e]
    sizes = {page: (REPO_ROOT / "docs" / page).stat().st_size for page in _pages(explanation)}
    assert len(sizes) >= 10
    assert {p: s for p, s in sizes.items() if s > 25 * 1024} == {}
