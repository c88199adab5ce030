"""A gate's checks as a JUnit XML report: one test case per condition, so a CI system (GitHub, GitLab,
Jenkins …) lists each one with its reason. The shape is the common JUnit schema's (Jenkins' junit-10.xsd,
which pytest's own reports follow too)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from greval.gate.checks import Check
from greval.paths import write_private


def junit_xml(suite: str, classname: str, checks: Sequence[Check], notes: Sequence[str] = ()) -> bytes:
    """The report: a ``testsuites`` root holding one ``testsuite`` (``suite``) with a ``testcase`` per check
    (a ``failure`` with the reason when it failed); ``notes`` go to the suite's ``system-out``."""
    failures = sum(1 for c in checks if not c.passed)
    root = ET.Element("testsuites", name=suite, tests=str(len(checks)), failures=str(failures), errors="0", time="0")
    node = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(checks)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time="0",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    for c in checks:
        case = ET.SubElement(node, "testcase", name=c.name, classname=classname, time="0")
        if c.passed:
            ET.SubElement(case, "system-out").text = c.text
        else:
            ET.SubElement(case, "failure", message=c.text, type="greval.gate").text = c.text
    if notes:
        ET.SubElement(node, "system-out").text = "\n".join(notes)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def write_junit(
    path: str | Path, suite: str, classname: str, checks: Sequence[Check], notes: Sequence[str] = ()
) -> None:
    """Write :func:`junit_xml` to ``path``."""
    write_private(Path(path), junit_xml(suite, classname, checks, notes))
