"""The user docs: ARCHITECTURE.md's module map is complete, and no page reads as a work log.

docs/ARCHITECTURE.md's module map names every module, and only modules
that exist: the map is how a reader finds where a concept lives; a module added, moved
or renamed without its row leaves them searching. Each block of the map
starts with a bold line naming its package (``**`simulator/engine/`**``);
the ``.py`` names in the block are relative to that package. A bold line
naming no package ends the map.
"""
from __future__ import annotations

import re

from conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("simulator", "workloads")


def _module_map() -> str:
    text = DOC.read_text()
    start = text.index("## Module map")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def documented_modules() -> set[str]:
    found: set[str] = set()
    package = None
    for line in _module_map().splitlines():
        header = re.match(r"\*\*[^`*]*`([\w/]+/)`", line)
        if line.startswith("**"):   # a block starts: a package's, or prose after the map
            package = header.group(1) if header else None
        if package is None:
            continue
        for name in re.findall(r"`([\w/]+\.py)`", line[header.end():] if header else line):
            found.add(package + name)
    return found


def test_the_module_map_names_every_module():
    modules = {p.relative_to(REPO_ROOT).as_posix() for top in PACKAGES for p in (REPO_ROOT / top).rglob("*.py")
               if p.name != "__init__.py"}
    documented = documented_modules()
    assert modules - documented == set(), "modules with no row in docs/ARCHITECTURE.md's module map"
    assert documented - modules == set(), "rows in docs/ARCHITECTURE.md's module map naming no module"


# A reader has the repository, not its tracker or its history: "as the issue asks", "#23",
# "session 8" (a stretch of development work; chat sessions are never numbered so).
WORK_LOG = re.compile(r"\bthe issue\b|\bissues? #?\d+|(?<![\w&/])#\d+\b|\b[Ss]ession[- ]\d+\b")


def test_no_doc_refers_to_issues_or_work_sessions():
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    hits = [f"{p.name}:{i}: {line.strip()}" for p in pages for i, line in enumerate(p.read_text().splitlines(), 1)
            if WORK_LOG.search(line)]
    assert not hits, "\n".join(hits)
