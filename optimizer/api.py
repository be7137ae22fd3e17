"""gpuopt's Python API: what the ``gpuopt`` command calls, and what a notebook imports.

    import optimizer as go

    problem = go.load_problem("problems/lab_budget.yaml")   # validated, at its price book
    answer = go.recommend(problem)                            # solved, re-checked, priced
    answer.to_dict()["objective"]                             # as `gpuopt solve --format json`
    answer.to_frame()                                         # the bill of materials (pandas)
    print(go.render(answer, "markdown"))

A problem carries the catalog at its prices (``problem.catalog``), so every later call prices it
the same way the command line does. Errors are ``go.GpuoptError`` and its subclasses
(``ProblemError``, ``CatalogError``, ``InfeasibleError`` with ``.hints``, ``SolverError``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from optimizer.catalog import Catalog, default_root
from optimizer.catalog import load_catalog as _load_catalog
from optimizer.errors import CatalogError, GpuoptError, InfeasibleError, ProblemError, SolverError, suggest
from optimizer.estimate import Estimate
from optimizer.estimate import estimate_serve as _estimate_serve
from optimizer.estimate import estimate_train as _estimate_train
from optimizer.milp import MilpSolution
from optimizer.milp import solve as _solve
from optimizer.plans import PlanTable, enumerate_candidates
from optimizer.problem import Problem, ServeWorkload, TrainWorkload, load_priced, problem_from_data, with_prices
from optimizer.recommend import plan_table, targets_of
from optimizer.recommend import recommend as _recommend
from optimizer.results import Answer, Calibration, Comparison, Explained, GpuHoursTable, Plans, Sweep
from optimizer.tradeoffs.axes import Axis, default_axis, loosest, parse_axes
from optimizer.tradeoffs.compare import compare as _compare
from optimizer.tradeoffs.explain import explain as _explain
from optimizer.tradeoffs.explain import loosened, relaxed
from optimizer.tradeoffs.sweep import run_sweep
from optimizer.validation import parse_quantity

if TYPE_CHECKING:  # the calibration stage (scipy) loads when validate or fit is called
    from optimizer.calibration.write import Refit

__all__ = [
    "Answer", "Calibration", "Catalog", "CatalogError", "Comparison", "Estimate", "Explained", "GpuHoursTable",
    "GpuoptError", "InfeasibleError", "Plans", "Problem", "ProblemError", "ServeWorkload", "SolverError", "Sweep",
    "TrainWorkload",
    "catalog_entry", "compare", "estimate_serve", "estimate_train", "explain", "fit", "gpu_hours", "load_catalog",
    "load_problem", "parse_quantity", "plan", "problem_from_dict", "recommend", "render", "report", "solve",
    "sweep", "validate",
]


def load_catalog(path: Path | str | None = None) -> Catalog:
    """The hardware, network, price and efficiency catalogs (default: the ones shipped with gpuopt)."""
    return _load_catalog(Path(path) if path is not None else None)


CATALOG_KINDS = ("gpus", "servers", "fabrics", "nics", "switches", "cables", "links", "models", "offers", "regions")


def catalog_entry(catalog: Catalog, ident: str) -> tuple[str, dict[str, Any]]:
    """One catalog entry by id, as (kind, every field with its sources): for a GPU also how its
    efficiency is calibrated and the date of each spec's source."""
    for kind in CATALOG_KINDS:
        table = getattr(catalog, kind)
        if ident in table:
            data = table[ident].model_dump(mode="json")
            if kind == "gpus":
                data["efficiency"] = catalog.efficiency_status(ident)
                data["specs"] = {k: f"{v} ({catalog.spec_sources[v].date})" if v in catalog.spec_sources else v
                                 for k, v in data["specs"].items()}
            return kind[:-1], data
    everything = [i for k in CATALOG_KINDS for i in getattr(catalog, k)]
    raise CatalogError(f"no catalog entry '{ident}'.{suggest(ident, everything)} "
                       "To fix: see 'gpuopt catalog list --kind …'.")


def load_problem(path: Path | str, catalog: Catalog | None = None, prices: Iterable[str] = ()) -> Problem:
    """Read and validate a problem file. The result carries the catalog at its prices: the file's
    price book, then ``prices`` (``"ID=VALUE"`` as ``--price`` takes them), which win."""
    return load_priced(path, catalog if catalog is not None else load_catalog(), tuple(prices))[0]


def problem_from_dict(data: dict[str, Any], catalog: Catalog | None = None, prices: Iterable[str] = (),
                      name: str = "problem") -> Problem:
    """A problem given as a mapping, as a problem file would hold it; ``name`` labels it in messages."""
    base = catalog if catalog is not None else load_catalog()
    problem = problem_from_data(dict(data), Path(f"<{name}>"), base)
    return with_prices(problem, base, tuple(prices))


def _priced(problem: Problem) -> Catalog:
    """The catalog a problem was priced against (priced now if it was built without one)."""
    if problem.catalog is not None:
        return problem.catalog
    catalog = with_prices(problem, load_catalog()).catalog
    assert catalog is not None
    return catalog


def plan(problem: Problem) -> Plans:
    """The candidate plans (hardware group × parallelism) the MIP chooses from, after pruning."""
    return Plans(plan_table(problem, _priced(problem)), problem)


def solve(problem: Problem, plans: Plans | None = None, backend: str | None = None,
          time_limit_s: float | None = None) -> MilpSolution:
    """The MIP alone: its optimum over ``plans`` (enumerated if not given), not re-checked. Most
    callers want ``recommend``."""
    problem = problem.with_time_limit(time_limit_s)
    table = plans.table if plans is not None else plan(problem).table
    return _solve(table, targets_of(problem), backend or problem.solver.backend,
                  problem.solver.time_limit_s, problem.solver.mip_gap)


def recommend(problem: Problem, backend: str | None = None, time_limit_s: float | None = None,
              confidence: int | None = None, plans: Plans | None = None) -> Answer:
    """Solve, re-check the optimum with the performance model and price it (``gpuopt solve``).
    ``confidence`` (percent) plans so the targets hold with that probability. Raises
    InfeasibleError, with hints on what would make the problem feasible."""
    if confidence is not None:
        problem = replace(problem, confidence=int(confidence))
    catalog = _priced(problem)
    table: PlanTable | None = plans.table if plans is not None else None
    return Answer(_recommend(problem, catalog, backend, time_limit_s, table), catalog)


def _one_workload(problem: Problem, command: str) -> None:
    """Raise ProblemError if ``problem`` has several workloads, which ``command`` does not take."""
    if len(problem.workloads) > 1:
        raise ProblemError(f"{problem.path}: '{command}' works on a problem with one workload; this one has "
                           f"{len(problem.workloads)} ({', '.join(w.name for w in problem.workloads)}). To fix: run "
                           f"'gpuopt solve {problem.path}' for the shared plan, or give '{command}' a problem "
                           "file with one of them as its 'workload'.")


def explain(problem: Problem, backend: str | None = None, time_limit_s: float | None = None,
            plans: Plans | None = None) -> Explained:
    """Every GPU on its own, the limits that bind and what relaxing each is worth; for an
    infeasible problem, the smallest change that makes it feasible (``gpuopt explain``)."""
    _one_workload(problem, "explain")
    table = plans.table if plans is not None else None
    return Explained(_explain(problem, _priced(problem), backend, time_limit_s, table))


Progress = Callable[[Iterator[Any], int], Iterator[Any]]


def _axis_text(values: str | float | Iterable[float] | None) -> str | None:
    if values is None or isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return repr(float(values))
    return ",".join(repr(float(v)) for v in values)


def sweep(problem: Problem, budget: str | Iterable[float] | None = None, deadline: str | Iterable[float] | None = None,
          tokens: str | Iterable[float] | None = None, power: str | Iterable[float] | None = None,
          demand: str | Iterable[float] | None = None, prices: Iterable[str] = (), backend: str | None = None,
          time_limit_s: float | None = None, workers: int = 1, progress: Progress | None = None) -> Sweep:
    """Re-solve over a grid (``gpuopt sweep``). Each axis is text as the command takes it
    (``"100k:2M:20"``, ``"250k,500k"``) or numbers in USD, days, tokens, kW or output tokens/s."""
    _one_workload(problem, "sweep")
    problem = problem.with_time_limit(time_limit_s)
    catalog = _priced(problem)
    axes = parse_axes(problem, catalog, _axis_text(budget), _axis_text(deadline), _axis_text(tokens),
                      _axis_text(power), _axis_text(demand), tuple(prices))
    points = math.prod(len(a.values) for a in axes)
    if points > 10_000:
        raise ProblemError(f"the grid has {points:,} points. To fix: use fewer values per axis (at most 10,000 "
                           "points in all).")
    return Sweep(run_sweep(problem, catalog, axes, backend or problem.solver.backend,
                           problem.solver.time_limit_s, workers, progress))


def compare(model: str, workload: str = "both", gpus: int = 64, input_len: int = 512, output_len: int = 256,
            tpot_ms: float | None = None, catalog: Catalog | None = None) -> Comparison:
    """Every GPU side by side for one model: training tokens/s per GPU and per dollar, serving
    output tokens per dollar, and the least GPUs that hold the model (``gpuopt compare``)."""
    problem, rows = _compare(catalog or load_catalog(), model, workload, gpus, input_len, output_len, tpot_ms)
    return Comparison(problem, tuple(rows), workload, gpus, input_len, output_len)


def estimate_train(model: str, gpu: str, gpus: int, catalog: Catalog | None = None, **options: Any) -> Estimate:
    """One training configuration through the performance model (``gpuopt estimate train``).
    ``options``: tp, pp, micro_batch, global_batch, seq_len, recompute, sequence_parallel, zero,
    cp, ep, virtual_stages, precision, stack, server, fabric, tokens, memory_headroom."""
    return _estimate_train(catalog or load_catalog(), model, gpu, gpus, **options)


def estimate_serve(model: str, gpu: str, gpus: int, input_len: int, output_len: int,
                   catalog: Catalog | None = None, **options: Any) -> Estimate:
    """One serving group through the performance model (``gpuopt estimate serve``). ``options``:
    tp, pp, precision, engine, kv_precision, batch, concurrency, server, attention_dp, offline."""
    return _estimate_serve(catalog or load_catalog(), model, gpu, gpus, input_len, output_len, **options)


def validate(kind: str = "both", cv: str = "none", rows: bool = False, data: Path | str | None = None,
             catalog: Catalog | None = None, progress: Callable[[str, int, str], None] | None = None,
             workers: int = 1) -> Calibration:
    """The model against every published run it can express (``gpuopt validate``); ``cv="source"``
    predicts each source with a fit that never saw it, the fits spread over ``workers`` processes
    (the same figures with any number). ``progress(kind, k, source)`` is told of each."""
    from optimizer.calibration import crossval

    if kind not in ("training", "serving", "both") or cv not in ("none", "source"):
        raise ProblemError(f"validate(kind={kind!r}, cv={cv!r}): kind is 'training', 'serving' or 'both'; "
                           "cv is 'none' or 'source'.")
    cat = catalog or load_catalog()
    results = []
    for k in (("training", "serving") if kind == "both" else (kind,)):
        ds = crossval.load_dataset(k, cat, Path(data) if data is not None else None)
        if cv == "source":
            tell = (lambda i, source, k=k: progress(k, i, source)) if progress else None
            results.append(crossval.cross_validate(ds, cat, tell, workers))
        else:
            results.append(crossval.with_catalog(ds, cat))
    return Calibration(tuple(results), rows)


def gpu_hours(data: Path | str | None = None, catalog: Catalog | None = None) -> GpuHoursTable:
    """Predicted GPU-hours of published training runs beside the published totals."""
    from optimizer.calibration.data import default_data_dir
    from optimizer.tradeoffs.gpu_hours import gpu_hours as run

    path = Path(data) if data is not None else default_data_dir() / "gpu_hours.csv"
    return GpuHoursTable(tuple(run(path, catalog or load_catalog())))


def report(problem: Problem, sweep_points: int = 8, workers: int = 1, backend: str | None = None,
           time_limit_s: float | None = None, stage: Callable[[str], None] | None = None) -> str:
    """One self-contained HTML report: the recommendation, its bill of materials and costs, a
    trade-off sweep of ``sweep_points`` with its chart, and every GPU on its own (``gpuopt report``).
    ``stage(message)`` is told as each part starts."""
    from optimizer.tradeoffs.html import render_html
    from optimizer.tradeoffs.plots import sweep_png

    _one_workload(problem, "report")
    problem = problem.with_time_limit(time_limit_s)
    answer = recommend(problem, backend)
    if stage:
        stage("solved; explaining every GPU type")
    catalog = answer.catalog
    axes = [default_axis(problem, sweep_points)] if sweep_points else []
    wide = _shared_wide_table(problem, catalog, axes)
    explanation = _explain(problem, catalog, backend, None, answer.recommendation.table, wide)
    result = png = None
    if axes:
        if stage:
            stage(f"sweeping {sweep_points} points")
        result = run_sweep(problem, catalog, axes, backend or problem.solver.backend,
                           problem.solver.time_limit_s, workers, table=wide)
        png = sweep_png(result)
    return render_html(answer.to_dict(), result, png, explanation)


def _shared_wide_table(problem: Problem, catalog: Catalog, axes: list[Axis]) -> PlanTable | None:
    """One plan table for both the sweep and explain's relaxations, enumerated at limits at least
    as loose as either needs (the sweep's loosest point, the limits relaxed by explain's step): a
    plan table at looser limits holds every plan of a tighter one. None without a sweep, or when
    the sweep's loosest point changes prices (its table would not be this catalog's)."""
    if not axes:
        return None
    loose, loose_catalog = loosest(problem, catalog, axes)
    if loose_catalog is not catalog:
        return None
    return enumerate_candidates(loosened(loose, relaxed(problem)), catalog)


def fit(catalog_dir: Path | str | None = None, check: bool = False,
        progress: Callable[[str, int, str], None] | None = None, workers: int = 1) -> Refit:
    """Refit the efficiency parameters and bands from calibration/ into the catalog folder
    (``gpuopt fit``); ``check`` compares only; ``workers`` processes share the fits."""
    from optimizer.calibration.write import refit

    root = Path(catalog_dir) if catalog_dir is not None else default_root()
    return refit(load_catalog(catalog_dir), root, check, progress, workers)


class _Renderable(Protocol):
    def render(self, fmt: str = ...) -> str: ...


def render(result: _Renderable, fmt: str = "text") -> str:
    """Any result as the command line prints it: text, markdown (a recommendation), json or csv
    (a sweep or a validation), as each result type allows."""
    return result.render(fmt)
