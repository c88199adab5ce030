"""report/agreement.py: the agreement report's HTML and Markdown pages."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.cli.agreement import agreement
from tests.agreement.conftest import NO_BOOT, frame


def test_html_and_markdown_reports(tmp_path: Path) -> None:
    from greval.report.agreement import gallery, render_html, render_markdown

    f = frame(["a", "b", "a", "b", "a"], ["a", "a", "b", "b", None], reason=["r0", "r1", "r2", "r3", "r4"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"], ordered=True), AgreementOptions(bootstrap=20))
    g = gallery(rep, f)
    assert g["item"].tolist() == ["i1", "i2", "i4"] and g["reason"].tolist() == ["r1", "r2", "r4"]
    page = render_html(rep, f)
    assert page.count("data:image/png;base64,") == 2 and "sortable" in page and "r4" in page
    assert page.count('<table class="heatmap">') == 1 and "<a href" not in page  # the confusion: a table, no links
    md = render_markdown(rep)
    assert "| cohen_kappa |" in md
    vf = frame([1.0, 2.0, 3.0, 4.0], [1.5, 2.0, 2.0, 4.5])
    vrep = compute_agreement(vf, AgreementScale(kind="value"), NO_BOOT)
    assert gallery(vrep, vf)["item"].tolist() == ["i2", "i0", "i3"]
    assert render_html(vrep, vf).count("data:image/png;base64,") == 2
    res = CliRunner().invoke(agreement, [])
    assert res.exit_code == 2
