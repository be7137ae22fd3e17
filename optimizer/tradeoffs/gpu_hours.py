"""Sanity check: the GPU-hours gpuopt predicts for published training runs, beside the published totals.

For each row of ``calibration/gpu_hours.csv`` gpuopt plans the fastest run of that model on at
most that many GPUs of that type (the MIP over its own candidate plans), then converts the
predicted time to GPU-hours. The 90 % band comes from the calibration residuals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optimizer.calibration.data import read_rows
from optimizer.catalog import Catalog
from optimizer.catalog.records import train_regime
from optimizer.errors import ProblemError
from optimizer.problem import Problem, Search, SolverOptions, TrainWorkload
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.recommend import recommend

COLUMNS = ("model", "gpu", "gpus", "tokens", "published_gpu_hours", "global_batch_tokens")


@dataclass(frozen=True)
class GpuHours:
    model: str
    gpu: str
    gpus: int
    tokens: float
    published: float
    predicted: float
    band: tuple[float, float]
    plan: str

    @property
    def ratio(self) -> float:
        return self.predicted / self.published


def _problem(catalog: Catalog, row: dict[str, str], path: Path) -> Problem:
    model = catalog.models.get(row["model"])
    if model is None or row["gpu"] not in catalog.gpus:
        raise ProblemError(f"{path}: row '{row['model']}': unknown model or GPU id.")
    try:
        numbers = [float(row[k]) for k in ("gpus", "tokens", "published_gpu_hours", "global_batch_tokens")]
    except ValueError:
        raise ProblemError(f"{path}: row '{row['model']}': gpus, tokens, published_gpu_hours and "
                           "global_batch_tokens must be numbers.") from None
    if min(numbers) <= 0:
        raise ProblemError(f"{path}: row '{row['model']}': every number must be positive.")
    spec = model.spec()
    fac = catalog.facility
    return Problem(
        name=f"gpu-hours-{row['model']}", path=path, description="",
        workloads=(TrainWorkload(model=spec, model_id=row["model"], tokens=float(row["tokens"]), precision="bf16",
                                 seq_len=spec.seq_len, min_global_batch=1, deadline_s=None,
                                 max_global_batch=max(1, int(float(row["global_batch_tokens"]) // spec.seq_len))),),
        objective=Objective.MIN_TIME, budget_usd=1e15, budget_covers=BudgetCovers.CAPEX, datacenter=True,
        power_cap_w=None,
        electricity_usd_per_kwh=fac.electricity_usd_per_kwh.value, pue=fac.pue.datacenter.value,
        horizon_years=fac.amortisation_years.value, load_factor=fac.load_factor.value, gpus=(row["gpu"],),
        exclude_servers=(), exclude_fabrics=(), max_gpus=int(row["gpus"]),
        search=Search(pp=(1, 2, 4, 8, 16), micro_batch=(1, 2, 4), zero=(1, 3)),
        solver=SolverOptions(time_limit_s=120),
    )


def gpu_hours(path: Path, catalog: Catalog) -> list[GpuHours]:
    out = []
    for row in read_rows(path, COLUMNS):
        problem = _problem(catalog, row, path)
        rec = recommend(problem, catalog)
        band = catalog.band_for("train", None, (row["gpu"], "bf16"), regime=train_regime(problem.workload.model.moe))
        plan = rec.solution.candidate
        assert plan is not None  # recommend() raises unless a training plan was chosen
        used = plan.gpus_per_replica * rec.solution.dp  # units of ep replicas
        hours = used * rec.days * 24
        out.append(GpuHours(row["model"], row["gpu"], used, float(row["tokens"]), float(row["published_gpu_hours"]),
                            hours, (hours / band.ratio(95), hours / band.ratio(5)), plan.plan.describe()))
    return out


def render(rows: list[GpuHours]) -> str:
    lines = [f"{'model':<12} {'gpu':<14} {'gpus':>6} {'tokens':>7} {'published':>12} {'predicted':>12} "
             f"{'90 % band':>23} {'ratio':>6}  plan"]
    for r in rows:
        lines.append(f"{r.model:<12} {r.gpu:<14} {r.gpus:>6} {r.tokens:>7.3g} {r.published:>12,.0f} "
                     f"{r.predicted:>12,.0f} {r.band[0]:>11,.0f}-{r.band[1]:<11,.0f} {r.ratio:>6.2f}  {r.plan}")
    return "\n".join(lines) + "\n"
