"""Print how long each shipped problem takes: plan enumeration, then each MIP backend.

    python benchmarks/solve_times.py            # every problems/*.yaml
    python benchmarks/solve_times.py problems/lab_budget.yaml

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from optimizer.catalog import load_catalog
from optimizer.milp import solve
from optimizer.problem import load_priced
from optimizer.recommend import plan_table, targets_of

ROOT = Path(__file__).resolve().parent.parent


def main(paths: list[str]) -> None:
    catalog = load_catalog()
    files = [Path(p) for p in paths] or sorted((ROOT / "problems").glob("*.yaml"))
    print(f"{'problem':<28} {'templates':>9} {'candidates':>10} {'plans s':>8} {'ortools s':>9} {'pulp s':>7}"
          f" {'status':>8} {'gap':>8}  objective")
    for path in files:
        problem, priced = load_priced(path, catalog)
        t0 = time.perf_counter()
        table = plan_table(problem, priced)
        t_plans = time.perf_counter() - t0
        sols = {backend: solve(table, targets_of(problem), backend, problem.solver.time_limit_s,
                               problem.solver.mip_gap) for backend in ("ortools", "pulp")}
        times = {backend: sol.solve_seconds for backend, sol in sols.items()}  # build + solve, both passes
        s = sols["ortools"]
        gap = "n/a" if s.gap is None else f"{s.gap:.1e}"
        print(f"{path.name:<28} {table.enumerated:>9} {len(table.candidates) + len(table.serving):>10} {t_plans:>8.2f} "
              f"{times['ortools']:>9.2f} {times['pulp']:>7.2f} {s.status.name.lower():>8} {gap:>8}  "
              f"{s.objective:,.1f} (pulp {sols['pulp'].objective:,.1f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", help="problem files (default: every problems/*.yaml)")
    main(parser.parse_args().problems)
