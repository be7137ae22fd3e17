"""No traceback on any input: mutated shipped problems end in exit 0, 1 or 2 with a message.

The cases come from tests/fuzzing.py (seeded: a failure prints its seed, what was mutated and
the mutated YAML, and ``make_case(seed)`` rebuilds it); benchmarks/fuzz_inputs.py runs thousands.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.fuzzing import Outcome, make_case, quick_catalog, run_case

CASES = 500
SOLVE_SHARE = 1.0  # every case of a quickly planned problem that loads is solved (one-second MIP limit)
_outcomes: dict[int, Outcome] = {}


@pytest.fixture(scope="module", autouse=True)
def _catalog_once():
    with quick_catalog():
        yield


def _outcome(seed: int, folder: Path) -> Outcome:
    """The case of ``seed``, run once per session (the summary test reuses the runs)."""
    if seed not in _outcomes:
        _outcomes[seed] = run_case(make_case(seed, SOLVE_SHARE), folder)
    return _outcomes[seed]


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_problem_exits_with_a_message(seed, tmp_path):
    outcome = _outcome(seed, tmp_path)
    assert outcome.failure is None, outcome.report()


def test_the_cases_reach_every_outcome(tmp_path):
    """The mutations are not so harsh that nothing loads, nor so mild that nothing is rejected:
    some cases solve, some are infeasible, most are bad input."""
    ends = Counter(_outcome(seed, tmp_path).exit_code for seed in range(CASES))
    assert ends[0] and ends[1] and ends[2] > CASES / 2 and ends[None], ends
