"""The ``gpuopt`` command: thin click commands over the stages.

Exceptions become messages and exit codes only in ``cli_common.handle_errors``, which every
command here and in ``cli_tradeoffs`` wears: 0 success, 1 infeasible, 2 bad input (and solver
failures).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, Catalog, load_catalog
from optimizer.cli_common import catalog_option, handle_errors, price_option
from optimizer.errors import CatalogError, ProblemError, suggest
from optimizer.perf.specs import TrainPlan
from optimizer.perf.train import train_step


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuopt")
def main() -> None:
    """gpuopt: which GPU cluster to buy for your AI work, proven optimal.

    \b
    Examples:
      gpuopt solve problems/lab_budget.yaml
      gpuopt solve problems/llama2_70b_pretrain.yaml --format json --bom bom.xlsx
      gpuopt estimate train --model llama2-7b --gpu a100-sxm-80gb --gpus 8 --tp 1 --pp 1
      gpuopt estimate serve --model llama2-70b --gpu h100-sxm --gpus 8 --tp 8 --input-len 512 --output-len 256
      gpuopt catalog list
    """


@main.command()
@click.argument("problem_file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--bom", "bom_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the bill of materials; .csv, .xlsx, .json or .md by extension.")
@click.option("--solver", type=click.Choice(["ortools", "pulp"]), default=None,
              help="MIP backend (default: the problem's solver.backend, else ortools).")
@click.option("--time-limit", type=click.FloatRange(min=1), default=None, help="Seconds per MIP solve.")
@click.option("--confidence", type=click.Choice(["50", "75", "80", "90", "95"]), default=None,
              help="Plan so the deadline or demand holds with this probability (percent), from the model's "
                   "error on published runs; overrides the problem's 'confidence'.")
@price_option
@catalog_option
@handle_errors
def solve(problem_file: Path, fmt: str, bom_file: Path | None, solver: str | None, time_limit: float | None,
          confidence: str | None, prices: tuple[str, ...], catalog_dir: Path | None) -> None:
    """Find the optimal cluster for PROBLEM_FILE and print it.

    \b
    Example:
      gpuopt solve problems/lab_budget.yaml --format markdown --bom bom.csv
    """
    from optimizer.problem import load_priced
    from optimizer.recommend import recommend
    from optimizer.report import render, summary, write_bom

    if bom_file is not None and bom_file.suffix.lower() not in (".csv", ".xlsx", ".json", ".md"):
        raise ProblemError(f"--bom {bom_file}: unknown extension '{bom_file.suffix}'. "
                           "To fix: use .csv, .xlsx, .json or .md.")
    problem, catalog = load_priced(problem_file, load_catalog(catalog_dir), prices)
    if confidence is not None:
        from dataclasses import replace

        problem = replace(problem, confidence=int(confidence))
    rec = recommend(problem, catalog, solver, time_limit)
    result = summary(rec, catalog)
    click.echo(render(result, fmt), nl=False)
    if bom_file is not None:
        write_bom(result["bom"], bom_file)
        click.echo(f"bill of materials written to {bom_file}", err=True)


@main.group()
def estimate() -> None:
    """Predict one fixed configuration with the performance model."""


@estimate.command("train")
@click.option("--model", "model_ref", required=True, help="Preset id (llama2-7b, …) or a YAML file with the shape.")
@click.option("--gpu", "gpu_id", required=True, help="GPU id from the catalog (gpuopt catalog list).")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="Total GPUs (TP × PP × DP).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--global-batch", type=click.IntRange(min=1), default=None,
              help="Sequences per step (default: about 4M tokens, a multiple of DP × micro-batch).")
@click.option("--seq-len", type=click.IntRange(min=1), default=None, help="Default: the model's.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="selective", show_default=True)
@click.option("--sequence-parallel", is_flag=True, help="Shard LayerNorm/dropout activations over TP.")
@click.option("--zero", type=click.IntRange(0, 3), default=1, show_default=True)
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Context parallelism: each sequence split over CP GPUs (ring attention).")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Expert parallelism for MoE models: experts sharded over EP GPUs of the DP group.")
@click.option("--virtual-stages", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model chunks per GPU for the interleaved 1F1B schedule (needs --pp > 1).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8", "fp4"]), default="bf16", show_default=True)
@click.option("--stack", default=None, help="Training stack (catalogs/stacks.yaml: megatron-core, pytorch-fsdp, "
              "torchtitan, deepspeed, …); default: the mainstream one for the GPU's vendor.")
@click.option("--server", "server_id", default=None, help="Server id (default: the first that takes the GPU).")
@click.option("--fabric", "fabric_id", default=None, help="Fabric id between servers (default: the server's first).")
@click.option("--tokens", default=None, help="Training tokens, e.g. 1T or 2e12, to print days.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@catalog_option
@handle_errors
def estimate_train(model_ref: str, gpu_id: str, gpus: int, tp: int, pp: int, micro_batch: int,
                   global_batch: int | None, seq_len: int | None, recompute: str, sequence_parallel: bool,
                   zero: int, cp: int, ep: int, virtual_stages: int, precision: str, stack: str | None,
                   server_id: str | None, fabric_id: str | None,
                   tokens: str | None, fmt: str, catalog_dir: Path | None) -> None:
    """Memory, step time, tokens/s, TFLOP/s per GPU, MFU and days for one configuration.

    \b
    Example:
      gpuopt estimate train --model llama2-70b --gpu h100-sxm --gpus 1024 --tp 8 --pp 4 --tokens 2T
    """
    from optimizer.problem import parse_quantity

    try:  # a bad --tokens is bad input (exit 2), found before any work
        n_tokens = parse_quantity(tokens) if tokens is not None else None
    except ValueError as exc:
        raise ProblemError(f"--tokens {tokens!r}: {exc}. To fix: e.g. --tokens 2T or --tokens 2e12.") from None
    catalog = load_catalog(catalog_dir)
    model, server = _resolve(catalog, model_ref, gpu_id, server_id, min(gpus, tp * cp))
    replica = tp * pp * cp
    if gpus % replica:
        raise ProblemError(f"--gpus {gpus} is not a multiple of TP {tp} × PP {pp} × CP {cp} = {replica}. "
                           f"To fix: use --gpus {max(1, gpus // replica) * replica}.")
    dp = gpus // replica
    s = seq_len or model.seq_len
    per_step = dp * micro_batch
    # default: about 4M tokens per step, rounded to whole micro-batches on every replica
    gb = global_batch or max(1, round(4e6 / s / per_step)) * per_step
    if gb % per_step:
        raise ProblemError(f"--global-batch {gb} is not a multiple of DP {dp} × micro-batch {micro_batch}. "
                           f"To fix: use --global-batch {max(1, gb // (dp * micro_batch)) * dp * micro_batch}.")
    srv = catalog.servers[server]
    if tp > srv.slots:
        raise ProblemError(f"--tp {tp} exceeds the {srv.slots} GPUs of one {server}. "
                           "To fix: keep TP within a server.")
    fabric = None
    if gpus > srv.slots:
        fabric = _pick(catalog, "fabrics", fabric_id, list(srv.fabrics), f"fits {server}")
    if m_heads_bad := (model.heads % tp):
        raise ProblemError(f"--tp {tp} does not divide the model's {model.heads} heads (remainder {m_heads_bad}).")
    if virtual_stages > 1 and (pp == 1 or pp * virtual_stages > model.layers):
        raise ProblemError(f"--virtual-stages {virtual_stages} needs --pp > 1 and at least one of the model's "
                           f"{model.layers} layers per chunk (PP × virtual stages = {pp * virtual_stages}).")
    stack_id = _stack(catalog, "training", stack, gpu_id)
    plan = TrainPlan(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, num_micro_batches=gb // (dp * micro_batch),
                     recompute=recompute, sequence_parallel=sequence_parallel, zero=zero, precision=precision,
                     seq_len=s, virtual_stages=virtual_stages, ep=ep, cp=cp,
                     **catalog.train_plan_traits(gpu_id, stack_id))
    hw = catalog.hardware(gpu_id, server, fabric)
    resolved = catalog.resolve("training", gpu_id, precision, stack_id)
    try:
        result = train_step(model, hw, plan, resolved.params, catalog.efficiency.reserved_memory)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ProblemError(f"{exc}. To fix: check --precision, --cp, --ep and --gpus.") from None
    out = {
        "model": model.name, "gpu": gpu_id, "server": server, "fabric": fabric, "gpus": gpus,
        "plan": plan.describe(), "stack": stack_id, "stack_default": stack is None,
        "extrapolated": list(resolved.extrapolated), "fits": result.fits,
        "memory_gb_per_gpu": result.memory.total / 1e9, "memory_capacity_gb": result.memory_capacity / 1e9,
        "memory_breakdown_gb": {k: v / 1e9 for k, v in result.memory.breakdown().items()},
        "step_time_s": result.step_time, "step_breakdown_s": dict(result.breakdown),
        "tokens_per_step": result.tokens_per_step, "tokens_per_s": result.tokens_per_s,
        "tflops_per_gpu": result.flops_per_gpu / 1e12, "mfu": result.mfu, "hfu": result.hfu,
        "days": result.days(n_tokens) if n_tokens else None,
    }
    band = catalog.band("train", bool(resolved.extrapolated))
    out["band_90"] = {"tokens_per_s": [result.tokens_per_s * band.ratio(5), result.tokens_per_s * band.ratio(95)]}
    if n_tokens:
        out["band_90"]["days"] = [out["days"] / band.ratio(95), out["days"] / band.ratio(5)]
    if fmt == "json":
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    click.echo(f"{model.name} on {gpus} x {gpu_id} ({server}{', ' + fabric if fabric else ''}): {plan.describe()}")
    click.echo(_stack_line("training stack", stack_id, stack is None, resolved.extrapolated))
    verdict = "fits" if result.fits else "DOES NOT FIT"
    click.echo(f"memory per GPU {out['memory_gb_per_gpu']:,.1f} of {out['memory_capacity_gb']:,.0f} GB ({verdict}): "
               + ", ".join(f"{k} {v:,.1f}" for k, v in out["memory_breakdown_gb"].items()))
    click.echo(f"step {result.step_time:,.3f} s: " + ", ".join(f"{k} {v:,.3f}" for k, v in result.breakdown if v))
    lo, hi = out["band_90"]["tokens_per_s"]
    click.echo(f"{result.tokens_per_s:,.0f} tokens/s (90 % band {lo:,.0f}-{hi:,.0f}), "
               f"{out['tflops_per_gpu']:,.1f} TFLOP/s per GPU, MFU {result.mfu:.1%} (HFU {result.hfu:.1%})")
    if out["days"] is not None:
        d_lo, d_hi = out["band_90"]["days"]
        click.echo(f"{out['days']:,.1f} days for {n_tokens:.3g} tokens (90 % band "
                   f"{d_lo:,.1f}-{d_hi:,.1f})")


@estimate.command("serve")
@click.option("--model", "model_ref", required=True, help="Preset id (llama2-70b, …) or a YAML file with the shape.")
@click.option("--gpu", "gpu_id", required=True, help="GPU id from the catalog (gpuopt catalog list).")
@click.option("--gpus", type=click.IntRange(min=1), required=True,
              help="GPUs in the group: replicas × TP × PP.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--precision", type=click.Choice(["fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]),
              default="fp16", show_default=True,
              help="Weights; int8/int4 (and fp8, nvfp4, mxfp4 on GPUs without those tensor cores) are weight-only.")
@click.option("--engine", default=None,
              help="Serving engine (catalogs/stacks.yaml: vllm, trtllm, sglang, llamacpp, …); "
              "default: the mainstream one for the GPU's vendor.")
@click.option("--kv-precision", type=click.Choice(["fp16", "bf16", "fp8"]), default="fp16", show_default=True)
@click.option("--input-len", type=click.IntRange(min=1), required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=click.IntRange(min=1), required=True, help="Generated tokens per request.")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Sequences in flight per replica.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Requests in flight across the whole group (split over the replicas).")
@click.option("--server", "server_id", default=None, help="Server id (default: the first that takes the GPU).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@catalog_option
@handle_errors
def estimate_serve(model_ref: str, gpu_id: str, gpus: int, tp: int, pp: int, precision: str, engine: str | None,
                   kv_precision: str, input_len: int, output_len: int, batch: int | None, concurrency: int | None,
                   server_id: str | None, fmt: str, catalog_dir: Path | None) -> None:
    """Memory, TTFT, time per output token and throughput of a serving group.

    Without --batch or --concurrency it reports the saturated case: the largest batch that
    fits, as a benchmark at maximum load runs it.

    \b
    Example:
      gpuopt estimate serve --model llama2-70b --gpu h100-sxm --gpus 8 --tp 8 --input-len 512 --output-len 256
    """
    from optimizer.perf.serve import ServePlan, math_precision, serve

    catalog = load_catalog(catalog_dir)
    model, server = _resolve(catalog, model_ref, gpu_id, server_id, tp * pp)
    if batch is not None and concurrency is not None:
        raise ProblemError("give --batch or --concurrency, not both.")
    if gpus % (tp * pp):
        raise ProblemError(f"--gpus {gpus} is not a multiple of TP {tp} × PP {pp} = {tp * pp}. "
                           f"To fix: use --gpus {max(1, gpus // (tp * pp)) * tp * pp}.")
    if tp * pp > catalog.servers[server].slots:
        most = max(catalog.servers_for(gpu_id), key=lambda sv: sv.slots)
        fix = (f"lower TP or PP, or name --server {most.id} ({most.slots} GPUs)" if most.slots >= tp * pp
               else f"lower TP × PP to at most {most.slots} ({most.id}, the largest server for {gpu_id})")
        raise ProblemError(f"TP {tp} × PP {pp} exceeds the {catalog.servers[server].slots} GPUs of one {server}; "
                           f"serving replicas stay inside a server. To fix: {fix}.")
    replicas = gpus // (tp * pp)
    per_replica = batch if batch is not None else (-(-concurrency // replicas) if concurrency else None)
    engine_id = _stack(catalog, "serving", engine, gpu_id)
    plan = ServePlan(tp=tp, pp=pp, precision=precision, kv_precision=kv_precision, input_len=input_len,
                     output_len=output_len, batch=per_replica, **catalog.serve_plan_traits(gpu_id, engine_id))
    try:
        math_precision(catalog.device(gpu_id), precision)  # a GPU without tensor cores for it raises
        resolved = catalog.resolve("serving", gpu_id, precision, engine_id)
        r = serve(model, catalog.hardware(gpu_id, server, None), plan, resolved.params)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ProblemError(f"--precision {precision}: {exc}.") from None
    out = {
        "model": model.name, "gpu": gpu_id, "server": server, "gpus": gpus, "replicas": replicas,
        "tp": tp, "pp": pp, "precision": precision, "kv_precision": kv_precision, "engine": engine_id,
        "engine_default": engine is None, "extrapolated": list(resolved.extrapolated),
        "input_len": input_len, "output_len": output_len, "fits": r.fits, "max_batch": r.max_batch,
        "batch_per_replica": r.batch, "memory_gb_per_gpu": r.memory_per_gpu / 1e9,
        "memory_capacity_gb": r.memory_capacity / 1e9,
        "memory_breakdown_gb": {k: v / 1e9 for k, v in r.memory_breakdown},
        "ttft_ms": r.ttft * 1e3, "tpot_ms": r.tpot * 1e3, "decode_step_ms": r.decode_step * 1e3,
        "decode_breakdown_ms": {k: v * 1e3 for k, v in r.decode_breakdown},
        "output_tokens_per_s": r.output_tokens_per_s * replicas,
        "total_tokens_per_s": r.total_tokens_per_s * replicas,
        "requests_per_s": r.requests_per_s * replicas,
    }
    regime = AT_BATCH if per_replica is not None else AT_MAX_LOAD
    band = catalog.band("serve", bool(resolved.extrapolated), regime)
    out["band_90"] = {"output_tokens_per_s": [out["output_tokens_per_s"] * band.ratio(5),
                                              out["output_tokens_per_s"] * band.ratio(95)], "regime": regime}
    if fmt == "json":
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    verdict = "fits" if r.fits else "DOES NOT FIT"
    click.echo(f"{model.name} on {gpus} x {gpu_id} ({server}): {replicas} replica(s) of TP={tp} PP={pp}, "
               f"{precision} weights, {kv_precision} KV cache, {input_len} in / {output_len} out")
    click.echo(_stack_line("serving engine", engine_id, engine is None, resolved.extrapolated))
    click.echo(f"memory per GPU {out['memory_gb_per_gpu']:,.1f} of {out['memory_capacity_gb']:,.0f} GB ({verdict}) "
               f"at batch {r.batch} per replica (max {r.max_batch}): "
               + ", ".join(f"{k} {v:,.1f}" for k, v in out["memory_breakdown_gb"].items()))
    click.echo(f"TTFT {out['ttft_ms']:,.1f} ms, TPOT {out['tpot_ms']:,.1f} ms (decode step "
               f"{out['decode_step_ms']:,.1f} ms: " + ", ".join(
                   f"{k} {v:,.2f}" for k, v in out["decode_breakdown_ms"].items() if v) + ")")
    lo, hi = out["band_90"]["output_tokens_per_s"]
    click.echo(f"{out['output_tokens_per_s']:,.0f} output tokens/s (90 % band {lo:,.0f}-{hi:,.0f}, {regime}), "
               f"{out['total_tokens_per_s']:,.0f} total tokens/s, {out['requests_per_s']:,.2f} requests/s "
               "for the group")


def _stack(catalog: Catalog, kind: str, ident: str | None, gpu_id: str) -> str:
    """The stack or engine an estimate assumes (by id or alias; None: the GPU vendor's default)."""
    option = "--stack" if kind == "training" else "--engine"
    if gpu_id not in catalog.gpus:
        raise ProblemError(f"--gpu: unknown GPU '{gpu_id}'.{suggest(gpu_id, catalog.gpus)}")
    try:
        return catalog.stack(kind, ident, gpu_id).id
    except CatalogError as exc:
        raise ProblemError(f"{option}: {exc}") from None


def _stack_line(what: str, ident: str, default: bool, extrapolated: tuple[str, ...]) -> str:
    how = " (the default for this GPU's vendor; name another with --stack/--engine)" if default else ""
    band = (f"; no calibration rows for {' and '.join(extrapolated)}: borrowed values, wider band"
            if extrapolated else "; calibrated")
    return f"{what}: {ident}{how}{band}"


def _resolve(catalog: Catalog, model_ref: str, gpu_id: str, server_id: str | None, slots: int = 1):
    """The --model, --gpu and --server of an estimate, checked against the catalog. Without
    --server: the first server that takes the GPU and holds ``slots`` of them (the GPUs a replica
    keeps inside one server), else the first that takes it (the caller says why it cannot)."""
    from optimizer.problem import resolve_model

    model = resolve_model(model_ref, catalog, Path.cwd() / "command-line", "--model")
    if gpu_id not in catalog.gpus:
        raise ProblemError(f"--gpu: unknown GPU '{gpu_id}'.{suggest(gpu_id, catalog.gpus)}"
                           f" Known: {', '.join(sorted(catalog.gpus))}.")
    takers = catalog.servers_for(gpu_id)
    roomy = [sv.id for sv in takers if sv.slots >= slots] + [sv.id for sv in takers if sv.slots < slots]
    server = _pick(catalog, "servers", server_id, roomy, f"takes {gpu_id}")
    return model, server


def _pick(catalog: Catalog, kind: str, wanted: str | None, allowed: list[str], why: str) -> str:
    if not allowed:
        raise ProblemError(f"no {kind[:-1]} in the catalog {why}.")
    if wanted is None:
        return allowed[0]
    if wanted not in allowed:
        raise ProblemError(f"--{kind[:-1]} '{wanted}' is not one that {why}.{suggest(wanted, allowed)}"
                           f" Choose from: {', '.join(allowed)}.")
    return wanted


@main.command("gpu-hours")
@click.option("--data", "data_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV of published runs (default: calibration/gpu_hours.csv).")
@catalog_option
@handle_errors
def gpu_hours_cmd(data_file: Path | None, catalog_dir: Path | None) -> None:
    """Predicted GPU-hours of published training runs (Llama 2 and 3) beside the published totals.

    gpuopt plans the fastest run on at most the row's GPUs and converts its time to GPU-hours.
    """
    from optimizer.calibration.data import default_data_dir
    from optimizer.gpu_hours import gpu_hours, render

    cat = load_catalog(catalog_dir)
    click.echo(render(gpu_hours(data_file or default_data_dir() / "gpu_hours.csv", cat)), nl=False)


@main.group()
def catalog() -> None:
    """List, show and validate the hardware catalogs."""


KINDS = ("gpus", "servers", "fabrics", "nics", "switches", "cables", "links", "models", "offers", "regions")
LIST_KINDS = (*KINDS, "stacks", "engines")


@catalog.command("list")
@click.option("--kind", type=click.Choice(LIST_KINDS), default="gpus", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@catalog_option
@handle_errors
def catalog_list(kind: str, fmt: str, catalog_dir: Path | None) -> None:
    """List catalog entries (GPUs by default)."""
    cat = load_catalog(catalog_dir)
    if kind in ("stacks", "engines"):
        _list_stacks(cat, "training" if kind == "stacks" else "serving", fmt)
        return
    table = getattr(cat, kind)
    if fmt == "json":
        click.echo(json.dumps([e.model_dump(mode="json") for e in table.values()], indent=2))
        return
    if kind == "gpus":
        click.echo(f"{'id':<16} {'memory':>7} {'bw GB/s':>8} {'bf16':>7} {'fp8':>7} {'TDP W':>6} {'price':>9}  "
                   "dc-licence  link")
        for g in table.values():
            bf16 = g.bf16_tflops or g.fp16_tflops or 0
            click.echo(f"{g.id:<16} {g.memory_gb:>5g}GB {g.mem_bw_gbs:>8g} {bf16:>7g} {g.fp8_tflops or 0:>7g} "
                       f"{g.tdp_w:>6g} {g.price.usd:>9,.0f}  {'yes' if g.datacenter_license else 'no':<10}  "
                       f"{g.link} {g.link_bw_gbs:g} GB/s")
        click.echo(f"(dense TFLOPS; prices as of {cat.prices_as_of}; see 'gpuopt catalog show ID' for sources)")
    elif kind == "offers":
        click.echo(f"{'id':<20} {'gpu':<15} {'$/GPU-h':>8} {'term':<10} {'date':<11} provider")
        for o in table.values():
            click.echo(f"{o.id:<20} {o.gpu:<15} {o.price.usd:>8.3f} {o.term:<10} {o.price.date:<11} {o.provider}")
    else:
        for ident, e in table.items():
            click.echo(f"{ident:<18} {getattr(e, 'name', '')}")


def _list_stacks(cat: Catalog, kind: str, fmt: str) -> None:
    """Training stacks or serving engines: which is the vendor default, what each borrows, and how
    many calibration rows its efficiency parameters rest on."""
    eff = cat.efficiency
    table = eff.stacks if kind == "training" else eff.engines
    support = eff.table.support.get(kind)  # type: ignore[call-overload]
    if fmt == "json":
        click.echo(json.dumps([{**e.model_dump(mode="json"), "calibration_rows": support.stacks.get(i, 0) if support
                                else 0, "default_for": [v for v, s in eff.defaults[kind].items() if s == i]}
                               for i, e in table.items()], indent=2))
        return
    click.echo(f"{'id':<22} {'rows':>5}  {'default for':<14} {'like':<18} name")
    for ident, e in table.items():
        rows = support.stacks.get(ident, 0) if support else 0
        vendors = ", ".join(v for v, s in eff.defaults[kind].items() if s == ident)
        click.echo(f"{ident:<22} {rows:>5}  {vendors:<14} {e.like or '':<18} {e.name}")
    click.echo(f"(rows: published {kind} runs its parameters are fitted to; 0: it takes those of the one it is "
               "like, or the defaults, with a wider band)")


@catalog.command("show")
@click.argument("ident")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@catalog_option
@handle_errors
def catalog_show(ident: str, fmt: str, catalog_dir: Path | None) -> None:
    """Show every field of one entry, with its sources."""
    cat = load_catalog(catalog_dir)
    for kind in KINDS:
        table = getattr(cat, kind)
        if ident in table:
            data = table[ident].model_dump(mode="json")
            if kind == "gpus":
                data["efficiency"] = cat.efficiency_status(ident)
                data["specs"] = {k: f"{v} ({cat.spec_sources[v].date})" if v in cat.spec_sources else v
                                 for k, v in data["specs"].items()}
            if fmt == "json":
                click.echo(json.dumps(data, indent=2))
            else:
                click.echo(f"{kind[:-1]} {ident}")
                for k, v in data.items():
                    click.echo(f"  {k}: {v}")
            return
    everything = [i for k in KINDS for i in getattr(cat, k)]
    raise CatalogError(f"no catalog entry '{ident}'.{suggest(ident, everything)} "
                       "To fix: see 'gpuopt catalog list --kind …'.")


@catalog.command("validate")
@catalog_option
@handle_errors
def catalog_validate(catalog_dir: Path | None) -> None:
    """Load every catalog file and check every field and cross-reference."""
    cat = load_catalog(catalog_dir)
    assumed = [g.id for g in cat.gpus.values() if g.price.assumption]
    click.echo(f"catalog at {cat.root} is valid: {len(cat.gpus)} GPUs, {len(cat.servers)} servers, "
               f"{len(cat.fabrics)} fabrics, {len(cat.models)} model presets, {len(cat.offers)} cloud offers, "
               f"{len(cat.regions)} export regions.")
    if assumed:
        click.echo(f"GPU prices that are assumptions (get a quote): {', '.join(assumed)}")


# the trade-off and calibration commands live in their own modules
from optimizer.cli_calibrate import fit_cmd, validate_cmd  # noqa: E402
from optimizer.cli_tradeoffs import compare, explain, report_cmd, sweep  # noqa: E402

for command in (sweep, explain, compare, report_cmd, validate_cmd, fit_cmd):
    main.add_command(command)
