"""Training rows as model inputs: each published run becomes a configuration and a measured figure.

A row is compared by its own convention: MFU against the peak its source divides by, achieved
TFLOP/s per GPU as its source counts them (model FLOPs, or hardware FLOPs that include the
recomputed forward, as Megatron-LM 2021 does), or tokens per second per GPU. Facts a row leaves
out come from its source's text (``calibration/sources.yaml``); a row the model cannot express is
listed with the reason, never dropped silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimizer.calibration.data import (
    Aliases,
    Source,
    claimed,
    collect_cases,
    measured_value,
    to_int,
)
from optimizer.catalog import Catalog
from optimizer.perf.specs import Hardware, ModelSpec, Precision, TrainPlan, as_precision
from optimizer.perf.train import TrainTerms, train_terms

# what a row is compared on, first found first: tokens/s per GPU is measured, where MFU and TFLOP/s
# are derived with the source's own FLOP formula (recomputation counted or not, MoE and attention
# FLOPs counted its own way), which the model would otherwise have to match as well
METRICS = (("tokens_per_s_per_gpu", "tokens_per_sec_per_gpu", 1.0), ("mfu", "mfu_pct", 0.01),
           ("tflops_per_gpu", "achieved_tflops_per_gpu", 1.0))


@dataclass(frozen=True)
class TrainingCase:
    row: str
    source: str
    stack: str
    family: str
    precision: str
    regime: str
    config: str
    model: ModelSpec
    hw: Hardware
    plan: TrainPlan
    metric: str
    measured: float
    terms: TrainTerms
    scale: float  # predicted metric = scale / step time

    @property
    def gpu(self) -> str:
        return self.hw.device.name


def regime(plan: TrainPlan, model: ModelSpec, hw: Hardware) -> str:
    """FIDELITY.md's training regimes: layout (FSDP/ZeRO only, TP+DP, TP+PP+DP, MoE with EP) and
    scale (one server, 2-64 servers, more)."""
    if model.moe:
        layout = "moe"
    elif plan.pp > 1:
        layout = "tp+pp+dp" if plan.tp > 1 else "pp+dp"
    elif plan.tp > 1 or plan.cp > 1:
        layout = "tp+dp"
    else:
        layout = "fsdp/zero" if plan.zero >= 1 else "dp"
    nodes = math.ceil(plan.gpus / hw.gpus_per_node)
    scale = "1 server" if nodes <= 1 else ("2-64 servers" if nodes <= 64 else ">64 servers")
    return f"{layout}, {scale}"


def _zero(text: str) -> int | None:
    t = text.upper()
    if "NOT STATED" in t or "FSDP=0" in t:
        return None  # the source's default (its `assume`)
    if any(k in t for k in ("FULL_SHARD", "FSDP", "ZERO-3", "ZERO3")) or t.startswith("3"):
        return 3
    if "SHARD_GRAD_OP" in t or "ZERO-2" in t or t.startswith("2"):
        return 2
    if any(k in t for k in ("DISTRIBUTED OPTIMIZER", "DISTRIBUTEDOPTIMIZER", "ZERO-1", "ZERO1", "ZERO_1")) \
            or t.startswith("1"):
        return 1
    if t.strip() in ("NONE", "0", "DDP"):
        return 0
    return None


def _recompute(text: str) -> str | None:
    t = text.lower().strip()
    for mode in ("full", "selective", "none"):
        if t.startswith(mode):
            return mode
    return None


def _precision(text: str, aliases: Aliases) -> Precision:
    if text in aliases.training_precisions:
        return aliases.training_precisions[text]
    t = text.lower()
    if re.search(r"nvfp4|mxfp4|\bfp4", t):
        return "fp4"
    if re.search(r"fp8|float8", t):
        return "fp8"
    if "bf16" in t or "bfloat16" in t or not t:
        return "bf16"
    return "fp16" if "fp16" in t or "16-bit" in t else "bf16"


def _model(row: dict[str, str], facts: dict[str, Any], catalog: Catalog, aliases: Aliases) -> ModelSpec | str:
    preset = facts.get("model") or aliases.models.get(row["model"])
    if preset:
        if preset not in catalog.models:
            return f"model preset '{preset}' is not in the catalog"
        return catalog.models[preset].spec()
    shape = {k: to_int(row[k]) or facts.get(k) for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")}
    if shape["ffn_hidden"] is None and shape["hidden"] and facts.get("ffn_mult"):
        shape["ffn_hidden"] = int(shape["hidden"] * facts["ffn_mult"])
    missing = [k for k, v in shape.items() if v is None]
    if missing:
        return f"model shape incomplete ({', '.join(missing)} not given) and no preset alias"
    kv = to_int(row["kv_heads"]) or facts.get("kv_heads") or shape["heads"] or 0
    shape["heads"] = shape["heads"] or facts.get("heads")
    mlp = facts.get("mlp") or ("swiglu" if "llama" in row["model"].lower() else "gelu")
    given = {k: int(v) for k, v in shape.items() if v is not None}  # every one, as checked above
    return ModelSpec(name=row["model"], layers=given["layers"], hidden=given["hidden"], heads=given["heads"],
                     kv_heads=int(kv), ffn_hidden=given["ffn_hidden"], vocab=given["vocab"], seq_len=given["seq_len"],
                     mlp=mlp)


def notes_facts(notes: str) -> dict[str, Any]:
    """Layout facts a source's table gives that have no column (virtual pipeline stages, expert
    parallelism, FSDP), transcribed into the row's notes as ``VP=6``, ``EP=8``, ``FSDP=1``."""
    out: dict[str, Any] = {}
    if m := re.search(r"\bVP=(\d+)", notes):
        out["virtual_stages"] = int(m.group(1))
    if m := re.search(r"\bEP=(\d+)", notes):
        out["ep"] = int(m.group(1))
    if re.search(r"\bFSDP=1\b", notes):
        out["zero"] = 3
    return out


def _get(row: dict[str, str], facts: dict[str, Any], assume: dict[str, Any], key: str, column: str | None = None,
         parse=to_int) -> Any:
    """A fact: the source's text for this row, else the CSV cell, else the source's assumption."""
    if key in facts:
        return facts[key]
    value = parse(row[column]) if column and row.get(column, "").strip() else None
    return value if value is not None else assume.get(key)


def _global_batch(row: dict[str, str], facts: dict[str, Any], assume: dict[str, Any], seq: int) -> int | None:
    if "global_batch" in facts:
        return int(facts["global_batch"])
    text = row["global_batch_tokens_or_seqs"]
    if m := re.match(r"\s*([\d,]+)\s*(seqs|sequences|samples)", text):
        return int(m.group(1).replace(",", ""))
    if m := re.match(r"\s*([\d.]+)\s*M\s*tokens", text):
        unit = float(assume.get("token_million", 1e6))
        return round(float(m.group(1)) * unit / seq)
    return assume.get("global_batch")


def _layout(row, facts, assume, count: int | None) -> dict[str, int] | str:
    tp = _get(row, facts, assume, "tp", "tp") or 1
    pp = _get(row, facts, assume, "pp", "pp") or 1
    cp = _get(row, facts, assume, "cp", "cp") or 1
    dp = _get(row, facts, assume, "dp", "dp")
    if count is None and dp:
        count = tp * pp * cp * dp
    if count is None:
        return "GPU count not given"
    if count % (tp * pp * cp):
        return f"{count} GPUs is not a multiple of TP {tp} x PP {pp} x CP {cp}"
    return {"gpus": count, "tp": tp, "pp": pp, "cp": cp, "dp": count // (tp * pp * cp)}


def _leading_int(text: str) -> int | None:
    """The whole number a cell starts with ('4 (per GPU)' -> 4), if any."""
    m = re.match(r"\s*(\d+)", text)
    return to_int(m.group(1)) if m else None


def _plan(row, facts, assume, layout: dict[str, int], seq: int, aliases: Aliases,
          traits: Mapping[str, Any]) -> TrainPlan | str:
    """The row's plan; what the row and its source leave open comes from the stack's traits
    (``catalog.train_plan_traits``, as an estimate or a plan on that stack gets them)."""
    mb = _get(row, facts, assume, "micro_batch", "micro_batch",
              parse=_leading_int)
    gb = _global_batch(row, facts, assume, seq)
    if mb is None or gb is None:
        return "micro-batch or global batch not given"
    dp, ep = layout["dp"], int(_get(row, facts, assume, "ep") or 1)
    if gb % (mb * dp):
        return f"global batch {gb} is not a multiple of micro-batch {mb} x DP {dp}"
    recompute = _get(row, facts, assume, "recompute", "recompute", parse=_recompute)
    zero = _get(row, facts, assume, "zero", "zero_stage", parse=_zero)
    if recompute is None or zero is None:
        return f"recompute '{row['recompute']}' or sharding '{row['zero_stage']}' not modelled"
    given = facts.get("precision")
    try:
        precision = as_precision(given) if given else _precision(row["precision"] or str(assume.get("precision", "")),
                                                                 aliases)
    except ValueError as exc:  # a source's stated precision that is none of the training ones
        return str(exc)
    return TrainPlan(tp=layout["tp"], pp=layout["pp"], dp=dp, cp=layout["cp"], ep=ep, micro_batch=mb,
                     num_micro_batches=gb // (mb * dp), recompute=recompute, sequence_parallel=layout["tp"] > 1,
                     zero=zero, precision=precision, seq_len=seq,
                     virtual_stages=int(_get(row, facts, assume, "virtual_stages") or 1),
                     **{key: default if (stated := _get(row, facts, assume, key)) is None else type(default)(stated)
                        for key, default in traits.items()})


def _measured(row, facts, source: Source, terms: TrainTerms, plan: TrainPlan, hw: Hardware):
    """(metric, measured value, scale) with predicted = scale / step time."""
    wanted = facts.get("metric")
    for metric, column, unit in METRICS:
        value = measured_value(row[column])
        if not value or (wanted and metric != wanted):
            continue
        per_gpu_tokens = terms.tokens_per_step / plan.gpus
        if metric == "tokens_per_s_per_gpu":
            return metric, value * unit, per_gpu_tokens
        flops = terms.hardware_flops_per_token if source.tflops == "hardware" and metric == "tflops_per_gpu" \
            else terms.model_flops_per_token
        if metric == "tflops_per_gpu":
            return metric, value, per_gpu_tokens * flops / 1e12
        peak = hw.device.peak_of(plan.precision) if source.mfu_peak == "plan" else terms.peak_16bit
        return metric, value * unit, per_gpu_tokens * flops / peak
    return None


COUNT_COLUMNS = ("gpu_count", "tp", "pp", "dp", "cp", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len",
                 "vocab")


def training_case(row: dict[str, str], catalog: Catalog, aliases: Aliases, sources) -> TrainingCase | str:
    """A row as a configuration, or the reason the model cannot express it."""
    found = claimed(row, sources, COUNT_COLUMNS)
    if isinstance(found, str):
        return found
    source, facts = found
    assume = {**source.assume, **notes_facts(row.get("notes", ""))}
    place = aliases.gpus.get(facts.get("gpu") or row["gpu"])
    if place is None or place.gpu not in catalog.gpus:
        return f"GPU '{row['gpu']}' is not mapped to a catalog part (calibration/aliases.yaml)"
    model = _model(row, {**assume, **facts}, catalog, aliases)
    if isinstance(model, str):
        return model
    layout = _layout(row, facts, assume, _get(row, facts, assume, "gpus", "gpu_count"))
    if isinstance(layout, str):
        return layout
    seq = _get(row, facts, assume, "seq_len", "seq_len") or model.seq_len
    stack = catalog.stack("training", facts.get("stack") or source.stack, place.gpu).id
    plan = _plan(row, facts, assume, layout, seq, aliases, catalog.train_plan_traits(place.gpu, stack))
    if isinstance(plan, str):
        return plan
    servers = [s for s in catalog.servers_for(place.gpu) if place.server in (None, s.id)]
    if not servers:
        return f"no server in the catalog takes {place.gpu}"
    server = servers[0]
    fabric = place.fabric or (server.fabrics[0] if server.fabrics else None)
    hw = catalog.hardware(place.gpu, server.id, fabric if plan.gpus > server.slots else None)
    try:
        terms = train_terms(model, hw, plan)
    except ValueError as exc:
        return str(exc)
    measured = _measured(row, facts, source, terms, plan, hw)
    if measured is None:
        return "no measured figure in the row"
    metric, value, scale = measured
    config = f"{model.name} on {plan.gpus} x {place.gpu} [{stack}]: {plan.describe()}, seq {plan.seq_len}"
    return TrainingCase(row["id"], source.id, stack, catalog.gpus[place.gpu].family, plan.precision,
                        regime(plan, model, hw), config, model, hw, plan, metric, value, terms, scale)


def training_cases(catalog: Catalog, aliases: Aliases, sources, data_dir=None):
    """(cases, skipped) over every training row: skipped is (row id, source id, reason)."""
    return collect_cases("training", lambda row: training_case(row, catalog, aliases, sources), sources, data_dir)
