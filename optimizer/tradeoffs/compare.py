"""Every GPU side by side for one model: the performance-per-dollar view buyers use, computed by
gpuopt's own model instead of spec sheets.

Training: the fastest plan on a reference cluster of N GPUs of each type (the planner's
templates, each re-evaluated exactly at that size), its tokens/s per GPU, MFU and tokens/s per
$1k of hardware. Serving: the replica type with the most output tokens per dollar of TCO over
the horizon, running flat out. Memory: the least GPUs that hold the model for each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from optimizer.catalog import Catalog, with_used_prices
from optimizer.milp import group_costs, purchase
from optimizer.perf.train import train_step
from optimizer.plans import enumerate_candidates, licence_reason
from optimizer.problem import Problem, problem_from_data, resolve_model
from optimizer.recommend import HOURS_PER_YEAR, opex_per_watt


@dataclass(frozen=True)
class TrainFigure:
    plan: str
    server: str
    network: str
    tokens_per_s: float
    mfu: float
    capex: float
    power_w: float
    min_gpus: int  # fewest GPUs of any template that fits the model

    def per_gpu(self, gpus: int) -> float:
        return self.tokens_per_s / gpus


@dataclass(frozen=True)
class ServeFigure:
    plan: str
    server: str
    output_tokens_per_s: float  # one replica
    gpus: int  # per replica
    tco: float  # the replica's share of hardware plus its electricity over the horizon
    min_gpus: int

    @property
    def tokens_per_usd(self) -> float:
        return 0.0 if self.tco <= 0 else self.output_tokens_per_s / self.tco


@dataclass(frozen=True)
class GpuComparison:
    gpu: str
    memory_gb: float
    price_usd: float
    datacenter_ok: bool
    train: TrainFigure | None
    train_reason: str
    serve: ServeFigure | None
    serve_reason: str
    price_condition: str = "new"  # "used": no longer sold new, priced at its used-market price


def _problem(catalog: Catalog, model: str, kind: str, gpus: int, input_len: int, output_len: int,
             tpot_ms: float | None) -> Problem:
    """A synthetic problem that lets every GPU in (licence is reported, not enforced)."""
    where = Path("gpuopt compare")  # messages name the option; a model file is read relative to the cwd
    resolve_model(model, catalog, where, "--model")
    # GPUs at their purchase prices, per $1k bought: those no longer sold new at their used ones
    data: dict[str, Any] = {"schema_version": 1, "name": f"compare-{kind}", "objective": "min_cost",
                            "site": {"datacenter": False}, "hardware": {"max_gpus": gpus, "allow_used": True},
                            "procurement": {"rent": False}}
    if kind == "train":
        data.update(workload={"kind": "train", "model": model, "tokens": "1T"}, deadline_days=30)
    else:
        cls = {"name": "compare", "input_len": input_len, "output_len": output_len, "output_tokens_per_s": 1000}
        if tpot_ms is not None:
            cls["tpot_ms"] = tpot_ms
        data.update(workload={"kind": "serve", "model": model, "classes": [cls]})
    return problem_from_data(data, where, catalog)


def _train_figures(problem: Problem, catalog: Catalog, gpus: int) -> tuple[dict[str, TrainFigure], dict[str, str]]:
    table = enumerate_candidates(problem, catalog)
    w = problem.training
    assert w is not None  # _problem(kind="train") built it
    best: dict[str, tuple[tuple[float, float], TrainFigure]] = {}  # ranked by (tokens/s, -capex); first key wins
    least: dict[str, int] = {}
    for c in table.candidates:
        g = table.groups[c.group]
        least[g.gpu] = min(least.get(g.gpu, 1 << 30), c.gpus_per_replica * c.dp_min)
        if gpus % c.gpus_per_replica or not c.dp_min <= gpus // c.gpus_per_replica <= c.dp_max:
            continue
        plan = replace(c.plan, dp=gpus // c.gpus_per_replica * c.plan.ep)
        result = train_step(w.model, catalog.hardware(g.gpu, g.server, g.fabric), plan,
                            catalog.train_params(g.gpu, w.precision, w.stack),
                            catalog.efficiency.reserved_memory, problem.memory_headroom)
        need = purchase(g, gpus)
        capex, _, watts = group_costs(g, need)
        rank = (result.tokens_per_s, -capex)
        if g.gpu not in best or rank > best[g.gpu][0]:
            best[g.gpu] = rank, TrainFigure(plan.describe(), g.server, g.fabric or "-", result.tokens_per_s,
                                            result.mfu, capex, watts, 0)
    out = {gpu: replace(fig, min_gpus=least[gpu]) for gpu, (_, fig) in best.items()}
    reasons = dict(table.gpu_reasons)
    for gpu in least:
        if gpu not in out:
            reasons[gpu] = f"no plan uses exactly {gpus} GPUs (fits from {least[gpu]}); try --gpus {least[gpu]}"
    return out, reasons


def _serve_figures(problem: Problem, catalog: Catalog) -> tuple[dict[str, ServeFigure], dict[str, str]]:
    table = enumerate_candidates(problem, catalog)
    per_watt = opex_per_watt(problem)
    maintenance = problem.maintenance_per_year * problem.horizon_years
    out: dict[str, ServeFigure] = {}
    least: dict[str, int] = {}
    for r in table.serving:
        g = table.groups[r.group]
        least[g.gpu] = min(least.get(g.gpu, 1 << 30), r.gpus_per_replica)
        n = r.gpus_per_replica
        share = n / g.slots  # the replica's share of its server
        value = n * g.gpu_usd + share * g.server_usd
        tco = value * (1 + maintenance) + per_watt * (n * g.gpu_w + share * g.server_w)
        fig = ServeFigure(f"TP{r.plan.tp} PP{r.plan.pp} {r.plan.precision} batch {r.plan.batch}", g.server,
                          r.tokens_per_s, n, tco, 0)
        if g.gpu not in out or fig.tokens_per_usd > out[g.gpu].tokens_per_usd:
            out[g.gpu] = fig
    return {k: replace(v, min_gpus=least[k]) for k, v in out.items()}, dict(table.gpu_reasons)


def compare(catalog: Catalog, model: str, workload: str = "both", gpus: int = 64, input_len: int = 512,
            output_len: int = 256, tpot_ms: float | None = None) -> tuple[Problem, list[GpuComparison]]:
    """One row per catalog GPU, in catalog id order; GPUs no longer sold new at their used prices."""
    catalog = with_used_prices(catalog, end_of_life_only=True)
    base = _problem(catalog, model, "train" if workload != "serve" else "serve", gpus, input_len, output_len,
                    tpot_ms)
    train, train_why = _train_figures(base, catalog, gpus) if workload != "serve" else ({}, {})
    serve: dict[str, ServeFigure] = {}
    serve_why: dict[str, str] = {}
    if workload != "train":
        sp = _problem(catalog, model, "serve", gpus, input_len, output_len, tpot_ms)
        serve, serve_why = _serve_figures(sp, catalog)
        base = base if workload == "both" else sp
    strict = replace(base, datacenter=True)
    rows = []
    for gid, g in sorted(catalog.gpus.items()):
        # only purchasable GPUs are compared; the others are in the catalog for calibration
        skipped = "not compared" if g.purchasable else "not compared: in the catalog for calibration only"
        rows.append(GpuComparison(gid, g.memory_gb, g.price.usd, licence_reason(strict, catalog, gid) is None,
                                  train.get(gid), train_why.get(gid, skipped),
                                  serve.get(gid), serve_why.get(gid, skipped), g.price.condition))
    return base, rows


def seconds(problem: Problem) -> float:
    return problem.horizon_years * HOURS_PER_YEAR * 3600


def to_records(problem: Problem, rows: list[GpuComparison], gpus: int) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        rec: dict[str, Any] = {"gpu": r.gpu, "memory_gb": r.memory_gb, "gpu_price_usd": r.price_usd,
                               "gpu_price_condition": r.price_condition,
                               "datacenter_licence": r.datacenter_ok}
        if r.train is not None:
            t = r.train
            rec.update(train_plan=t.plan, train_server=t.server, train_network=t.network,
                       train_tokens_per_s_per_gpu=t.per_gpu(gpus), train_mfu=t.mfu,
                       train_tokens_per_s_per_kusd=t.tokens_per_s / t.capex * 1e3, train_capex_usd=t.capex,
                       train_min_gpus=t.min_gpus)
        else:
            rec["train_reason"] = r.train_reason
        if r.serve is not None:
            s = r.serve
            rec.update(serve_plan=s.plan, serve_server=s.server,
                       serve_output_tokens_per_s_per_gpu=s.output_tokens_per_s / s.gpus,
                       serve_million_tokens_per_usd=s.tokens_per_usd * seconds(problem) / 1e6,
                       serve_min_gpus=s.min_gpus)
        else:
            rec["serve_reason"] = r.serve_reason
        out.append(rec)
    return out


def _id_width(rows: list[GpuComparison]) -> int:
    """The id column: the longest GPU id, its licence mark and a space."""
    return max((len(r.gpu) for r in rows), default=3) + 2


def _ranked(rows: list[GpuComparison], figure, reason, rank, cells) -> list[str]:
    """One line per GPU, best ``rank`` first; a GPU without a figure shows its reason."""
    out = []
    for r in sorted(rows, key=lambda r: (-rank(figure(r)) if figure(r) else 0.0, r.gpu)):
        head = f"  {r.gpu + (' ' if r.datacenter_ok else '*'):<{_id_width(rows)}}{r.memory_gb:>8,.0f}"
        out.append(head + (cells(figure(r)) if figure(r) else f"  {reason(r)}"))
    return out


def render_text(problem: Problem, rows: list[GpuComparison], workload: str, gpus: int, input_len: int,
                output_len: int) -> str:
    lines = [f"gpuopt compare: {problem.workload.model_id}, every GPU in the catalog (new prices as listed, used ones "
             "for GPUs no longer sold new; * = GeForce licence forbids data centres)"]
    if workload != "serve":
        lines += ["", f"Training on {gpus} GPUs (fastest plan; tokens/s per $1k of GPUs, servers and network):",
                  f"  {'gpu':<{_id_width(rows)}}{'mem GiB':>8}{'tok/s/GPU':>11}{'MFU':>7}{'tok/s per $1k':>15}"
                  f"{'fits from':>11}  plan"]
        lines += _ranked(rows, lambda r: r.train, lambda r: r.train_reason, lambda t: t.tokens_per_s / t.capex,
                         lambda t: f"{t.per_gpu(gpus):>11,.0f}{t.mfu:>7.0%}{t.tokens_per_s / t.capex * 1e3:>15,.2f}"
                                   f"{t.min_gpus:>11}  {t.plan} in {t.server}"
                                   f"{', ' + t.network if t.network != '-' else ''}")
    if workload != "train":
        lines += ["", f"Serving {input_len} in / {output_len} out, flat out (output tokens per $ of TCO over "
                  f"{problem.horizon_years:g} years, electricity at ${problem.electricity_usd_per_kwh:g}/kWh):",
                  f"  {'gpu':<{_id_width(rows)}}{'mem GiB':>8}{'tok/s/GPU':>11}{'M tok per $':>13}{'fits on':>9}"
                  "  replica"]
        lines += _ranked(rows, lambda r: r.serve, lambda r: r.serve_reason, lambda f: f.tokens_per_usd,
                         lambda f: f"{f.output_tokens_per_s / f.gpus:>11,.0f}"
                                   f"{f.tokens_per_usd * seconds(problem) / 1e6:>13,.2f}{f.min_gpus:>9}"
                                   f"  {f.plan} in {f.server}")
    return "\n".join(lines) + "\n"
