"""Training candidates of one GPU, evaluated over arrays: every template and dp band of a hardware
group in one pass of the performance model (``perf.train_arrays``), then the bands some other band
strictly dominates dropped before any ``Candidate`` is built.

It gives the table ``plans.train``'s one-plan-at-a-time enumeration (the reference) gives, to the
bit: the templates, dp ranges, bands, step times, MFU guard and goodput are the same formulas in the
same order, and dropping a strictly dominated band early changes nothing ``prune_dominated`` keeps
(whatever dominates the band's dominator dominates the band too, and a band strictly beaten never
survives to drop another). ``tests/test_perf_arrays.py`` checks the two tables are equal.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.catalog import TrainTraits
from optimizer.perf import train_arrays as arrays
from optimizer.perf.goodput import fraction as goodput_fraction
from optimizer.perf.params import Num, TrainParams
from optimizer.perf.specs import RECOMPUTE_MODES, Hardware, TrainPlan, evolve
from optimizer.perf.train import TrainTerms, step_time
from optimizer.plans.groups import Group, max_gpus
from optimizer.plans.table import Candidate
from optimizer.problem import Problem, TrainWorkload, tp_fits

NODE_BANDS = (2, 8, 32, 128, 512, 2048, 8192, 32768)


@dataclass(frozen=True)
class Templates:
    """A GPU's plan templates: ``combos`` are (tp, cp, ep, pp, micro-batch, recompute, ZeRO) with
    the least dp that fits in memory (-1: none does) and the memory needed at the dp cap;
    ``plans`` are the templates that fit, one row per micro-batches-per-stage and interleaving,
    ``combo`` and ``stage`` (its combo and micro-batch count) naming where each came from."""

    combos: arrays.PlanArrays  # dp: least dp (units of ep replicas) that fits, -1 when none
    need_gb: np.ndarray  # per combo: memory per GPU at the dp cap
    stages: np.ndarray  # (combo, micro-batches per stage) pairs of the combos that fit
    plans: arrays.PlanArrays  # dp: the least that fits
    stage: np.ndarray  # per plan: its row in ``stages``


@dataclass(frozen=True)
class Setup:
    """What a GPU on the problem's stack brings to every plan: efficiency, memory reserve, traits."""

    params: TrainParams
    reserved: float
    traits: TrainTraits
    mfu_ceiling: float = math.inf  # the highest MFU published dense runs reached (catalog.mfu_ceiling)


def templates(problem: Problem, w: TrainWorkload, capacity: float, reserved: float,
              traits: TrainTraits) -> Templates:
    """Every grid point the model shape allows, with the memory it needs (group-independent)."""
    m, search = w.model, problem.search
    eps = [e for e in search.ep if e == 1 or (m.moe and e <= m.experts)] if m.moe else [1]
    rows = [(tp, pp, ep, b, pp, RECOMPUTE_MODES.index(rc), zero, cp, ep, 1)
            for tp in search.tp for cp in search.cp for ep in eps if tp_fits(m, tp) and not w.seq_len % cp
            for pp in search.pp if pp <= m.layers
            for b in search.micro_batch for rc in search.recompute for zero in search.zero]
    combos = _columns(rows, w, traits)
    dp_cap = np.maximum(1, problem.max_gpus // combos.unit_gpus)
    dp_fit = arrays.min_dp_that_fits(m, combos, capacity, reserved, dp_cap)
    need = np.where(dp_fit < 0, arrays.training_memory(m, evolve(combos, dp=dp_cap * combos.ep), reserved) / 1e9, 0.0)
    combos = evolve(combos, dp=dp_fit)
    # (combo, micro-batches per stage) pairs of the combos that fit, then each with its interleaving
    fit = np.flatnonzero(dp_fit >= 0)
    per_stage = np.array(search.micro_batches_per_stage)
    stages = np.stack([np.repeat(fit, len(per_stage)), np.tile(per_stage, len(fit))], axis=1).reshape(-1, 2)
    stage = np.repeat(np.arange(len(stages)), len(search.virtual_stages))
    v = np.tile(np.array(search.virtual_stages), len(stages))
    plans = combos.take(stages[stage, 0])
    plans = evolve(plans, num_micro_batches=stages[stage, 1] * plans.pp, virtual_stages=v)
    # interleaving needs PP and a layer per chunk (uneven is fine), and keeps more micro-batches in
    # flight: its memory is checked again at the least dp
    keep = (v == 1) | ((plans.pp > 1) & (plans.pp * v <= m.layers))
    keep[keep] &= (v[keep] == 1) | (arrays.training_memory(m, evolve(plans.take(keep), dp=plans.dp[keep]), reserved)
                                    <= capacity)
    return Templates(combos, need, stages, plans.take(keep), stage[keep])


COLUMNS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero", "cp", "ep", "virtual_stages")


def _columns(rows: Sequence[tuple[int, ...]], w: TrainWorkload, traits: TrainTraits) -> arrays.PlanArrays:
    """Rows of (COLUMNS) as plan columns on the workload's precision and sequence length."""
    cols = np.array(rows, dtype=np.int64).reshape(-1, len(COLUMNS)).T
    return arrays.PlanArrays(**dict(zip(COLUMNS, cols, strict=True)), precision=w.precision, seq_len=w.seq_len,
                             flash_attention=traits["flash_attention"], grad_reduce_bytes=traits["grad_reduce_bytes"])


def group_candidates(problem: Problem, w: TrainWorkload, group: Group, links: tuple[Hardware, Hardware],
                     setup: Setup, t: Templates, reasons: Counter[str], factor: float
                     ) -> tuple[int, tuple[float, str] | None, list[Candidate], int]:
    """The group's candidates: (templates tried, least memory that failed, candidates, bands
    dropped as strictly dominated), counting drop reasons into ``reasons``."""
    c, multi = t.combos, group.fabric is not None
    ok = (c.tp * c.cp <= group.slots) & (multi | (c.unit_gpus <= group.slots))
    failed = ok & (c.dp < 0)
    _count(reasons, "memory", failed)
    least = None
    if failed.any():
        i = int(np.flatnonzero(failed)[np.argmin(t.need_gb[failed])])
        least = (float(t.need_gb[i]), f"TP={c.tp[i]} PP={c.pp[i]} CP={c.cp[i]} micro-batch {c.micro_batch[i]}, "
                                      f"{RECOMPUTE_MODES[c.recompute[i]]} recompute, ZeRO-{c.zero[i]}")
    combo = t.stages[:, 0]
    seqs = c.micro_batch[combo] * t.stages[:, 1] * c.pp[combo] * c.ep[combo]
    lo, hi = _dp_range(problem, w, group, c.unit_gpus[combo], seqs, c.dp[combo])
    asked = ok[combo]
    _count(reasons, "batch/size", asked & (lo > hi))
    rows = np.flatnonzero((asked & (lo <= hi))[t.stage])
    if not len(rows):
        return int(ok.sum()), least, [], 0
    plans = t.plans.take(rows)
    tpl, band_lo, band_hi = _bands(lo[t.stage[rows]], hi[t.stage[rows]], np.maximum(1, group.slots // plans.unit_gpus),
                                   multi)
    bands = plans.take(tpl)
    rate, dropped = _rates(w, group, links, setup, bands, band_lo, band_hi,
                           factor * goodput_fraction(band_hi * bands.unit_gpus, group.reliability(problem.reliability)))
    _count(reasons, "mfu ceiling", dropped)  # faster than any published run: a model error
    mp = bands.unit_gpus
    keep = ~dropped
    keep[keep] = ~_strictly_dominated(mp[keep], band_lo[keep], band_hi[keep], rate[keep] / mp[keep])
    out = [candidate(group, bands.plan(int(i)), int(band_lo[i]), int(band_hi[i]), float(rate[i]))
           for i in np.flatnonzero(keep)]
    return int(ok.sum()), least, out, int((~dropped).sum()) - len(out)


def _count(reasons: Counter[str], reason: str, rows: np.ndarray) -> None:
    """Count the rows where ``rows`` holds under ``reason`` (no entry for none, as one at a time)."""
    if n := int(rows.sum()):
        reasons[reason] += n


def _dp_range(problem: Problem, w: TrainWorkload, group: Group, mp: np.ndarray, seqs: np.ndarray,
              dp_fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``plans.train._dp_range`` per row: the dp the batch limits, the GPU bound and the group allow
    (empty where lo > hi)."""
    lo = np.maximum(np.maximum(dp_fit, -(-w.min_global_batch // seqs)), -(-group.rent_min_gpus // mp))
    hi = np.minimum(w.max_global_batch // seqs, max_gpus(problem, group) // mp)
    if group.fabric is None:
        return lo, np.minimum(hi, group.slots // mp)
    return np.maximum(lo, group.slots // mp + 1), hi


def _bands(lo: np.ndarray, hi: np.ndarray, per_node: np.ndarray, multi: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``plans.train._dp_bands`` per row: (row, band lo, band hi) of every band, the range split at
    node-count boundaries so each band's worst case is close to its best."""
    rows = np.arange(len(lo))
    if not multi:
        return rows, lo, hi
    parts, start = [], lo
    for nodes in NODE_BANDS:
        end = np.minimum(hi, nodes * per_node)
        made = end >= start
        parts.append((rows[made], start[made], end[made]))
        start = np.where(made, end + 1, start)
    last = start <= hi
    parts.append((rows[last], start[last], hi[last]))
    order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
    return tuple(np.concatenate([p[k] for p in parts])[order] for k in range(3))  # type: ignore[return-value]


def _terms_at(w: TrainWorkload, links: tuple[Hardware, Hardware], group: Group, plans: arrays.PlanArrays,
              dp: np.ndarray) -> TrainTerms:
    """``plans.train._terms_at`` per row: the terms at ``dp`` (units of ep replicas), across leaves
    once the servers span them."""
    at = evolve(plans, dp=dp * plans.ep)
    servers = -(-(dp * plans.unit_gpus) // group.slots)
    terms = arrays.train_terms(w.model, links[0], at)
    if group.fabric is None or links[1] is links[0]:
        return terms
    spans = group.ports_per_server * servers > group.switch_ports
    return arrays.where_terms(spans, arrays.train_terms(w.model, links[1], at), terms) if spans.any() else terms


def _mfu(terms: TrainTerms, step: Num, gpus: np.ndarray) -> np.ndarray:
    """``plans.train._mfu`` per row: model FLOPs over the dense peak of the plan's precision."""
    return np.asarray(terms.model_flops_per_token * terms.tokens_per_step / gpus / step / terms.peak)


def _rates(w: TrainWorkload, group: Group, links: tuple[Hardware, Hardware], setup: Setup,
           bands: arrays.PlanArrays, lo: np.ndarray, hi: np.ndarray, scale: Num
           ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens/s per unit of ep replicas, dropped at the MFU ceiling) per band, as
    ``plans.train._add_bands`` rates them: the slowest step in the band (communication at its
    most dp, the sharded optimizer step at its least), and the guard at both ends."""
    terms = _terms_at(w, links, group, bands, hi)
    optimizer = np.where(bands.zero >= 1, terms.optimizer_bytes * hi / lo, terms.optimizer_bytes)
    parts = step_time(evolve(terms, optimizer_bytes=optimizer), setup.params)
    step = parts.total
    ceiling = setup.mfu_ceiling
    gpus = hi * bands.unit_gpus
    dropped = _mfu(terms, step, gpus) > ceiling
    floor = parts.compute + parts.layer_overhead + parts.tp_comm + parts.cp_comm + parts.ep_comm + parts.pp_comm
    check = np.flatnonzero(~dropped & (lo < hi) & (_mfu(terms, floor, gpus) > ceiling))
    if len(check):
        at_lo = _terms_at(w, links, group, bands.take(check), lo[check])
        dropped[check] = _mfu(at_lo, step_time(at_lo, setup.params).total,
                              lo[check] * bands.unit_gpus[check]) > ceiling
    return terms.tokens_per_step / hi / step * scale, dropped


def _strictly_dominated(mp: np.ndarray, lo: np.ndarray, hi: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Per band of one group: does another band strictly dominate it (``plans.table.dominates``
    at a strictly higher tokens/s per GPU)? For each GPUs-per-replica ``a``, the best rate of a
    range containing ``[x, y]`` is a 2-D running maximum over its ranges' (lo ascending, hi
    descending) grid, looked up at each band's range scaled to replicas of ``a`` GPUs."""
    out = np.zeros(len(mp), dtype=bool)
    for a in np.unique(mp):
        mine = mp == a
        los, his = np.unique(lo[mine]), np.unique(hi[mine])
        best = np.full((len(los), len(his)), -np.inf)
        np.maximum.at(best, (np.searchsorted(los, lo[mine]), np.searchsorted(his, hi[mine])), rate[mine])
        best = np.maximum.accumulate(np.maximum.accumulate(best, axis=0)[:, ::-1], axis=1)[:, ::-1]
        scaled = np.flatnonzero(mp % a == 0)
        k = mp[scaled] // a
        i = np.searchsorted(los, k * lo[scaled], side="right") - 1
        j = np.searchsorted(his, k * hi[scaled], side="left")
        inside = (i >= 0) & (j < len(his))
        top = np.where(inside, best[np.clip(i, 0, None), np.clip(j, None, len(his) - 1)], -np.inf)
        out[scaled] |= top > rate[scaled]
    return out


def candidate(group: Group, plan: TrainPlan, band_lo: int, band_hi: int, rate: float) -> Candidate:
    """The band ``[band_lo, band_hi]`` of ``plan`` on ``group`` as the MIP sees it: its plan at the
    band's most dp (where it was rated), named by its layout and band."""
    vp = f"v{plan.virtual_stages}" if plan.virtual_stages > 1 else ""
    cp = (f"-cp{plan.cp}" if plan.cp > 1 else "") + (f"-ep{plan.ep}" if plan.ep > 1 else "")
    key = (f"{group.key}/tp{plan.tp}-pp{plan.pp}{vp}{cp}-mb{plan.micro_batch}x{plan.num_micro_batches}"
           f"-{plan.recompute}-z{plan.zero}/dp{band_lo}-{band_hi}")
    return Candidate(key, group.key, evolve(plan, dp=band_hi * plan.ep), band_lo, band_hi, rate, 0.0)
