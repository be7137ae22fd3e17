"""Run thousands of mutated problem files through gpuopt and count how each ended.

    python benchmarks/fuzz_inputs.py --cases 5000 [--first-seed 0] [--solve-share 0.5]

Each case is a shipped problems/*.yaml with keys dropped, values swapped for junk, unknown keys
added, or its text cut short (tests/fuzzing.py makes them; tests/test_fuzz.py runs a few hundred).
Exit 0 success, 1 infeasible, 2 bad input; "loaded" cases passed validation and were not solved.
Anything else, or a traceback, is a failure: its seed and mutated YAML are printed, and this
command exits 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ holds the case generator

from tests.fuzzing import Outcome, make_case, quick_catalog, run_case  # noqa: E402


def run(first_seed: int, cases: int, solve_share: float) -> list[Outcome]:
    """Run the cases of seeds first_seed … first_seed + cases - 1, printing progress."""
    outcomes = []
    with tempfile.TemporaryDirectory() as folder, quick_catalog():
        for n, seed in enumerate(range(first_seed, first_seed + cases), 1):
            outcomes.append(run_case(make_case(seed, solve_share), Path(folder)))
            if n % 500 == 0:
                print(f"  {n} cases", file=sys.stderr)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--solve-share", type=float, default=0.5,
                        help="Share of the cases from quickly planned problems that are solved if they load.")
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run(args.first_seed, args.cases, args.solve_share)
    seconds = time.perf_counter() - start
    failures = [o for o in outcomes if o.failure]
    ends = Counter("loaded" if o.exit_code is None else f"exit {o.exit_code}" for o in outcomes if not o.failure)
    print(f"{len(outcomes)} cases (seeds {args.first_seed}-{args.first_seed + args.cases - 1}) in {seconds:.1f} s: "
          + ", ".join(f"{ends[k]} {k}" for k in ("exit 0", "exit 1", "exit 2", "loaded"))
          + f", {len(failures)} failures")
    for o in failures:
        print(f"\nFAILURE {o.report()}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
