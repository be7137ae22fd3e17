"""`gpuopt solve`, `estimate`, `gpu-hours` and `catalog`: thin click commands over the Python API."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TextIO

import click

from optimizer import api as go
from optimizer.cli.common import COUNT, catalog_option, handle_errors, price_option


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
    warnings.showwarning = _show_warning


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A warning as one line on stderr (``warning: ...``), not Python's file:line form."""
    click.echo(f"warning: {message}", err=True)


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
    if bom_file is not None and bom_file.suffix.lower() not in (".csv", ".xlsx", ".json", ".md"):
        raise go.ProblemError(f"--bom {bom_file}: unknown extension '{bom_file.suffix}'. "
                              "To fix: use .csv, .xlsx, .json or .md.")
    problem = go.load_problem(problem_file, go.load_catalog(catalog_dir), prices)
    try:
        answer = go.recommend(problem, solver, time_limit, int(confidence) if confidence is not None else None)
    except go.InfeasibleError as exc:
        if fmt == "json":  # a script reading stdout gets the refusal as JSON too (exit 1 all the same)
            reason = str(exc).split("\n", 1)[0]
            click.echo(json.dumps({"status": "infeasible", "reason": reason, "limits": exc.hints}, indent=2))
        raise
    click.echo(answer.render(fmt), nl=False)
    if bom_file is not None:
        answer.write_bom(bom_file)
        click.echo(f"bill of materials written to {bom_file}", err=True)


@main.group()
def estimate() -> None:
    """Predict one fixed configuration with the performance model."""


@estimate.command("train")
@click.option("--model", "model_ref", required=True, help="Preset id (llama2-7b, …), a YAML "
              "file with the shape, or a Hugging Face config.json (or its directory).")
@click.option("--gpu", "gpu_id", required=True, help="GPU id from the catalog (gpuopt catalog list).")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="Total GPUs (TP × PP × DP).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--global-batch", type=COUNT, default=None,
              help="Sequences per step (default: about 4M tokens, a multiple of DP × micro-batch).")
@click.option("--seq-len", type=COUNT, default=None, help="Default: the model's.")
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
@click.option("--memory-headroom", type=click.FloatRange(0.0, 0.9, max_open=True), default=None,
              help="Share of each GPU's memory kept free for allocator fragmentation (default: the catalog's, 0.1).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@catalog_option
@handle_errors
def estimate_train(model_ref: str, gpu_id: str, gpus: int, tp: int, pp: int, micro_batch: int,
                   global_batch: int | None, seq_len: int | None, recompute: str, sequence_parallel: bool,
                   zero: int, cp: int, ep: int, virtual_stages: int, precision: str, stack: str | None,
                   server_id: str | None, fabric_id: str | None,
                   tokens: str | None, memory_headroom: float | None, fmt: str, catalog_dir: Path | None) -> None:
    """Memory, step time, tokens/s, TFLOP/s per GPU, MFU and days for one configuration.

    \b
    Example:
      gpuopt estimate train --model llama2-70b --gpu h100-sxm --gpus 1024 --tp 8 --pp 4 --tokens 2T
    """
    estimate = go.estimate_train(
        model_ref, gpu_id, gpus, go.load_catalog(catalog_dir), tp=tp, pp=pp, micro_batch=micro_batch,
        global_batch=global_batch, seq_len=seq_len, recompute=recompute, sequence_parallel=sequence_parallel,
        zero=zero, cp=cp, ep=ep, virtual_stages=virtual_stages, precision=precision, stack=stack, server=server_id,
        fabric=fabric_id, tokens=tokens, memory_headroom=memory_headroom)
    click.echo(estimate.render(fmt), nl=False)
    if not estimate.fits:  # printed, but it cannot run: infeasible, as a solve that finds nothing
        raise SystemExit(1)


@estimate.command("serve")
@click.option("--model", "model_ref", required=True, help="Preset id (llama2-70b, …), a YAML "
              "file with the shape, or a Hugging Face config.json (or its directory).")
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
@click.option("--input-len", type=COUNT, required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=COUNT, required=True, help="Generated tokens per request.")
@click.option("--batch", type=COUNT, default=None, help="Sequences in flight per replica.")
@click.option("--concurrency", type=COUNT, default=None,
              help="Requests in flight across the whole group (split over the replicas).")
@click.option("--server", "server_id", default=None, help="Server id (default: the first that takes the GPU).")
@click.option("--attention-dp", is_flag=True, default=False,
              help="Attention data-parallel over the TP group (each GPU keeps the KV cache of its own requests; "
              "MoE serving with TensorRT-LLM enable_attention_dp or SGLang --enable-dp-attention).")
@click.option("--offline", is_flag=True, default=False,
              help="An offline batch handed to the engine directly (vLLM's LLM.generate, a benchmark script), "
              "not requests through its API server, which adds time to every step.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@catalog_option
@handle_errors
def estimate_serve(model_ref: str, gpu_id: str, gpus: int, tp: int, pp: int, precision: str, engine: str | None,
                   kv_precision: str, input_len: int, output_len: int, batch: int | None, concurrency: int | None,
                   server_id: str | None, attention_dp: bool, offline: bool, fmt: str,
                   catalog_dir: Path | None) -> None:
    """Memory, TTFT, time per output token and throughput of a serving group.

    Without --batch or --concurrency it reports the saturated case: the largest batch that
    fits, as a benchmark at maximum load runs it.

    \b
    Example:
      gpuopt estimate serve --model llama2-70b --gpu h100-sxm --gpus 8 --tp 8 --input-len 512 --output-len 256
    """
    estimate = go.estimate_serve(
        model_ref, gpu_id, gpus, input_len, output_len, go.load_catalog(catalog_dir), tp=tp, pp=pp,
        precision=precision, engine=engine, kv_precision=kv_precision, batch=batch, concurrency=concurrency,
        server=server_id, attention_dp=attention_dp, offline=offline)
    click.echo(estimate.render(fmt), nl=False)
    if not estimate.fits:
        raise SystemExit(1)


@main.command("gpu-hours")
@click.option("--data", "data_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV of published runs (default: calibration/gpu_hours.csv).")
@catalog_option
@handle_errors
def gpu_hours_cmd(data_file: Path | None, catalog_dir: Path | None) -> None:
    """Predicted GPU-hours of published training runs (Llama 2 and 3) beside the published totals.

    gpuopt plans the fastest run on at most the row's GPUs and converts its time to GPU-hours.
    """
    click.echo(go.gpu_hours(data_file, go.load_catalog(catalog_dir)).render(), nl=False)


@main.group()
def catalog() -> None:
    """List, show and validate the hardware catalogs."""


LIST_KINDS = (*go.CATALOG_KINDS, "stacks", "engines")


@catalog.command("list")
@click.option("--kind", type=click.Choice(LIST_KINDS), default="gpus", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@catalog_option
@handle_errors
def catalog_list(kind: str, fmt: str, catalog_dir: Path | None) -> None:
    """List catalog entries (GPUs by default)."""
    cat = go.load_catalog(catalog_dir)
    if kind in ("stacks", "engines"):
        _list_stacks(cat, "training" if kind == "stacks" else "serving", fmt)
        return
    table = getattr(cat, kind)
    if fmt == "json":
        click.echo(json.dumps([e.model_dump(mode="json") for e in table.values()], indent=2))
        return
    if kind == "gpus":
        click.echo(f"{'id':<16} {'memory':>7} {'bw GB/s':>8} {'bf16':>7} {'fp8':>7} {'TDP W':>6} {'new $':>9} "
                   f"{'used $':>9}  dc-licence  link")
        for g in table.values():
            bf16 = g.bf16_tflops or g.fp16_tflops or 0
            used = f"{g.used_price.usd:>9,.0f}" if g.used_price else f"{'-':>9}"
            click.echo(f"{g.id:<16} {g.memory_gb:>4g}GiB {g.mem_bw_gbs:>8g} {bf16:>7g} {g.fp8_tflops or 0:>7g} "
                       f"{g.tdp_w:>6g} {g.price.usd:>9,.0f} {used}  {'yes' if g.datacenter_license else 'no':<10}  "
                       f"{g.link} {g.link_bw_gbs:g} GB/s")
        click.echo(f"(dense TFLOPS; prices as of {cat.prices_as_of}, used ones bought only where a problem sets "
                   "hardware.allow_used; see 'gpuopt catalog show ID' for sources)")
    elif kind == "offers":
        click.echo(f"{'id':<20} {'gpu':<15} {'$/GPU-h':>8} {'term':<10} {'date':<11} provider")
        for o in table.values():
            click.echo(f"{o.id:<20} {o.gpu:<15} {o.price.usd:>8.3f} {o.term:<10} {o.price.date:<11} {o.provider}")
    else:
        for ident, e in table.items():
            click.echo(f"{ident:<18} {getattr(e, 'name', '')}")


def _list_stacks(cat: go.Catalog, kind: str, fmt: str) -> None:
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
    kind, data = go.catalog_entry(go.load_catalog(catalog_dir), ident)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{kind} {ident}")
    for k, v in data.items():
        click.echo(f"  {k}: {v}")


@catalog.command("validate")
@catalog_option
@handle_errors
def catalog_validate(catalog_dir: Path | None) -> None:
    """Load every catalog file and check every field and cross-reference."""
    cat = go.load_catalog(catalog_dir)
    assumed = [g.id for g in cat.gpus.values() if g.price.assumption]
    click.echo(f"catalog at {cat.root} is valid: {len(cat.gpus)} GPUs, {len(cat.servers)} servers, "
               f"{len(cat.fabrics)} fabrics, {len(cat.models)} model presets, {len(cat.offers)} cloud offers, "
               f"{len(cat.regions)} export regions.")
    if assumed:
        click.echo(f"GPU prices that are assumptions (get a quote): {', '.join(assumed)}")
