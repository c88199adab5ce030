"""Benchmark `greval agreement` on a 1,000-row file: CPU seconds of a whole fresh process, this checkout
against the code before issue 35 (a git worktree of ``--base``, run the same way) and ``python -c pass``.

Each round runs every command once, in a rotating order, so that a burst of load from other jobs hits each
alike; a command's CPU time is the children's user + system time (``resource.getrusage(RUSAGE_CHILDREN)``)
around it, which depends on the machine's load far less than wall time does (wall time is printed too).
Printed: per command the median of the rounds, its ratio to ``python -c pass``, the median of the per-round
ratios new / base, the heavy libraries each version imports (``python -X importtime``), the issue's target,
and the load average before and after.

    python scripts/bench_agreement.py [--rounds 5] [--base REV] [--rows 1000]

Commands: ``greval agreement FILE --judge J --human H --bootstrap 0``, the same with the default bootstrap
(1,000 resamples), and — when this checkout has it — the batch form: N files in one ``greval agreement
F1 … FN --judge J --human H --bootstrap 0 --json OUT`` call against N single calls (its per-table cost: the
call's CPU / N, and the marginal cost of a table, (batch − one single call) / (N − 1)). Each file is a seeded
CSV of two labels (80 % agreement).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_REV = "5295460"
"""main before issue 35's agreement work (scipy and scikit-learn imported; pandas read the file)."""
TARGET_S = 1.0
"""Issue 35: `greval agreement` on 1,000 rows with --bootstrap 0 takes at most this much CPU."""
HEAVY = ("pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "krippendorff")


def write_table(path: Path, rows: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "judge", "human"])
        for i in range(rows):
            human = rng.choice(["yes", "no"])
            judge = human if rng.random() < 0.8 else rng.choice(["yes", "no"])
            out.writerow([i, judge, human])


def run(cmd: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def heavy_imports(cmd: Sequence[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """The heavy libraries ``cmd`` (a ``python -m greval …`` command) imports."""
    done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=cwd, env=env, capture_output=True, text=True)
    names = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    return [m for m in HEAVY if m in names]


def base_worktree(rev: str, where: Path) -> Path:
    """A detached git worktree of ``rev`` (removed again by :func:`drop_worktree`)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True, capture_output=True
    )
    return where


def drop_worktree(where: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False, capture_output=True
    )


def has_batch(env: dict[str, str]) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "greval", "agreement", "--help"], env=env, capture_output=True, text=True
    )
    return "[FILE]..." in done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds; medians are reported (≥ 3)")
    parser.add_argument("--base", default=BASE_REV, help="the git revision to compare with")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--tables", type=int, default=10, help="tables in the batch comparison")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="greval-bench-agreement-") as tmp:
        work = Path(tmp)
        table = work / "labels.csv"
        write_table(table, args.rows)
        base = base_worktree(args.base, work / "base")
        try:
            report(work, table, base, args, load_before)
        finally:
            drop_worktree(base)


def report(work: Path, table: Path, base: Path, args: argparse.Namespace, load_before: tuple[float, ...]) -> None:
    envs = {name: {**os.environ, "PYTHONPATH": str(tree)} for name, tree in (("new", ROOT), ("base", base))}
    single = [sys.executable, "-m", "greval", "agreement", str(table), "--judge", "judge", "--human", "human"]
    commands: dict[str, tuple[list[str], str | None]] = {"python -c pass": ([sys.executable, "-c", "pass"], None)}
    for version in ("base", "new"):
        commands[f"{version}: --bootstrap 0"] = ([*single, "--bootstrap", "0"], version)
        commands[f"{version}: default bootstrap"] = (single, version)
    batch = has_batch(envs["new"])
    if batch:
        tables = []
        for n in range(args.tables):
            path = work / f"t{n}.csv"
            write_table(path, args.rows, seed=n + 1)
            tables.append(path)
        columns = ["--judge", "judge", "--human", "human", "--bootstrap", "0", "--json", str(work / "batch.json")]
        commands[f"new: {args.tables} tables, one batch call"] = (
            [sys.executable, "-m", "greval", "agreement", *map(str, tables), *columns],
            "new",
        )
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating order
            cmd, version = commands[name]
            c, w = run(cmd, work, envs[version] if version else dict(os.environ))
            cpu[name].append(c)
            wall[name].append(w)
    load_after = os.getloadavg()
    med = {name: statistics.median(v) for name, v in cpu.items()}
    pass_s = med["python -c pass"]
    print(f"greval agreement on {args.rows} rows; {args.rounds} rounds, rotating order; base = {args.base}")
    print(f"{'command':44} {'CPU s':>7} {'wall s':>7} {'× pass':>7}  new / base (median of rounds)")
    for name in names:
        ratio = ""
        if name.startswith("new: ") and (other := "base: " + name.removeprefix("new: ")) in cpu:
            ratio = f"{statistics.median(a / b for a, b in zip(cpu[name], cpu[other], strict=True)):.3f}"
        print(f"{name:44} {med[name]:7.3f} {statistics.median(wall[name]):7.3f} {med[name] / pass_s:7.1f}  {ratio}")
    if batch:
        one, many = med["new: --bootstrap 0"], med[f"new: {args.tables} tables, one batch call"]
        print(
            f"{args.tables} single calls would take {args.tables * one:.2f} s CPU; one batch call took {many:.2f} s: "
            f"{many / args.tables:.3f} s per table, {(many - one) / (args.tables - 1):.3f} s for each table after "
            "the first"
        )
    new0 = med["new: --bootstrap 0"]
    verdict = "met" if new0 <= TARGET_S else "NOT met"
    print(f"target (issue 35): --bootstrap 0 ≤ {TARGET_S:.1f} s CPU: {verdict} ({new0:.3f} s)")
    for version in ("base", "new"):
        cmd, _ = commands[f"{version}: --bootstrap 0"]
        found = heavy_imports(cmd, work, envs[version])
        print(f"{version} imports: {', '.join(found) or 'none of ' + ', '.join(HEAVY)}")
    print("load average (1, 5, 15 min): before " + ", ".join(f"{x:.2f}" for x in load_before), end="")
    print("; after " + ", ".join(f"{x:.2f}" for x in load_after) + f"; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
