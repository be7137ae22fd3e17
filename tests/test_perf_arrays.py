"""The training model over arrays agrees with the scalar reference, to the bit: term by term on
varied plans, band by band on every candidate of the shipped examples, and table for table with
the one-plan-at-a-time enumeration on small problems."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from optimizer.catalog import Catalog
from optimizer.perf import train, train_arrays
from optimizer.perf.goodput import goodput
from optimizer.perf.memory import training_memory
from optimizer.perf.specs import RECOMPUTE_MODES, evolve
from optimizer.plans.train import Setup, band_rate, enumerate_plans
from optimizer.problem import confidence_factor, load_priced
from tests.conftest import ROOT, TINY

PLANS = [  # (tp, pp, dp, micro-batch, micro-batches, recompute, ZeRO, cp, ep, virtual stages)
    (1, 1, 1, 1, 1, "none", 0, 1, 1, 1), (2, 1, 8, 2, 4, "selective", 1, 1, 1, 1),
    (8, 4, 64, 1, 16, "full", 1, 1, 1, 4), (4, 2, 512, 4, 8, "selective", 3, 1, 1, 1),
    (2, 8, 3, 1, 8, "none", 2, 2, 1, 2), (1, 2, 12, 2, 4, "full", 0, 4, 1, 1),
    (8, 16, 1000, 1, 32, "selective", 1, 1, 1, 1), (16, 1, 4, 1, 1, "selective", 1, 1, 1, 1),
]
MOE_PLANS = [(1, 1, 8, 1, 1, "none", 1, 1, 8, 1), (2, 4, 16, 1, 8, "selective", 3, 1, 4, 2),
             (4, 2, 64, 2, 4, "full", 1, 1, 2, 1), (1, 1, 1, 1, 1, "selective", 0, 1, 1, 1)]


def _columns(rows: list[tuple], seq_len: int, flash: bool = True, precision: str = "bf16") -> train_arrays.PlanArrays:
    cols = [np.array([r[i] if i != 5 else RECOMPUTE_MODES.index(r[i]) for r in rows]) for i in range(10)]
    return train_arrays.PlanArrays(*cols, precision=precision, seq_len=seq_len, flash_attention=flash)


def _hardware(catalog: Catalog, gpu: str):
    groups = {"h100-sxm": ("hgx-hopper-8", "ib-ndr-8"), "a100-sxm-80gb": ("hgx-ampere-8", "ib-hdr-1"),
              "rtx-4090": ("desktop-4", "eth-10g-1"), "mi300x": ("oam-mi300x-8", "ib-ndr-8")}
    server, fabric = groups[gpu]
    return catalog.hardware(gpu, server, fabric)


@pytest.mark.parametrize("gpu, precision", [("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("a100-sxm-80gb", "bf16"),
                                            ("rtx-4090", "bf16"), ("mi300x", "bf16")])  # mi300x: a mesh link
@pytest.mark.parametrize("model, rows, flash", [("llama2-70b", PLANS, True), ("llama2-7b", PLANS, False),
                                                ("mixtral-8x7b", MOE_PLANS + PLANS[:4], True)])
def test_terms_and_memory_over_arrays_are_the_scalar_models_to_the_bit(catalog, gpu, precision, model, rows, flash):
    m = catalog.models[model].spec()
    hw = _hardware(catalog, gpu)
    rows = [r for r in rows if m.layers >= r[1] and not m.heads % r[0]]
    plans = _columns(rows, m.seq_len, flash, precision)
    terms = train_arrays.train_terms(m, hw, plans)
    memory = train_arrays.training_memory(m, plans, 2e9)
    for i in range(len(rows)):
        plan = plans.plan(i)
        plan = evolve(plan, flash_attention=flash)
        scalar = train.train_terms(m, hw, plan)
        for f in fields(scalar):
            assert float(np.asarray(getattr(terms, f.name))[()] if np.ndim(getattr(terms, f.name)) == 0
                         else getattr(terms, f.name)[i]) == float(getattr(scalar, f.name)), (plan, f.name)
        assert memory[i] == training_memory(m, plan, 2e9).total, plan


def test_log2_is_math_log2_where_numpy_differs():
    n = np.array([1621, 3242, 7957, 104703, 70_000, 1])  # numpy's log2 is a bit off at the first four
    assert list(train_arrays.log2(n)) == [math.log2(int(x)) for x in n]


def _training_examples() -> list[Path]:
    return [p for p in sorted((ROOT / "problems").glob("*.yaml")) if "kind: serve" not in p.read_text()
            and "workloads:" not in p.read_text()]


@pytest.mark.parametrize("path", _training_examples(), ids=lambda p: p.stem)
def test_every_candidate_of_the_shipped_examples_is_rated_as_the_scalar_model_rates_it(catalog, path):
    problem, priced = load_priced(path, catalog)
    w = problem.training
    table = enumerate_plans(problem, priced)
    assert table.candidates
    gpus = {g.gpu for g in table.groups.values()}
    setups = {gpu: Setup(priced.train_params(gpu, w.precision, w.stack), priced.efficiency.reserved_memory,
                         priced.train_plan_traits(gpu, w.stack),
                         c.value if (c := priced.mfu_ceiling(gpu, w.precision)) else math.inf) for gpu in gpus}
    for c in table.candidates:
        g = table.groups[c.group]
        hw = priced.hardware(g.gpu, g.server, g.fabric)
        scale = confidence_factor(problem, priced, g.gpu) * goodput(
            c.dp_max * c.gpus_per_replica, g.reliability(problem.reliability)).fraction
        rate = band_rate(w, g, (hw, hw.oversubscribed(g.oversubscription)), setups[g.gpu], c.plan, c.dp_min,
                         c.dp_max, scale)
        assert rate == c.replica_tokens_per_s, c.key


@pytest.mark.parametrize("edit", [
    ("", ""),  # one or a few servers of A100s or L40S
    ("max_gpus: 64}", "max_gpus: 512}"),  # multi-node bands, where data-parallel traffic grows
    ("tokens: 20B", "tokens: 200B"),  # a tighter deadline: more of the plans are bound by the batch cap
    ("zero: [1]}", "zero: [0, 1, 2, 3], virtual_stages: [1, 2, 4], pp: [1, 2, 4, 8]}"),  # every ZeRO stage
])
def test_array_enumeration_gives_the_reference_table(tmp_path, catalog, edit):
    path = tmp_path / "p.yaml"
    text = TINY.replace(*edit)
    if "virtual_stages" in edit[1]:
        text = text.replace("search: {pp: [1, 2], ", "search: {")
    path.write_text(text)
    problem, priced = load_priced(path, catalog)
    fast, reference = enumerate_plans(problem, priced), enumerate_plans(problem, priced, reference=True)
    assert fast.candidates == reference.candidates and fast.candidates
    assert (fast.pruned, fast.dropped, fast.enumerated, fast.gpu_reasons) == (
        reference.pruned, reference.dropped, reference.enumerated, reference.gpu_reasons)


SERVE_PLANS = [dict(tp=1, pp=1), dict(tp=2, pp=1, precision="fp8", kv_precision="fp8"), dict(tp=1, pp=4),
               dict(tp=2, pp=2, batching="static"), dict(tp=4, pp=1, prefill_ubatch=512, input_len=2048),
               dict(tp=8, pp=1, attention_dp=True), dict(tp=1, pp=2, requests=300, variable_lengths=True),
               dict(tp=2, pp=1, paged_v1v2=True, input_len=2048), dict(tp=1, pp=1, overlap_scheduler=True),
               dict(tp=2, pp=2, mixed_batching=True),
               dict(tp=1, pp=1, precision="mxfp4", gpu="b200"), dict(tp=2, pp=1, precision="nvfp4", gpu="b200")]


@pytest.mark.parametrize("model", ["llama3.1-8b", "llama2-70b", "qwen3-30b-a3b", "gpt-oss-120b", "qwen3.5-9b",
                                   "qwen3.5-35b-a3b"])
@pytest.mark.parametrize("fields_", SERVE_PLANS, ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
def test_serve_terms_over_batches_are_the_scalar_models_to_the_bit(catalog, model, fields_):
    from optimizer.perf.serve import ServePlan, serve_terms
    from optimizer.perf.serve_arrays import serve_terms_at

    m = catalog.models[model].spec()
    if fields_.get("attention_dp") and not m.moe:
        pytest.skip("attention data parallelism is an MoE layout")
    fields_ = dict(fields_)
    hw = (catalog.hardware("b200", "hgx-blackwell-8", None) if fields_.pop("gpu", "") == "b200"
          else catalog.hardware("h100-sxm", "hgx-hopper-8", None))
    plan = ServePlan(**{"input_len": 512, "output_len": 256, "precision": "bf16", "kv_precision": "bf16", **fields_})
    batches = np.array([1, 2, 3, 7, 8, 9, 64, 255, 1000])
    at = serve_terms_at(m, hw, plan, batches)
    for i, b in enumerate(batches):
        scalar = serve_terms(m, hw, plan, int(b))
        for f in fields(scalar):
            value = getattr(at, f.name)
            assert float(value[i] if np.ndim(value) else value) == float(getattr(scalar, f.name)), (b, f.name)


@pytest.mark.parametrize("limits", [(0.05, None), (None, 0.5), (0.03, 0.2), (0.2, 2.0), (1e-4, None)])
def test_batch_at_slo_over_arrays_is_the_bisection_of_the_scalar_model(catalog, limits):
    from optimizer.perf.serve import ServePlan, max_batch
    from optimizer.perf.serve_arrays import batch_at_slo, one_at_a_time

    for model, gpu, server in (("llama3.1-8b", "l40s", "pcie-8"), ("llama2-70b", "h100-sxm", "hgx-hopper-8"),
                               ("qwen3-30b-a3b", "a100-sxm-80gb", "hgx-ampere-8")):
        m, hw = catalog.models[model].spec(), catalog.hardware(gpu, server, None)
        params = catalog.serve_params(gpu, "fp16", "vllm")
        for plan in (ServePlan(tp=1, pp=1), ServePlan(tp=2, pp=2), ServePlan(tp=4, pp=1, input_len=4096)):
            if not max_batch(m, hw, plan):
                continue
            assert batch_at_slo(m, hw, plan, params, *limits) == one_at_a_time(m, hw, plan, params, *limits), \
                (model, gpu, plan.tp, plan.pp, limits)
