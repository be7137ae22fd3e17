"""Print how long a 20-point budget sweep of problems/lab_budget.yaml takes: the shared plan
enumeration once, then the points with 1 worker and with one per core.

    python benchmarks/sweep_time.py [PROBLEM] [--points N]

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from optimizer.catalog import load_catalog
from optimizer.plans import enumerate_candidates
from optimizer.problem import load_priced
from optimizer.tradeoffs.axes import Axis, loosest
from optimizer.tradeoffs.sweep import run_sweep

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", nargs="?", default=str(ROOT / "problems" / "lab_budget.yaml"))
    parser.add_argument("--points", type=int, default=20)
    args = parser.parse_args()
    catalog = load_catalog()
    problem, catalog = load_priced(args.problem, catalog)
    budgets = tuple(100e3 + (2e6 - 100e3) * i / (args.points - 1) for i in range(args.points))
    axes = [Axis("budget", budgets)]
    start = time.perf_counter()
    table = enumerate_candidates(*loosest(problem, catalog, axes))
    plans = time.perf_counter() - start
    print(f"{problem.name}: {args.points}-point budget sweep $100k-$2M; shared plans {len(table.candidates)} "
          f"candidates in {plans:.1f} s")
    for workers in sorted({1, os.cpu_count() or 1}):
        start = time.perf_counter()
        result = run_sweep(problem, catalog, axes, problem.solver.backend, problem.solver.time_limit_s, workers,
                           table=table)
        seconds = time.perf_counter() - start
        print(f"  {workers} worker(s): {seconds:.1f} s for the points ({seconds / args.points:.2f} s each), "
              f"{plans + seconds:.1f} s in all; {sum(r.pareto for r in result.rows)} on the frontier, "
              f"{len(result.violations)} monotonicity violations")


if __name__ == "__main__":
    main()
