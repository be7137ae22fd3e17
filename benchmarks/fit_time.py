"""Print how long the calibration takes, stage by stage, per kind: loading the published rows, one
fit on all of them, leave-one-source-out (a refit per source), and the band coverage (a nested
leave-one-source-out over the bands). ``gpuopt fit`` and ``gpuopt validate --cv source`` run
these, and so does the test suite's calibration fixture.

    python benchmarks/fit_time.py [training|serving ...]

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from optimizer.calibration import crossval
from optimizer.calibration.bands import coverage
from optimizer.catalog import load_catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", metavar="KIND", help="training, serving or both (the default)")
    args = parser.parse_args()
    if unknown := set(args.kinds) - {"training", "serving"}:
        parser.error(f"unknown kind {', '.join(sorted(unknown))}: training or serving")
    catalog = load_catalog()
    for kind in args.kinds or ["training", "serving"]:
        start = time.perf_counter()
        ds = crossval.load_dataset(kind, catalog)
        loaded = time.perf_counter()
        fit = crossval.fit_all(ds, catalog)
        fitted = time.perf_counter()
        validation = crossval.cross_validate(ds, catalog)
        validated = time.perf_counter()
        cov = coverage(list(validation.out_of_source))
        covered = time.perf_counter()
        sources = len(set(ds.sources))
        errors = [abs(c.error) for c in validation.out_of_source if c.metric not in ("ttft_ms", "tpot_ms")]
        print(f"{kind}: {len(ds.cases)} rows from {sources} sources, {len(fit.layout.slots)} free values")
        print(f"  load {loaded - start:6.1f} s")
        print(f"  fit on every row {fitted - loaded:6.1f} s")
        print(f"  leave-one-source-out ({sources + 1} fits) {validated - fitted:6.1f} s "
              f"({(validated - fitted) / (sources + 1):.1f} s a fit)")
        print(f"  band coverage {covered - validated:6.1f} s")
        print(f"  out of source: median {np.median(errors):.1%}, coverage {cov['all']:.1%}")


if __name__ == "__main__":
    main()
