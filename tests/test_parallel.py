"""Worker pools: results in task order with any number of workers, and where the pool cannot start
or breaks part-way, the rest computed in this process with a warning instead of a traceback."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import pytest
from click.testing import CliRunner

from optimizer import parallel
from optimizer.cli import main
from optimizer.parallel import ordered_map

SEEN: list[int] = []


def _square(x: int) -> int:
    return x * x


def _setup(*args: object) -> None:
    SEEN.append(len(args))


def test_workers_give_the_serial_results_in_order():
    items = list(range(7))
    assert list(ordered_map(_square, items, 2, _setup, (), _square)) == [x * x for x in items]
    assert list(ordered_map(_square, items, 1, _setup, (), lambda x: -x)) == [-x for x in items]  # one worker: serial


class _NoPool:
    def __init__(self, *args, **kwargs):
        raise OSError(38, "Function not implemented")


class _BreaksAfterOne:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        yield fn(items[0])
        raise BrokenProcessPool("a worker died")


def test_a_pool_that_cannot_start_runs_everything_here(monkeypatch):
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", _NoPool)
    with pytest.warns(RuntimeWarning, match=r"OSError.*remaining 3 of 3 tasks"):
        assert list(ordered_map(_square, [1, 2, 3], 4, _setup, (), _square)) == [1, 4, 9]


def test_without_a_serial_function_this_process_is_set_up_like_a_worker(monkeypatch):
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", _NoPool)
    SEEN.clear()
    with pytest.warns(RuntimeWarning):
        assert list(ordered_map(_square, [1, 2], 2, _setup, ("state",))) == [1, 4]
    assert SEEN == [1]  # the initializer ran here, once
    assert list(ordered_map(_square, [3], 1, _setup, ())) == [9] and SEEN == [1, 0]


def test_a_pool_that_breaks_part_way_finishes_the_rest_here_once(monkeypatch):
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", _BreaksAfterOne)
    calls: list[int] = []

    def serial(x: int) -> int:
        calls.append(x)
        return x * x
    with pytest.warns(RuntimeWarning, match=r"BrokenProcessPool.*remaining 2 of 3 tasks"):
        assert list(ordered_map(_square, [1, 2, 3], 2, _setup, (), serial)) == [1, 4, 9]
    assert calls == [2, 3]


def test_sweep_without_worker_processes_warns_and_answers(monkeypatch, tiny_problem):
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", _NoPool)
    r = CliRunner().invoke(main, ["sweep", str(tiny_problem), "--deadline", "5,20", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "warning: worker processes failed (OSError" in r.output and "Traceback" not in r.output
    assert "Pareto frontier" in r.output
