"""The installed wheel (not only a source checkout) ships the predefined specs, the example and the
annotation server's code, and its console script works."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_specs_example_and_annotation_code(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)], check=True, timeout=300
    )
    [wheel] = wheels.glob("greval-*.whl")
    env_dir = tmp_path / "venv"
    # The venv sees the dependencies installed where this test runs — the base interpreter's or a venv's
    # (a nested venv's "system site packages" would be the base interpreter's, which may lack them) — but
    # greval itself only from the wheel: the wheel goes in first, so it wins over the editable checkout.
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, str(wheel)],
        check=True,
        timeout=300,
    )
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (Path(site) / "zz_outer_site.pth").write_text("".join(f"{p}\n" for p in here))
    probe = (
        "import greval, greval.paths as p; from greval.spec import bundled_specs;"
        "print(greval.__file__); print(sorted(bundled_specs())[:3]);"
        "print((p.examples_dir() / 'begin' / 'records.jsonl').exists(), (p.annotation_dir() / 'serve.py').exists())"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(site), lines[0]  # imported from the installed wheel, not the checkout
    assert "answer_alignment" in lines[1]
    assert lines[2] == "True True"
    cli = subprocess.run(
        [str(py), "-m", "greval", "spec", "list"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert cli.returncode == 0 and "answer_completeness" in cli.stdout
