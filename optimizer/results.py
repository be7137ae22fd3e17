"""What the API returns: frozen records over each stage's result. ``to_dict()`` is what the CLI
prints with ``--format json``, ``render(fmt)`` what it prints in any format (byte for byte), and
tabular results come as pandas DataFrames with ``to_frame()``."""

from __future__ import annotations

import copy
import io
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optimizer.catalog import Catalog
from optimizer.errors import ProblemError
from optimizer.plans import PlanTable
from optimizer.problem import Problem
from optimizer.recommend import Recommendation
from optimizer.report import render as render_summary
from optimizer.report import summary, write_bom
from optimizer.tradeoffs.compare import GpuComparison, to_records
from optimizer.tradeoffs.compare import render_text as compare_text
from optimizer.tradeoffs.explain import Explanation
from optimizer.tradeoffs.explain import render_text as explain_text
from optimizer.tradeoffs.explain import to_json as explain_json
from optimizer.tradeoffs.gpu_hours import GpuHours
from optimizer.tradeoffs.gpu_hours import render as gpu_hours_text
from optimizer.tradeoffs.sweep import SweepResult, table_rows, to_csv
from optimizer.tradeoffs.sweep import render_text as sweep_text

if TYPE_CHECKING:  # pandas and the calibration stage (scipy) load when a frame or a validation is asked for
    import pandas as pd

    from optimizer.calibration.crossval import Validation


def _frame(records: Any) -> pd.DataFrame:
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame(records)
    return frame


def _read_csv(text: str) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(io.StringIO(text))


def _normalize(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.json_normalize(records)


def _formats(fmt: str, allowed: tuple[str, ...], what: str) -> None:
    if fmt not in allowed:
        raise ProblemError(f"format '{fmt}': {what} renders as {', '.join(allowed)}.")


def _json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


@dataclass(frozen=True, eq=False)
class Answer:
    """The recommended cluster, verified by the performance model and priced (``gpuopt solve``)."""

    recommendation: Recommendation
    catalog: Catalog  # at the problem's prices

    @cached_property
    def _summary(self) -> dict[str, Any]:
        return summary(self.recommendation, self.catalog)

    @property
    def problem(self) -> Problem:
        return self.recommendation.problem

    @property
    def objective(self) -> float:
        """The optimum's objective value (``to_dict()["objective"]`` also says its sense)."""
        return float(self._summary["objective"]["value"])

    def to_dict(self) -> dict[str, Any]:
        """What ``gpuopt solve --format json`` prints."""
        return copy.deepcopy(self._summary)

    def render(self, fmt: str = "text") -> str:
        """``text``, ``markdown`` or ``json``, as ``gpuopt solve --format`` prints it."""
        _formats(fmt, ("text", "markdown", "json"), "a recommendation")
        return render_summary(self._summary, fmt)

    def to_frame(self) -> pd.DataFrame:
        """The bill of materials, one row per line item."""
        return _frame(self._summary["bom"])

    def write_bom(self, path: Path | str) -> None:
        """The bill of materials as .csv, .xlsx, .json or .md (by the extension)."""
        write_bom(self._summary["bom"], Path(path))


@dataclass(frozen=True, eq=False)
class Explained:
    """Why the optimum is what it is: every GPU on its own, and what each limit is worth."""

    explanation: Explanation

    @property
    def feasible(self) -> bool:
        return self.explanation.best is not None

    def to_dict(self) -> dict[str, Any]:
        return explain_json(self.explanation)

    def render(self, fmt: str = "text") -> str:
        _formats(fmt, ("text", "json"), "an explanation")
        return _json(self.to_dict()) if fmt == "json" else explain_text(self.explanation)

    def to_frame(self) -> pd.DataFrame:
        """One row per catalog GPU: its best cluster alone, or why it is out."""
        return _normalize(self.to_dict()["gpus"])


@dataclass(frozen=True, eq=False)
class Sweep:
    """The optimum over a grid of budgets, deadlines, tokens, power caps, demands or prices."""

    result: SweepResult

    @property
    def violations(self) -> tuple[str, ...]:
        return self.result.violations

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.result.problem.name, "rows": table_rows(self.result),
                "violations": list(self.result.violations)}

    def render(self, fmt: str = "text") -> str:
        _formats(fmt, ("text", "csv", "json"), "a sweep")
        if fmt == "csv":
            return to_csv(self.result)
        return _json(self.to_dict()) if fmt == "json" else sweep_text(self.result)

    def to_frame(self) -> pd.DataFrame:
        """One row per grid point, with typed columns."""
        return _read_csv(to_csv(self.result))

    def write_png(self, path: Path | str) -> None:
        from optimizer.tradeoffs.plots import write_png

        write_png(self.result, Path(path))


@dataclass(frozen=True, eq=False)
class Comparison:
    """Every GPU side by side for one model (``gpuopt compare``)."""

    problem: Problem
    rows: tuple[GpuComparison, ...]
    workload: str
    gpus: int
    input_len: int
    output_len: int

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.problem.workload.model_id, "workload": self.workload, "reference_gpus": self.gpus,
                "gpus": to_records(self.problem, list(self.rows), self.gpus)}

    def render(self, fmt: str = "text") -> str:
        _formats(fmt, ("text", "json"), "a comparison")
        if fmt == "json":
            return _json(self.to_dict())
        return compare_text(self.problem, list(self.rows), self.workload, self.gpus, self.input_len,
                            self.output_len)

    def to_frame(self) -> pd.DataFrame:
        return _normalize(self.to_dict()["gpus"])


@dataclass(frozen=True, eq=False)
class Plans:
    """The candidate plans the MIP chooses from, after pruning (``go.plan``)."""

    table: PlanTable
    problem: Problem

    def to_frame(self) -> pd.DataFrame:
        """One row per training template or serving option: hardware, parallelism and rate."""
        rows = []
        for c in self.table.candidates:
            g = self.table.groups[c.group]
            rows.append({"kind": "train", "key": c.key, "workload": c.workload, "gpu": g.gpu, "server": g.server,
                         "fabric": g.fabric, "offer": g.offer, "plan": c.plan.describe(),
                         "gpus_per_replica": c.gpus_per_replica, "dp_min": c.dp_min, "dp_max": c.dp_max,
                         "tokens_per_s_per_replica": c.replica_tokens_per_s, "memory_gb": c.memory_gb})
        for v in self.table.serving:
            g = self.table.groups[v.group]
            rows.append({"kind": "serve", "key": v.key, "workload": v.workload, "gpu": g.gpu, "server": g.server,
                         "fabric": g.fabric, "offer": g.offer, "plan": f"TP{v.plan.tp} PP{v.plan.pp}",
                         "gpus_per_replica": v.gpus_per_replica, "request_class": v.demand,
                         "batch": v.plan.batch, "tokens_per_s_per_replica": v.tokens_per_s,
                         "ttft_s": v.ttft_s, "tpot_s": v.tpot_s, "memory_gb": v.memory_gb})
        return _frame(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.name, "plans": self.to_frame().to_dict("records"),
                "excluded_gpus": dict(sorted(self.table.gpu_reasons.items()))}


@dataclass(frozen=True, eq=False)
class Calibration:
    """Predicted against measured on published runs (``gpuopt validate``)."""

    validations: tuple[Validation, ...]
    rows: bool = False  # the text lists every row's comparison

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.render("json"))
        return data

    def render(self, fmt: str = "text") -> str:
        from optimizer.calibration import render as calibration_render

        _formats(fmt, ("text", "csv", "json"), "a validation")
        if fmt == "json":
            return calibration_render.to_json(list(self.validations))
        if fmt == "csv":
            return calibration_render.csv(list(self.validations))
        return calibration_render.text(list(self.validations), self.rows)

    def to_frame(self) -> pd.DataFrame:
        """One row per comparison of a published measurement with its prediction."""
        return _read_csv(self.render("csv"))


@dataclass(frozen=True, eq=False)
class GpuHoursTable:
    """Predicted GPU-hours of published training runs beside the published totals."""

    rows: tuple[GpuHours, ...]

    def render(self, fmt: str = "text") -> str:
        _formats(fmt, ("text",), "a GPU-hours table")
        return gpu_hours_text(list(self.rows))

    def to_frame(self) -> pd.DataFrame:
        from dataclasses import asdict

        return _frame([asdict(r) for r in self.rows])
