"""A check as JUnit XML: the test report CI systems draw without a plug-in.

GitLab's merge-request widget, Jenkins, Azure Pipelines and GitHub's test
reporter actions read JUnit XML, so a check written as it shows each
scenario as a suite and each SLO target and tracked metric as a test case:
a reviewer sees which metric regressed, and by how much, on the pull
request itself rather than in the job's log. The exit code stays the gate.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Optional, Sequence

__all__ = ["Case", "Suite", "junit_xml"]


@dataclass(frozen=True)
class Case:
    """One judged row of a check: its name, and why it failed (None: it passed)."""

    name: str
    failure: Optional[str] = None
    detail: str = ""


@dataclass
class Suite:
    """One scenario's check: its name, file, run time and rows."""

    name: str
    file: str
    seconds: float
    cases: list[Case] = field(default_factory=list)


def junit_xml(suites: Sequence[Suite], title: str = "llmsim check") -> str:
    """The suites as one ``<testsuites>`` document (UTF-8, declared)."""
    root = ET.Element("testsuites", name=title, tests=str(sum(len(s.cases) for s in suites)),
                      failures=str(sum(c.failure is not None for s in suites for c in s.cases)),
                      time=f"{sum(s.seconds for s in suites):.3f}")
    for s in suites:
        node = ET.SubElement(root, "testsuite", name=s.name, file=s.file, tests=str(len(s.cases)),
                             failures=str(sum(c.failure is not None for c in s.cases)), errors="0", skipped="0",
                             time=f"{s.seconds:.3f}")
        for c in s.cases:
            case = ET.SubElement(node, "testcase", classname=f"llmsim.check.{s.name}", name=c.name, file=s.file,
                                 time="0")
            if c.failure is not None:
                ET.SubElement(case, "failure", message=c.failure, type="llmsim check").text = c.failure
            if c.detail:
                ET.SubElement(case, "system-out").text = c.detail
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
