"""One configuration through the performance model, without the MIP: what ``gpuopt estimate
train`` and ``gpuopt estimate serve`` print, and what ``go.estimate_train`` / ``go.estimate_serve``
return. Arguments are checked against the catalog here; messages name them as the command-line
options they are (``--gpus``), which the API takes by the same names (``gpus=``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, Catalog
from optimizer.catalog.records import train_regime
from optimizer.errors import CatalogError, ProblemError, suggest
from optimizer.perf.comm import tp_allreduce_parts, tp_link
from optimizer.perf.goodput import goodput
from optimizer.perf.params import ServeParams, TrainParams
from optimizer.perf.serve import DECODE_SUMMANDS, EXPOSED_HOST, HOST_WORK, ServePlan, math_precision, serve
from optimizer.perf.specs import Hardware, ModelSpec, TrainPlan, as_precision, as_recompute
from optimizer.perf.train import TrainResult, train_step
from optimizer.problem import names, resolve_model
from optimizer.validation import parse_positive


@dataclass(frozen=True, eq=False)
class Estimate:
    """An estimate: ``data`` is what ``--format json`` prints, ``lines`` the text report."""

    data: dict[str, Any]
    lines: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        import copy

        return copy.deepcopy(self.data)

    @property
    def fits(self) -> bool:
        """Whether the configuration fits the GPUs' memory (an estimate that does not is hypothetical)."""
        return bool(self.data.get("fits", True))

    def render(self, fmt: str = "text") -> str:
        """``text`` or ``json``, as ``gpuopt estimate … --format`` prints it."""
        if fmt == "json":
            return json.dumps(self.data, indent=2, sort_keys=True) + "\n"
        if fmt != "text":
            raise ProblemError(f"format '{fmt}': an estimate renders as text or json.")
        return "".join(f"{line}\n" for line in self.lines)


def _tokens(tokens: str | float | None) -> float | None:
    """``--tokens`` as a number: a bad one is bad input, found before any work."""
    try:
        n_tokens = parse_positive(tokens) if tokens is not None else None
    except ValueError as exc:
        raise ProblemError(f"--tokens {tokens!r}: {exc}. To fix: e.g. --tokens 2T or --tokens 2e12.") from None
    return n_tokens


def estimate_train(catalog: Catalog, model: str, gpu: str, gpus: int, tp: int = 1, pp: int = 1,
                   micro_batch: int = 1, global_batch: int | None = None, seq_len: int | None = None,
                   recompute: str = "selective", sequence_parallel: bool = False, zero: int = 1, cp: int = 1,
                   ep: int = 1, virtual_stages: int = 1, precision: str = "bf16", stack: str | None = None,
                   server: str | None = None, fabric: str | None = None, tokens: str | float | None = None,
                   memory_headroom: float | None = None) -> Estimate:
    """Memory, step time, tokens/s, TFLOP/s per GPU, MFU and days for one training configuration;
    it fits when it stays within the GPU's memory less ``memory_headroom`` (default: the catalog's);
    its days are wall-clock days, the failures and restarts of a job this size counted (goodput)."""
    try:
        train_precision, recompute_mode = as_precision(precision), as_recompute(recompute)
    except ValueError as exc:
        raise ProblemError(f"{exc}.") from None
    n_tokens = _tokens(tokens)
    spec, gpu, server_id = _resolve(catalog, model, gpu, server, min(gpus, tp * cp))
    replica = tp * pp * cp
    if gpus % replica:
        raise ProblemError(f"--gpus {gpus} is not a multiple of TP {tp} × PP {pp} × CP {cp} = {replica}. "
                           f"To fix: use --gpus {max(1, gpus // replica) * replica}.")
    dp, s = gpus // replica, seq_len or spec.seq_len
    per_step = dp * micro_batch
    # default: about 4M tokens per step, rounded to whole micro-batches on every replica
    gb = global_batch or max(1, round(4e6 / s / per_step)) * per_step
    if gb % per_step:
        raise ProblemError(f"--global-batch {gb} is not a multiple of DP {dp} × micro-batch {micro_batch}. "
                           f"To fix: use --global-batch {max(1, gb // (dp * micro_batch)) * dp * micro_batch}.")
    fabric_id = _train_fabric(catalog, server_id, fabric, tp, gpus)
    _check_train_shape(spec, tp, pp, virtual_stages)
    stack_id = _stack(catalog, "training", stack, gpu)
    plan = TrainPlan(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, num_micro_batches=gb // (dp * micro_batch),
                     recompute=recompute_mode, sequence_parallel=sequence_parallel, zero=zero,
                     precision=train_precision, seq_len=s, virtual_stages=virtual_stages, ep=ep, cp=cp,
                     **catalog.train_plan_traits(gpu, stack_id))
    hw = catalog.hardware(gpu, server_id, fabric_id)
    resolved = catalog.resolve("training", gpu, precision, stack_id)
    assert isinstance(resolved.params, TrainParams)  # a training stack resolves to training parameters
    try:
        headroom = catalog.efficiency.memory_headroom if memory_headroom is None else memory_headroom
        result = train_step(spec, hw, plan, resolved.params, catalog.efficiency.reserved_memory, headroom)
    except ValueError as exc:
        raise ProblemError(f"{exc}. To fix: check --precision, --cp, --ep and --gpus.") from None
    out: dict[str, Any] = {
        "model": spec.name, "gpu": gpu, "server": server_id, "fabric": fabric_id, "gpus": gpus,
        "plan": plan.describe(), "stack": stack_id, "stack_default": stack is None,
        "extrapolated": list(resolved.extrapolated), "fits": result.fits,
        **_train_memory(result, headroom),
        "step_time_s": result.step_time, "step_breakdown_s": dict(result.breakdown),
        "tokens_per_step": result.tokens_per_step, "tokens_per_s": result.tokens_per_s,
        "tflops_per_gpu": result.flops_per_gpu / 1e12, "mfu": result.mfu, "hfu": result.hfu,
        "goodput": (good := goodput(gpus, catalog.facility.reliability.reliability())).fraction,
        "days": result.days(n_tokens) / good.fraction if n_tokens else None,
    }
    regime = train_regime(spec.moe)  # an MoE model takes the band of MoE runs (bands.regime_of)
    band = catalog.band("train", bool(resolved.extrapolated), regime, catalog.vendor_of(gpu))
    out["band_90"] = {"tokens_per_s": [result.tokens_per_s * band.ratio(5), result.tokens_per_s * band.ratio(95)],
                      "regime": regime}
    if n_tokens:
        out["band_90"]["days"] = [out["days"] / band.ratio(95), out["days"] / band.ratio(5)]
    return Estimate(out, _train_lines(out, stack is None, resolved.extrapolated, n_tokens))


def _train_memory(result: TrainResult, headroom: float) -> dict[str, Any]:
    """Memory per GPU of a training estimate: used, usable (less the headroom), total, breakdown."""
    return {"memory_gb_per_gpu": result.memory.total / 1e9, "memory_capacity_gb": result.memory_capacity / 1e9,
            "memory_total_gb": result.memory_total / 1e9, "memory_headroom": headroom,
            "memory_breakdown_gb": {k: v / 1e9 for k, v in result.memory.breakdown().items()}}


def _train_lines(out: dict[str, Any], default_stack: bool, extrapolated: tuple[str, ...],
                 n_tokens: float | None) -> tuple[str, ...]:
    """The text of a training estimate, from its JSON record."""
    verdict = "fits" if out["fits"] else "DOES NOT FIT"
    lo, hi = out["band_90"]["tokens_per_s"]
    fabric = f", {out['fabric']}" if out["fabric"] else ""
    lines = [
        f"{out['model']} on {out['gpus']} x {out['gpu']} ({out['server']}{fabric}): {out['plan']}",
        _stack_line("training stack", out["stack"], default_stack, extrapolated),
        f"memory per GPU {out['memory_gb_per_gpu']:,.1f} of {out['memory_capacity_gb']:,.1f} GB usable "
        f"({out['memory_total_gb']:,.1f} GB less {out['memory_headroom']:.0%} headroom; {verdict}): "
        + ", ".join(f"{k} {v:,.1f}" for k, v in out["memory_breakdown_gb"].items()),
        f"step {out['step_time_s']:,.3f} s: " + ", ".join(f"{k} {v:,.3f}" for k, v in out["step_breakdown_s"].items()
                                                       if v),
        _if_it_fit(out) + f"{out['tokens_per_s']:,.0f} tokens/s (90 % band {lo:,.0f}-{hi:,.0f}, "
        f"{out['band_90']['regime']} models), "
        f"{out['tflops_per_gpu']:,.1f} TFLOP/s per GPU, MFU {out['mfu']:.1%} (HFU {out['hfu']:.1%})",
    ]
    if out["days"] is not None:
        d_lo, d_hi = out["band_90"]["days"]
        lines.append(f"{out['days']:,.1f} days for {n_tokens:.3g} tokens (90 % band {d_lo:,.1f}-{d_hi:,.1f}), "
                     f"failures and restarts included: goodput {out['goodput']:.1%}")
    return tuple(lines)


def _train_fabric(catalog: Catalog, server_id: str, fabric: str | None, tp: int, gpus: int) -> str | None:
    """The fabric between servers (None within one), once TP is checked to stay inside a server."""
    srv = catalog.servers[server_id]
    if tp > srv.slots:
        raise ProblemError(f"--tp {tp} exceeds the {srv.slots} GPUs of one {server_id}. "
                           "To fix: keep TP within a server.")
    return _pick("fabrics", fabric, list(srv.fabrics), f"fits {server_id}") if gpus > srv.slots else None


def _check_train_shape(spec: ModelSpec, tp: int, pp: int, virtual_stages: int) -> None:
    if m_heads_bad := (spec.heads % tp):
        raise ProblemError(f"--tp {tp} does not divide the model's {spec.heads} heads (remainder {m_heads_bad}).")
    if virtual_stages > 1 and (pp == 1 or pp * virtual_stages > spec.layers):
        raise ProblemError(f"--virtual-stages {virtual_stages} needs --pp > 1 and at least one of the model's "
                           f"{spec.layers} layers per chunk (PP × virtual stages = {pp * virtual_stages}).")


def estimate_serve(catalog: Catalog, model: str, gpu: str, gpus: int, input_len: int, output_len: int,
                   tp: int = 1, pp: int = 1, precision: str = "fp16", engine: str | None = None,
                   kv_precision: str = "fp16", batch: int | None = None, concurrency: int | None = None,
                   server: str | None = None, attention_dp: bool = False, offline: bool = False) -> Estimate:
    """Memory, TTFT, time per output token and throughput of a serving group. Without ``batch`` or
    ``concurrency``: the saturated case, the largest batch that fits (a benchmark at maximum load).
    ``attention_dp``: attention data-parallel over each replica's TP group (MoE serving with
    TensorRT-LLM's enable_attention_dp or SGLang's --enable-dp-attention). ``offline``: the requests
    are handed to the engine directly (vLLM's LLM.generate, a batch job), not through its API server."""
    spec, gpu, server_id = _resolve(catalog, model, gpu, server, tp * pp)
    if batch is not None and concurrency is not None:
        raise ProblemError("give --batch or --concurrency, not both.")
    if gpus % (tp * pp):
        raise ProblemError(f"--gpus {gpus} is not a multiple of TP {tp} × PP {pp} = {tp * pp}. "
                           f"To fix: use --gpus {max(1, gpus // (tp * pp)) * tp * pp}.")
    slots = catalog.servers[server_id].slots
    if tp * pp > slots:
        most = max(catalog.servers_for(gpu), key=lambda sv: sv.slots)
        fix = (f"lower TP or PP, or name --server {most.id} ({most.slots} GPUs)" if most.slots >= tp * pp
               else f"lower TP × PP to at most {most.slots} ({most.id}, the largest server for {gpu})")
        raise ProblemError(f"TP {tp} × PP {pp} exceeds the {slots} GPUs of one {server_id}; "
                           f"serving replicas stay inside a server. To fix: {fix}.")
    replicas = gpus // (tp * pp)
    per_replica = batch if batch is not None else (-(-concurrency // replicas) if concurrency else None)
    engine_id = _stack(catalog, "serving", engine, gpu)
    plan = ServePlan(tp=tp, pp=pp, precision=precision, kv_precision=kv_precision, input_len=input_len,
                     output_len=output_len, batch=per_replica, attention_dp=attention_dp, online=not offline,
                     **catalog.serve_plan_traits(gpu, engine_id))
    try:
        math_precision(catalog.device(gpu), precision)  # a GPU without tensor cores for it raises
        resolved = catalog.resolve("serving", gpu, precision, engine_id)
        assert isinstance(resolved.params, ServeParams)  # a serving engine resolves to serving parameters
        hw = catalog.hardware(gpu, server_id, None)
        r = serve(spec, hw, plan, resolved.params)
    except ValueError as exc:
        raise ProblemError(f"--precision {precision}: {exc}.") from None
    out: dict[str, Any] = {
        "model": spec.name, "gpu": gpu, "server": server_id, "gpus": gpus, "replicas": replicas,
        "tp": tp, "pp": pp, "attention_dp": attention_dp, "precision": precision, "kv_precision": kv_precision,
        "engine": engine_id, "offline": offline, "mixed_batching": plan.mixed_batching,
        "engine_default": engine is None, "extrapolated": list(resolved.extrapolated),
        "input_len": input_len, "output_len": output_len, "fits": r.fits, "max_batch": r.max_batch,
        "batch_per_replica": r.batch, "memory_gb_per_gpu": r.memory_per_gpu / 1e9,
        "memory_capacity_gb": r.memory_capacity / 1e9, "memory_total_gb": hw.device.memory / 1e9,
        "memory_breakdown_gb": {k: v / 1e9 for k, v in r.memory_breakdown},
        "ttft_ms": r.ttft * 1e3, "tpot_ms": r.tpot * 1e3, "decode_step_ms": r.decode_step * 1e3,
        "decode_breakdown_ms": {k: v * 1e3 for k, v in r.decode_breakdown},
        # the KV cache read this many times a step (vLLM's unsplit PagedAttention V1 under GQA; else 1)
        "kv_read_factor": r.kv_read_factor,
        "output_tokens_per_s": r.output_tokens_per_s * replicas,
        "total_tokens_per_s": r.total_tokens_per_s * replicas,
        "requests_per_s": r.requests_per_s * replicas,
        "tp_link": _tp_link(catalog, hw, plan, float(resolved.params.allreduce_latency)),
    }
    regime = AT_BATCH if per_replica is not None else AT_MAX_LOAD
    band = catalog.band("serve", bool(resolved.extrapolated), regime, catalog.vendor_of(gpu))
    out["band_90"] = {"output_tokens_per_s": [out["output_tokens_per_s"] * band.ratio(5),
                                              out["output_tokens_per_s"] * band.ratio(95)], "regime": regime}
    return Estimate(out, _serve_lines(out, resolved.extrapolated))


def _tp_link(catalog: Catalog, hw: Hardware, plan: ServePlan, latency_factor: float) -> dict[str, Any] | None:
    """The link a replica's TP all-reduces cross, as the performance model takes it (``perf.comm.tp_link``;
    None without TP): its bus bandwidth, the fixed time of one all-reduce as the engine runs it (the
    model's latency times the engine's ``allreduce_latency``), and whether the catalog assumes the figure."""
    link = tp_link(hw, plan.tp)
    if link is None:
        return None
    record = catalog.links[link.name]
    return {"id": link.name, "name": record.name, "bus_bandwidth_gbs": link.effective_bw / 1e9,
            "latency_us": tp_allreduce_parts(0.0, hw, plan.tp)[1] * latency_factor * 1e6,
            "assumption": record.assumption, "source": record.source}


def _tp_link_line(link: dict[str, Any]) -> str:
    """'TP all-reduces over pcie4-no-p2p (...): 16.0 GB/s bus bandwidth, 55 us each (...)': an assumed
    figure says what it assumes; a sourced one points at catalogs/network.yaml (the JSON has the source)."""
    sourced = f"an assumption: {link['source']}" if link["assumption"] else "sourced in catalogs/network.yaml"
    return (f"TP all-reduces over {link['id']} ({link['name']}): {link['bus_bandwidth_gbs']:,.1f} GB/s bus "
            f"bandwidth, {link['latency_us']:,.0f} us each as this engine runs them ({sourced})")


def _serve_lines(out: dict[str, Any], extrapolated: tuple[str, ...]) -> tuple[str, ...]:
    """The text of a serving estimate, from its JSON record."""
    verdict = "fits" if out["fits"] else "DOES NOT FIT"
    lo, hi = out["band_90"]["output_tokens_per_s"]
    link = (_tp_link_line(out["tp_link"]),) if out.get("tp_link") else ()
    return (
        f"{out['model']} on {out['gpus']} x {out['gpu']} ({out['server']}): {out['replicas']} replica(s) of "
        f"TP={out['tp']} PP={out['pp']}{' (attention data-parallel)' if out['attention_dp'] else ''}, "
        f"{out['precision']} weights, {out['kv_precision']} KV cache, "
        f"{out['input_len']} in / {out['output_len']} out",
        _stack_line("serving engine", out["engine"], out["engine_default"], extrapolated)
        + ("; an offline batch handed to the engine directly" if out["offline"]
           else "; requests through its API server (--offline: a batch job handed to the engine directly)"),
        f"memory per GPU {out['memory_gb_per_gpu']:,.2f} of {out['memory_capacity_gb']:,.2f} GB usable "
        f"({out['memory_total_gb']:,.1f} GB on the GPU; {verdict}) "
        f"at batch {out['batch_per_replica']} per replica (max {out['max_batch']}): "
        + ", ".join(f"{k} {v:,.1f}" for k, v in out["memory_breakdown_gb"].items()),
        _if_it_fit(out) + f"TTFT {out['ttft_ms']:,.1f} ms, {_tpot_text(out)}",
        _if_it_fit(out) + f"{out['output_tokens_per_s']:,.0f} output tokens/s (90 % band {lo:,.0f}-{hi:,.0f}, "
        f"{out['band_90']['regime']}), {out['total_tokens_per_s']:,.0f} total tokens/s, "
        f"{out['requests_per_s']:,.2f} requests/s for the group",
        *link,
    )


def _if_it_fit(out: dict[str, Any]) -> str:
    """The prefix of a rate line: a configuration that does not fit is no answer, its rates hypothetical."""
    return "" if out["fits"] else "if it fit (it does not, see memory): "


def gpu_id(catalog: Catalog, text: str) -> str:
    """A --gpu as people write it ("H100 SXM", "4090", "MI300X") as its catalog id, as in problem
    files; a name that could be several GPUs is an error listing them."""
    ident, several = names.gpu_id(text, catalog)
    if several:
        raise ProblemError(f"--gpu: '{text}' could be any of {', '.join(several)}. To fix: name the one you mean.")
    return ident  # unknown: _resolve says so, with close matches




def _tpot_text(out: dict[str, Any]) -> str:
    """TPOT as the decode step plus, under continuous batching, each token's share of the prompts
    prefilled between the steps or, for an engine that mixes them into the steps (TensorRT-LLM's
    in-flight batching), what they add to the steps (the rest of a sequence's time per token). The
    share is the difference of the two figures as printed, so that the printed sum adds up."""
    prefill = round(out["tpot_ms"], 1) - round(out["decode_step_ms"], 1)
    if prefill > max(0.05, 0.01 * out["tpot_ms"]):
        return (f"TPOT {out['tpot_ms']:,.1f} ms = decode step {out['decode_step_ms']:,.1f} + {prefill:,.1f} ms of "
                f"prompts prefilled {'inside' if out['mixed_batching'] else 'between'} the steps; "
                f"{_decode_step_text(out)}")
    return f"TPOT {out['tpot_ms']:,.1f} ms ({_decode_step_text(out)})"


def _decode_step_text(out: dict[str, Any]) -> str:
    """The decode step as the sum of its parts, then the two sides of the rooflines the GEMMs and
    attention are (weights and KV cache read, FLOPs; ``perf.roofline``): 'decode step 82.3 ms =
    gemm 26.0 + ...; gemm and attention are rooflines, smoothed at the ridge, of: ...'."""
    parts = out["decode_breakdown_ms"]
    summands = " + ".join(f"{k} {parts[k]:,.2f}" for k in DECODE_SUMMANDS if parts.get(k))
    within = ", ".join(f"{k} {v:,.2f}" for k, v in parts.items() if k not in (*DECODE_SUMMANDS, HOST_WORK) and v)
    hidden = parts.get(HOST_WORK, 0.0) - parts.get(EXPOSED_HOST, 0.0)
    overlap = ""
    if hidden > 0.005:  # an overlap scheduler hid some of the host's work (``perf.serve._decode_step``)
        shown = "all of it hidden" if parts[EXPOSED_HOST] < 0.005 else f"{hidden:,.2f} hidden, the rest is overhead"
        overlap = (f"; the host's {parts[HOST_WORK]:,.2f} ms of work per step runs while the GPU runs the step before "
                   f"(the engine's overlap scheduler: {shown})")
    factor = out.get("kv_read_factor", 1.0)
    unshared = (f" (the cache read {factor:.3g} times: vLLM's PagedAttention V1, unsplit once sequences x query "
                f"heads pass 512, reads a GQA group's K and V once per query head)") if factor > 1.0 else ""
    rooflines = f"; gemm and attention are rooflines, smoothed at the ridge, of: {within}{unshared}" if within else ""
    return f"decode step {out['decode_step_ms']:,.1f} ms = {summands}{rooflines}{overlap}"


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


def _resolve(catalog: Catalog, model_ref: str, gpu_name: str, server_id: str | None,
             slots: int = 1) -> tuple[ModelSpec, str, str]:
    """The model, GPU id (``gpu_id``: as people write it) and server of an estimate, checked
    against the catalog. Without a server: the first that takes the GPU and holds ``slots`` of
    them (the GPUs a replica keeps inside one server), else the first that takes it (the caller
    says why it cannot)."""
    spec = resolve_model(model_ref, catalog, Path.cwd() / "command-line", "--model")
    gpu = gpu_id(catalog, gpu_name)
    if gpu not in catalog.gpus:
        raise ProblemError(f"--gpu: unknown GPU '{gpu}'.{suggest(gpu, catalog.gpus)}"
                           f" Known: {', '.join(sorted(catalog.gpus))}.")
    takers = catalog.servers_for(gpu)
    roomy = [sv.id for sv in takers if sv.slots >= slots] + [sv.id for sv in takers if sv.slots < slots]
    return spec, gpu, _pick("servers", server_id, roomy, f"takes {gpu}")


def _pick(kind: str, wanted: str | None, allowed: list[str], why: str) -> str:
    if not allowed:
        raise ProblemError(f"no {kind[:-1]} in the catalog {why}.")
    if wanted is None:
        return allowed[0]
    if wanted not in allowed:
        raise ProblemError(f"--{kind[:-1]} '{wanted}' is not one that {why}.{suggest(wanted, allowed)}"
                           f" Choose from: {', '.join(allowed)}.")
    return wanted
