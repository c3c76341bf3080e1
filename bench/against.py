"""The pipeline benchmark on another revision's code and on this tree's, alternating, in one run:
`python bench/against.py REV [embedded|production] [ROUNDS]` (`make bench-pipeline-against
REV=...`). A refactor that should not change speed shows its ratio here, measured side by side on
the same machine in the same minutes (a machine growing busier favours neither side: the rounds
alternate, the revision first).

REV's code is taken with `git archive` into a temporary folder and run with its own
bench/pipeline.py (the figures' lines have kept their wording), on this tree's virtual environment.
Each run is paced by nothing (as fast as the portal answers); the figure per side is the median of
its rounds' "pipeline readings/s" (ingested, every stage finished), beside "ingest readings/s".
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import machine_load  # noqa: E402

FIGURES = {
    "pipeline": re.compile(r"pipeline readings/s \(ingested, every stage finished\)\s+([\d,]+)"),
    "ingest": re.compile(r"ingest readings/s while posting\s+([\d,]+)"),
}


def revision_tree(revision: str) -> Path:
    """REV's tracked files in a temporary folder, with this tree's compiled messages (untracked)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-against-"))
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    for compiled in ROOT.glob("locale/*/LC_MESSAGES/*.mo"):
        target = folder / compiled.relative_to(ROOT)
        if target.parent.is_dir():
            shutil.copy2(compiled, target)
    return folder


def one_run(tree: Path, setup: str) -> dict[str, float]:
    """bench/pipeline.py of `tree` once; its figures, read off what it printed."""
    run = subprocess.run(
        [sys.executable, str(tree / "bench" / "pipeline.py"), setup],
        cwd=tree, capture_output=True, text=True, check=False, env=_env(),
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"bench/pipeline.py in {tree} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    figures = {}
    for name, pattern in FIGURES.items():
        match = pattern.search(run.stdout)
        if match is None:
            raise SystemExit(f"no {name} figure in what bench/pipeline.py printed:\n{run.stdout[-2000:]}")
        figures[name] = float(match.group(1).replace(",", ""))
    return figures


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in ("BENCH_RATE", "BENCH_JOBS", "VAR_DIR")}


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: bench/against.py REV [embedded|production] [ROUNDS]")
    revision = sys.argv[1]
    setup = sys.argv[2] if len(sys.argv) > 2 else "embedded"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    if setup not in ("embedded", "production"):
        raise SystemExit(f"unknown set-up {setup!r}: embedded or production")
    short = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()  # fmt: skip
    print(f"bench-pipeline-against {short} ({setup}, {rounds} rounds each, alternating): {machine_load()}")
    tree = revision_tree(revision)
    results: dict[str, list[dict[str, float]]] = {short: [], "this tree": []}
    try:
        for number in range(rounds):
            for side, code in ((short, tree), ("this tree", ROOT)):
                figures = one_run(code, setup)
                results[side].append(figures)
                print(f"  round {number + 1} {side:10} pipeline {figures['pipeline']:8,.0f}/s  "
                      f"ingest {figures['ingest']:8,.0f}/s   {machine_load()}")  # fmt: skip
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    print(f"\nmedians over {rounds} rounds (readings/s):")
    for name in FIGURES:
        before = statistics.median(r[name] for r in results[short])
        after = statistics.median(r[name] for r in results["this tree"])
        print(f"  {name:9} {short}: {before:8,.0f}   this tree: {after:8,.0f}   ({after / before:.3f}x)")


if __name__ == "__main__":
    main()
