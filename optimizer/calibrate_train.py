"""The training model against published runs (``calibration/training_runs.csv``).

Each row is compared by its own FLOP convention: model FLOPs utilisation (attention counted, no
recompute: llm-foundry, torchtitan) where the row gives MFU, else Megatron's TFLOP/s per GPU,
which counts the recomputed forward (hardware FLOPs), else tokens/s per GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from optimizer.calibrate import (
    Aliases,
    Comparison,
    Fit,
    Report,
    _float,
    _int,
    _Override,
    grid_search,
    load_aliases,
    percentile,
    read_rows,
)
from optimizer.catalog import Catalog
from optimizer.perf.specs import ModelSpec, TrainPlan
from optimizer.perf.train import train_step

TRAINING_COLUMNS = ("id", "model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab", "gpu",
                    "gpu_count", "tp", "pp", "dp", "cp", "global_batch_tokens_or_seqs", "micro_batch", "recompute",
                    "zero_stage", "precision", "achieved_tflops_per_gpu", "mfu_pct", "tokens_per_sec_per_gpu")


@dataclass(frozen=True)
class TrainingCase:
    model: ModelSpec
    gpu: str
    server: str
    fabric: str | None
    plan: TrainPlan
    metric: str  # mfu | tflops_per_gpu | tokens_per_s_per_gpu
    measured: float


def _zero(text: str) -> int | None:
    t = text.upper()
    if "FULL_SHARD" in t or "FSDP2" in t or t.startswith("3"):
        return 3
    if "SHARD_GRAD_OP" in t:
        return 2
    if t.strip() == "NONE":
        return 0
    return None


def _recompute(text: str) -> str | None:
    t = text.lower()
    for mode in ("full", "selective", "none"):
        if t.startswith(mode):
            return mode
    return None


def _model(row: dict[str, str], catalog: Catalog, aliases: Aliases) -> ModelSpec | str:
    preset = aliases.training_models.get(row["model"])
    if preset:
        spec = catalog.models[preset].spec()
        return spec
    shape = [_int(row[k]) for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")]
    if any(v is None for v in shape):
        return "model shape incomplete in the row (and no preset alias)"
    layers, hidden, heads, ffn, vocab, seq = shape
    kv = _int(row["kv_heads"]) or heads
    mlp = "swiglu" if "llama" in row["model"].lower() else "gelu"
    return ModelSpec(row["model"], layers, hidden, heads, kv, ffn, vocab, seq, mlp)


def training_case(row: dict[str, str], catalog: Catalog, aliases: Aliases) -> TrainingCase | str:
    """The configuration a row describes, or why it cannot be expressed."""
    if row["id"] in aliases.training_excluded:
        return aliases.training_excluded[row["id"]]
    place = aliases.training_gpus.get(row["gpu"])
    if place is None:
        return f"GPU '{row['gpu']}' is not mapped to a catalog part"
    model = _model(row, catalog, aliases)
    if isinstance(model, str):
        return model
    count = _int(row["gpu_count"])
    fix = aliases.training_overrides.get(row["id"], _Override())
    tp = fix.tp or _int(row["tp"]) or None
    pp = fix.pp or _int(row["pp"]) or None
    if count is None or tp is None or pp is None:
        return "GPU count or TP/PP split not given"
    cp = _int(row["cp"]) or 1
    if count % (tp * pp * cp):
        return f"{count} GPUs is not a multiple of TP {tp} x PP {pp} x CP {cp}"
    dp = count // (tp * pp * cp)
    mb = _int(row["micro_batch"])
    match = re.match(r"\s*(\d+)\s*seqs", row["global_batch_tokens_or_seqs"])
    if mb is None or match is None:
        return "micro-batch or global batch not given"
    gb = int(match.group(1))
    if gb % (mb * dp):
        return f"global batch {gb} is not a multiple of micro-batch {mb} x DP {dp}"
    recompute, zero = _recompute(row["recompute"]), _zero(row["zero_stage"])
    if recompute is None or zero is None:
        return f"recompute '{row['recompute']}' or sharding '{row['zero_stage']}' not modelled"
    precision = "fp8" if re.search(r"fp8|float8", row["precision"], re.IGNORECASE) else "bf16"
    seq = _int(row["seq_len"]) or model.seq_len
    plan = TrainPlan(tp=tp, pp=pp, dp=dp, micro_batch=mb, num_micro_batches=gb // (mb * dp), recompute=recompute,
                     sequence_parallel=tp > 1, zero=zero, precision=precision, seq_len=seq, cp=cp,
                     flash_attention=fix.flash_attention if fix.flash_attention is not None else True)
    server = catalog.servers[place.server]
    fabric = place.fabric if count > server.slots else None
    for metric, column, scale in (("mfu", "mfu_pct", 0.01), ("tflops_per_gpu", "achieved_tflops_per_gpu", 1.0),
                                  ("tokens_per_s_per_gpu", "tokens_per_sec_per_gpu", 1.0)):
        value = _float(row[column])
        if value:
            return TrainingCase(model, place.gpu, place.server, fabric, plan, metric, value * scale)
    return "no measured figure in the row"


def validate_training(path: Path, catalog: Catalog, aliases_path: Path) -> Report:
    aliases = load_aliases(aliases_path)
    comparisons, skipped = [], []
    for row in read_rows(path, TRAINING_COLUMNS):
        case = training_case(row, catalog, aliases)
        if isinstance(case, str):
            skipped.append((row["id"], case))
            continue
        r = train_step(case.model, catalog.hardware(case.gpu, case.server, case.fabric), case.plan,
                       catalog.efficiency)
        if not r.fits:
            skipped.append((row["id"], f"the model says it does not fit ({r.memory.total / 1e9:,.1f} GB per GPU "
                                       f"of {r.memory_capacity / 1e9:,.0f})"))
            continue
        predicted = {"mfu": r.mfu, "tflops_per_gpu": r.hardware_flops_per_gpu / 1e12,
                     "tokens_per_s_per_gpu": r.tokens_per_s / case.plan.gpus}[case.metric]
        config = (f"{case.model.name} on {case.plan.gpus} x {case.gpu}: {case.plan.describe()}, "
                  f"seq {case.plan.seq_len}")
        comparisons.append(Comparison(row["id"], config, case.metric, case.measured, predicted))
    return Report(str(path), tuple(comparisons), tuple(skipped))


# --- fitting ------------------------------------------------------------------------------
TRAINING_MEDIAN_TARGET = 0.05  # issue 4: median absolute error on TFLOP/s per GPU (or MFU)
TRAINING_P90_TARGET = 0.15
# Each parameter has a physical meaning; the grid is what the fit tries.
TRAINING_GRID: dict[str, tuple[float, ...]] = {
    "a100_gemm": (0.78, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90),  # A100 GEMMs, fraction of dense peak
    "h100_gemm": (0.60, 0.62, 0.64, 0.66, 0.68, 0.70, 0.72, 0.74),  # H100 GEMMs, fraction of dense peak
    "elementwise_bytes": (250, 300, 350, 400, 450, 500, 550),  # bytes per token-layer per hidden unit
    "attention_kernel": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),  # attention kernels vs GEMMs
    "dp_overlap": (0.3, 0.5, 0.8),  # data-parallel traffic hidden behind the backward pass
}


def apply_training(catalog: Catalog, params: dict[str, float]) -> Catalog:
    """The catalog with fitted training parameters (GPUs that say same_as follow their reference)."""
    from dataclasses import replace

    from optimizer.catalog import resolve_same_as

    gpus = dict(catalog.gpus)
    for gid, key in (("a100-sxm-80gb", "a100_gemm"), ("h100-sxm", "h100_gemm")):
        eff = gpus[gid].matmul_efficiency.model_copy(update={"bf16": params[key], "fp16": params[key]
                                                             if gpus[gid].fp16_tflops else None})
        gpus[gid] = gpus[gid].model_copy(update={"matmul_efficiency": eff})
    eff = replace(catalog.efficiency, elementwise_bytes=params["elementwise_bytes"],
                  attention_kernel=params["attention_kernel"], dp_overlap=params["dp_overlap"])
    return resolve_same_as(replace(catalog, gpus=gpus, efficiency=eff))


def _training_cases(path: Path, catalog: Catalog, aliases_path: Path) -> list[TrainingCase]:
    aliases = load_aliases(aliases_path)
    cases = []
    for row in read_rows(path, TRAINING_COLUMNS):
        case = training_case(row, catalog, aliases)
        if not isinstance(case, str):
            cases.append(case)
    return cases


def _training_errors(catalog: Catalog, cases: list[TrainingCase]) -> list[float]:
    errs = []
    for case in cases:
        r = train_step(case.model, catalog.hardware(case.gpu, case.server, case.fabric), case.plan, catalog.efficiency)
        if r.fits:
            predicted = {"mfu": r.mfu, "tflops_per_gpu": r.hardware_flops_per_gpu / 1e12,
                         "tokens_per_s_per_gpu": r.tokens_per_s / case.plan.gpus}[case.metric]
            errs.append(abs(predicted / case.measured - 1))
    return errs


def fit_training(path: Path, catalog: Catalog, aliases_path: Path,
                 grid: dict[str, tuple[float, ...]] | None = None) -> Fit:
    """Whole-grid search over the training parameters (``calibrate.grid_search``). Deterministic."""
    import statistics

    cases = _training_cases(path, catalog, aliases_path)

    def score(trial: dict[str, float]) -> tuple[float, float, int]:
        errs = _training_errors(apply_training(catalog, trial), cases)
        return statistics.median(errs), percentile(errs, 90), len(errs)

    return grid_search(grid or TRAINING_GRID, score, TRAINING_MEDIAN_TARGET)
