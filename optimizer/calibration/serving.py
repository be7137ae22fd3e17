"""Serving rows as model inputs: each published measurement becomes a replica, an engine and a load.

Load is read as the source describes it: maximum load (the most sequences that fit, capped by the
engine's limit on sequences in flight), a fixed batch (static, as TensorRT-LLM's old
gptSessionBenchmark and LMDeploy's profile_generation run it) or a fixed concurrency (continuous
batching, as ``vllm bench serve --max-concurrency`` does), or a burst of N requests sent at once
(as many in flight as fit). Open-loop request rates are not expressed. Variable-length datasets
(ShareGPT) are expressed at the mean prompt and output lengths the source's own token totals imply
(derived in the row's notes), and reported as their own regime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from optimizer.calibration.data import (
    Aliases,
    claimed,
    collect_cases,
    measured_value,
    to_float,
    to_int,
)
from optimizer.catalog import Catalog
from optimizer.perf.params import ServeParams
from optimizer.perf.serve import ServePlan, ServeTerms, max_batch, serve_memory, serve_terms, serve_time
from optimizer.perf.serve_memory import full_length_batch
from optimizer.perf.specs import Hardware, ModelSpec
from optimizer.perf.weights import spec_gemm_peak

MEAN_LENGTHS = re.compile(r"mean input/output tokens per request (\d+)/(\d+)")

# The hardware's own limits: every kernel at the spec peak and bandwidth, no overheads, no latency.
ROOFLINE = ServeParams(gemm=1.0, gemm_half_width=0.0, attention=1.0, mem_bw=1.0, kv_bw=1.0, moe_efficiency=1.0,
                       allreduce_latency=0.0, ridge_slowdown=1.0)  # the overheads' defaults are 0


@dataclass(frozen=True)
class ServingCase:
    row: str
    source: str
    stack: str
    family: str
    precision: str  # the weight format (efficiency values are keyed by it: weight-only formats differ)
    regime: str
    config: str
    model: ModelSpec
    hw: Hardware
    plan: ServePlan
    terms: ServeTerms
    scale: float  # measured throughput = replica throughput × scale (replicas, or replicas per GPU)
    measured: tuple[tuple[str, float], ...]  # (metric, value)

    @property
    def gpu(self) -> str:
        return self.hw.device.name


def _length(text: str) -> int | None:
    t = text.strip().lower().replace(",", "")
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)\s*k", t):
        return int(float(m.group(1)) * 1024)
    return to_int(t)


def _load(text: str, facts: dict[str, Any], row: dict[str, str], output_len: int) -> tuple[str, int | None] | str:
    """('max', None), ('batch', n), ('burst', n) or ('rate', n); or why the load cannot be expressed.

    An open-loop request rate λ keeps, by Little's law, λ × (TTFT + output_len × TPOT) requests in
    flight: the row's own latencies give its concurrency, and the model predicts those latencies
    there (its throughput is then λ × output_len whatever the model says, so it is not compared).
    A rate far above what the replica can serve is a burst of all the requests at once."""
    if "load" in facts:
        kind, _, n = str(facts["load"]).partition(" ")
        return kind, to_int(n)
    t = text.strip().lower()
    if m := re.match(r"request rate ([\d.]+) (?:req/s|qps)", t):
        rate = float(m.group(1))
        total = re.search(r"(\d+) requests", t)
        if rate >= 100 and total:
            return "burst", int(total.group(1))
        ttft, tpot = to_float(row.get("ttft_ms", "")), to_float(row.get("tpot_ms", ""))
        if ttft is None or tpot is None:
            return "an open-loop request rate without both TTFT and TPOT: its concurrency is unknown"
        return "rate", max(1, round(rate * (ttft + output_len * tpot) / 1000.0))
    if count := to_int(t):
        return "batch", count
    if t.startswith("max load"):
        return "max", None
    if m := re.match(r"(?:max concurrency|concurrency)\s*(\d+)", t):
        return "batch", int(m.group(1))
    if m := re.match(r"(\d+)\s*(?:requests|prompts)\s*sent at once", t):
        return "burst", int(m.group(1))
    if m := re.match(r"(\d+)\s*\(", t):
        return "batch", int(m.group(1))
    return f"load '{text}' is not a batch, a concurrency or maximum load (open-loop request rates are not modelled)"


def engine_of(text: str, aliases: Aliases) -> str | None:
    for pattern, engine in aliases.engines.items():
        if re.search(pattern, text, re.IGNORECASE):
            return engine
    return None


def _lengths(row, facts, assume) -> tuple[int, int, bool, int] | str:
    """(input, output, variable, most output): each length from the source's text for the row, else
    the mean its token totals imply (notes), else the CSV cell, else the source's assumption; where
    lengths vary, the most a request may generate as the row states it (``_output_limit``), else 0.

    The totals win over the cell: a benchmark's configured output length is a cap that requests
    stop short of at their end-of-sequence token unless the client ignores it (GPUStack's random
    4,000/200 runs generated 105-184 tokens per request), and throughput follows what was
    generated. Lengths read from a dataset's totals (ShareGPT) are means of lengths that vary."""
    means = MEAN_LENGTHS.search(row.get("notes", ""))
    out: list[int | None] = []
    variable = False
    for i, key in enumerate(("input_len", "output_len")):
        value = facts.get(key)
        if value is None and means:
            value, variable = int(means.group(i + 1)), variable or _length(row[key]) is None
        value = value or _length(row[key])
        if value is None and assume.get(key):
            value, variable = int(assume[key]), variable or not _length(row[key])
        out.append(value)
    if out[0] is None or out[1] is None:
        return f"request lengths not stated as numbers ({row['input_len']} / {row['output_len']})"
    return out[0], out[1], variable, _output_limit(row["output_len"]) if variable else 0


def _output_limit(cell: str) -> int:
    """The most tokens a request may generate where lengths vary, as the row states it ("up to
    150": a max_tokens that requests stop short of at EOS; "random 1-1024": uniform lengths up to
    1,024); 0 where it is not stated (ShareGPT's own lengths)."""
    m = re.match(r"\s*(?:up to|random 1\s*-)\s*([\d,]+)", cell)
    return int(m.group(1).replace(",", "")) if m else 0


def _measured(row, ignore: tuple[str, ...], rate: bool = False,
              static_run: float | None = None) -> tuple[tuple[str, float], ...]:
    """(metric, value) of every measurement the row gives and the source does not ``ignore``; at an
    open-loop request ``rate`` the throughput is the rate's, so only the latencies are compared.

    A row that times one static batch end to end (``e2e_latency_s``: vLLM's benchmark_latency.py,
    one generate call of ``b`` prompts of ``output_len`` tokens each with EOS ignored) produced
    ``static_run`` = replicas × b × output_len tokens in that time (over the GPUs, where the source
    counts per GPU): its output throughput by definition, and the figure compared."""
    if rate:
        ignore += ("output_tokens_per_s", "total_tokens_per_s")
    out = []
    for metric, column in (("output_tokens_per_s", "throughput_output_tok_s"),
                           ("total_tokens_per_s", "throughput_total_tok_s"), ("ttft_ms", "ttft_ms"),
                           ("tpot_ms", "tpot_ms")):
        value = measured_value(row[column])
        if value and metric not in ignore:
            out.append((metric, value))
    seconds = measured_value(row.get("e2e_latency_s"))
    if seconds and static_run and not any(m == "output_tokens_per_s" for m, _ in out):
        out.append(("output_tokens_per_s", static_run / seconds))
    if any(m == "output_tokens_per_s" for m, _ in out):
        out = [(m, v) for m, v in out if m != "total_tokens_per_s"]
    return tuple(out)


def serving_case(row: dict[str, str], catalog: Catalog, aliases: Aliases, sources) -> ServingCase | str:  # noqa: C901 (one check per way a row can fail)
    """A row as a replica under a load, or the reason the model cannot express it."""
    found = claimed(row, sources, ("gpu_count", "tp", "pp"))
    if isinstance(found, str):
        return found
    source, facts = found
    assume = source.assume
    model_id = facts.get("model") or aliases.models.get(row["model"])
    if model_id is None or model_id not in catalog.models:
        return f"model '{row['model']}' has no preset (calibration/aliases.yaml)"
    place = aliases.gpus.get(row["gpu"])
    if place is None or place.gpu not in catalog.gpus:
        return f"GPU '{row['gpu']}' is not mapped to a catalog part (calibration/aliases.yaml)"
    fmt = aliases.precisions.get(facts.get("precision") or row["precision"])
    if fmt is None:
        return f"precision '{row['precision']}' is not mapped (calibration/aliases.yaml)"
    lengths = _lengths(row, facts, assume)
    if isinstance(lengths, str):
        return lengths
    load = _load(row["batch_or_concurrency"], facts, row, lengths[1])
    if isinstance(load, str):
        return load
    count = to_int(row["gpu_count"]) or 1
    split = facts.get("split") or assume.get("split")
    tp = to_int(row["tp"]) or (1 if split == "layer" else count)
    pp = to_int(row["pp"]) or (count if split == "layer" else 1)
    if count % (tp * pp):
        return f"{count} GPUs is not a multiple of TP {tp} x PP {pp}"
    named = facts.get("engine") or engine_of(row["engine"], aliases) or source.stack
    engine_id = catalog.stack("serving", named, place.gpu).id  # CatalogError, with a suggestion, if unknown
    hw = _hardware(catalog, place.gpu, place.server, tp * pp)
    if isinstance(hw, str):
        return hw
    plan = ServePlan(tp=tp, pp=pp, precision=fmt.weights, kv_precision=fmt.kv, input_len=lengths[0],
                     output_len=lengths[1], batching=facts.get("batching") or assume.get("batching", "continuous"),
                     attention_dp=bool(facts.get("attention_dp", assume.get("attention_dp", False))),
                     online=bool(facts.get("online", assume.get("online", True))), variable_lengths=lengths[2],
                     max_output_len=lengths[3],
                     token_budget=int(facts.get("token_budget", assume.get("token_budget", 0))),
                     **catalog.serve_plan_traits(place.gpu, engine_id))
    model = catalog.models[model_id].spec()
    burst = load[1] if load[0] == "burst" else (assume.get("requests", 0) if load[0] == "max" else 0)
    replica = _replica(model, hw, plan, load[0], load[1] or 0, int(burst or 0))  # only maximum load has no size
    if isinstance(replica, str):
        return replica
    kind, (batch, plan, terms) = load[0], replica
    scale = 1.0 / (tp * pp) if facts.get("per_gpu", assume.get("per_gpu")) else float(count // (tp * pp))
    static = scale * batch * plan.output_len if kind == "batch" and plan.batching == "static" else None
    if not (measured := _measured(row, tuple(facts.get("ignore", assume.get("ignore", ()))), kind == "rate", static)):
        return "no measured throughput or latency in the row" + (
            " (e2e_latency_s is read for a static batch only)" if row.get("e2e_latency_s") else "")
    at_spec = replace(terms, peak=spec_gemm_peak(hw.device, plan)) if kind == "batch" else terms
    if kind == "batch" and (why := above_roofline(at_spec, scale, measured)):
        return why
    config = (f"{model_id} {plan.precision}/{plan.kv_precision}-kv on {count} x {place.gpu} TP{tp} PP{pp}"
              f"{' attention-DP' if plan.attention_dp else ''} "
              f"[{engine_id}], {plan.input_len}/{plan.output_len}, {load[0]} batch {batch}"
              f"{f' in waves of {terms.batch:g}' if terms.batch < batch else ''}")
    return ServingCase(row["id"], source.id, engine_id, catalog.gpus[place.gpu].family, plan.precision,
                       _regime(load[0], batch, lengths[2]), config, model, hw, plan, terms, scale, measured)


def above_roofline(terms: ServeTerms, scale: float, measured: tuple[tuple[str, float], ...]) -> str | None:
    """Why a row at a stated batch is faster than its hardware allows, if it is.

    At the roofline (Williams et al. 2009) every decode step reads the weights, and the experts its
    tokens route to, at the GPUs' spec bandwidth, with every GEMM at the spec peak (``terms.peak``
    as the caller gives it: the spec, not the measured ceiling the model's GEMMs are counted
    against), no overhead and no time on the links between GPUs.
    A throughput above that, or a TPOT below it, cannot have been measured on the stated workload:
    most likely fewer tokens were generated than the row says (a script that stops at the end-of-
    sequence token, as TensorRT-LLM's examples/run.py does unless given ``--end_id``). The experts
    read are those a uniform router touches (``decode_weight_bytes``): strict once a batch touches
    them all, as Mixtral's 8 do at batch 16; a skewed router touches fewer at a small batch."""
    free_links = replace(terms, comm_bw=0.0, comm_latency=0.0, send=0.0, prefill_comm_bw=0.0,
                         prefill_comm_latency=0.0, prefill_send=0.0)  # a catalog link's efficiency is fitted
    best = serve_time(free_links, ROOFLINE)
    rate = float(best.output_tokens_per_s) * scale
    bound = {"output_tokens_per_s": rate,
             "total_tokens_per_s": rate * (terms.input_len + terms.output_len) / terms.output_len}
    for metric, value in measured:
        if metric in bound and value > bound[metric]:
            return (f"{metric} {value:,.0f} is above the roofline's {bound[metric]:,.0f} (weights read at the "
                    "spec bandwidth every step): fewer tokens than stated were generated, or the setup is "
                    "not as stated")
        if metric == "tpot_ms" and value < best.decode_step * 1e3:
            return (f"tpot_ms {value:g} is below the roofline's decode step of {best.decode_step * 1e3:.3g} ms: "
                    "the setup is not as stated")
    return None


def _replica(model: ModelSpec, hw: Hardware, plan: ServePlan, kind: str, size: int,
             burst: int) -> tuple[int, ServePlan, ServeTerms] | str:
    """The row's batch, its plan and the terms of what runs at once, or why the model cannot run it.

    A static batch whose KV cache does not fit at full length runs in waves of what does
    (``full_length_batch``): its throughput is that of one wave."""
    try:
        cap = max_batch(model, hw, plan)
        batch = cap if kind == "max" else (size if kind in ("batch", "rate") else min(size, cap))
        waves = kind == "batch" and plan.batching == "static"
        wave = min(batch, full_length_batch(model, hw, plan)) if waves else batch
        needed = sum(serve_memory(model, plan, max(wave, 1)).values())  # wave is batch without waves
        if cap < 1 or wave < 1 or (kind in ("batch", "rate") and needed > hw.device.memory):
            return f"the model says it does not fit ({needed / 1e9:,.1f} GB per GPU of {hw.device.memory / 1e9:,.0f})"
        plan = replace(plan, batch=batch, requests=burst)
        return batch, plan, serve_terms(model, hw, replace(plan, batch=wave), wave)
    except ValueError as exc:
        return str(exc)


def _hardware(catalog: Catalog, gpu: str, server: str | None, gpus: int) -> Hardware | str:
    """The first server (the one named, if any) that holds a replica of ``gpus`` GPUs, or why none does."""
    servers = [s for s in catalog.servers_for(gpu) if s.slots >= gpus and server in (None, s.id)]
    if not servers:
        return f"no server in the catalog holds {gpus} x {gpu} in one replica"
    return catalog.hardware(gpu, servers[0].id, None)


def _regime(load: str, batch: int, variable: bool) -> str:
    """The regime a row is reported under: maximum load, request rate, batch 1 or a fixed batch."""
    regime = ("maximum load" if load in ("max", "burst") else "request rate" if load == "rate" else
              ("batch 1" if batch == 1 else "fixed batch or concurrency"))
    return regime + (", variable lengths" if variable else "")


def serving_cases(catalog: Catalog, aliases: Aliases, sources, data_dir=None):
    """(cases, skipped) over every serving row: skipped is (row id, source id, reason)."""
    return collect_cases("serving", lambda row: serving_case(row, catalog, aliases, sources), sources, data_dir)
