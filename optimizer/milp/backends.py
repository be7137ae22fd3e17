"""The two MIP backends behind one small modelling interface, so the formulation is written once:
OR-Tools' linear-solver wrapper (HiGHS) and PuLP (CBC)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optimizer.errors import SolverError
from optimizer.milp.solution import Status
from optimizer.problem.enums import Backend

BACKENDS = tuple(b.value for b in Backend)
ORTOOLS_ENGINE = "HIGHS"  # OR-Tools' linear-solver wrapper around HiGHS; "SCIP" also works, but
# on the shipped problems its tie-breaking pass ran 5-15x slower (benchmarks/solve_times.py)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ straight to file descriptor 1, past SuppressOutput();
    park fd 1 on /dev/null while it solves so `--format json` stays clean."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real fd 1 (e.g. captured by a test runner)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


CBC_INFINITY = 1e30  # CBC writes 1e50 for a bound it has not found; anything this large is none


def cbc_bound(log: str) -> float | None:
    """The best bound in CBC's closing summary, in the objective's own sense: after a stop on its
    time limit CBC prints "Lower bound:" (minimising) or "Upper bound:" (maximising) under "Objective
    value:"; None where it printed neither (a solve it finished, which prints no bound) or a value
    of CBC's infinity (1e50, no bound yet)."""
    found = re.search(r"^(?:Lower|Upper) bound:\s*(\S+)", log, re.MULTILINE)
    if found is None:
        return None
    try:
        bound = float(found.group(1))
    except ValueError:
        return None
    return bound if abs(bound) < CBC_INFINITY else None


class Model:
    """The few modelling calls both backends need, so the formulation is written once."""

    def __init__(self, backend: Backend | str) -> None:
        try:
            self.backend = backend = Backend(backend)
        except ValueError:
            choices = ", ".join(BACKENDS)
            raise SolverError(f"unknown solver backend '{backend}'. To fix: use one of {choices}.") from None
        if backend is Backend.ORTOOLS:
            from ortools.linear_solver import pywraplp

            self._pywraplp = pywraplp
            self.m = pywraplp.Solver.CreateSolver(ORTOOLS_ENGINE)
            if self.m is None:
                raise SolverError(f"OR-Tools was built without {ORTOOLS_ENGINE}. "
                                  "To fix: pip install --force-reinstall ortools.")
            self.m.SuppressOutput()
        else:
            import pulp

            self._pulp = pulp
            self.m = pulp.LpProblem("gpuopt", pulp.LpMinimize)
        self.n_vars = 0
        self.n_cons = 0

    def int_var(self, lb: float, ub: float, name: str) -> Any:
        self.n_vars += 1
        if self.backend is Backend.ORTOOLS:
            return self.m.IntVar(lb, ub, name)
        return self._pulp.LpVariable(name, lb, ub, cat="Integer")

    def bool_var(self, name: str) -> Any:
        return self.int_var(0, 1, name)

    def total(self, terms: list[Any]) -> Any:
        if self.backend is Backend.ORTOOLS:
            return self.m.Sum(terms) if terms else 0
        return self._pulp.lpSum(terms)

    def add(self, constraint: Any, name: str) -> None:
        self.n_cons += 1
        if self.backend is Backend.ORTOOLS:
            self.m.Add(constraint, name)
        else:
            self.m += constraint, name

    def set_objective(self, expr: Any, maximize: bool) -> None:
        if self.backend is Backend.ORTOOLS:
            (self.m.Maximize if maximize else self.m.Minimize)(expr)
        else:
            self.m.sense = self._pulp.LpMaximize if maximize else self._pulp.LpMinimize
            self.m.setObjective(expr)

    def solve(self, time_limit_s: float, mip_gap: float,
              warm_start: bool = False) -> tuple[Status, float | None, float | None]:
        """(status, objective, best bound). ``warm_start``: the variables hold a feasible answer
        (the first pass's, in the tie-breaking pass) for the solver to start from (CBC; HiGHS
        through OR-Tools' wrapper takes no start)."""
        if self.backend is Backend.ORTOOLS:
            self.m.SetTimeLimit(int(max(1.0, time_limit_s) * 1000))
            params = self._pywraplp.MPSolverParameters()
            params.SetDoubleParam(params.RELATIVE_MIP_GAP, mip_gap)
            # OR-Tools' HiGHS wrapper does not pass RELATIVE_MIP_GAP on (ortools 9.15), so HiGHS
            # stopped at its own default, 1e-4, and called that optimal: llama2_70b_pretrain's
            # first pass took a plan $97 (8e-5) dearer than the optimum CBC found. HiGHS's own option
            # carries the gap (an unknown option fails the solve, so a renamed one cannot pass unseen)
            self.m.SetSolverSpecificParametersAsString(f"mip_rel_gap={mip_gap!r}")
            with _quiet_stdout():
                code = self.m.Solve(params)
            S = self._pywraplp.Solver
            if code == S.OPTIMAL:
                status = Status.OPTIMAL
            elif code == S.FEASIBLE:
                status = Status.FEASIBLE
            elif code == S.INFEASIBLE:
                return Status.INFEASIBLE, None, None
            elif code == S.NOT_SOLVED:
                return Status.NO_SOLUTION, None, None
            else:
                raise SolverError(f"{ORTOOLS_ENGINE} stopped with result code {code} (unbounded or abnormal).")
            return status, self.m.Objective().Value(), self.m.Objective().BestBound()
        pulp = self._pulp
        # From a cold start, CBC's primal heuristics cost most of its time on these programs, whose
        # optimum branching finds anyway (pretrain_finetune_serve: 74 s with them, 9 s without, the
        # same optimum; benchmarks/solve_times.py); from a warm start they improve the answer given.
        with tempfile.TemporaryDirectory(prefix="gpuopt-cbc-", ignore_cleanup_errors=True) as folder:
            log = Path(folder) / "cbc.log"  # CBC's summary holds the best bound PuLP does not return
            solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(math.ceil(time_limit_s))), gapRel=mip_gap,
                                       threads=1, warmStart=warm_start, logPath=str(log),
                                       options=[] if warm_start else ["heuristicsOnOff off"])
            self.m.solve(solver)
            summary = log.read_text(errors="replace") if log.exists() else ""
        if self.m.status == pulp.LpStatusInfeasible:
            return Status.INFEASIBLE, None, None
        if self.m.sol_status == pulp.LpSolutionOptimal:
            status = Status.OPTIMAL
        elif self.m.sol_status == pulp.LpSolutionIntegerFeasible:
            status = Status.FEASIBLE
        elif self.m.status == pulp.LpStatusNotSolved or self.m.sol_status == pulp.LpSolutionNoSolutionFound:
            return Status.NO_SOLUTION, None, None
        else:
            raise SolverError(f"CBC stopped with status {pulp.LpStatus[self.m.status]}.")
        value = pulp.value(self.m.objective)
        bound = cbc_bound(summary) if status is Status.FEASIBLE else None
        # CBC solves the program PuLP writes, whose objective leaves out its constant term
        return status, value, None if bound is None else bound + getattr(self.m.objective, "constant", 0.0)

    def value(self, var: Any) -> float:
        if self.backend is Backend.ORTOOLS:
            solved: float = var.solution_value()
            return solved
        return var.value() or 0.0
