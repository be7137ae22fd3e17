"""Fit the efficiency parameters to published runs, and test them on sources left out.

The model (``optimizer.perf``) is evaluated for every row at once: each row's work at unit
efficiency (``train_terms`` / ``serve_terms``) is computed once, and the parameters of every row
are gathered from one vector. Each parameter has a default, and a value of its own for a GPU
family (or family and precision) or a stack where at least ``MIN_ROWS`` rows depend on it; a value
with fewer rows behind it is not created, so no parameter is a lookup of one row. The objective:

    Σ_sources Σ_rows∈source  w · ρ(log(predicted / measured))  +  λ · Σ_values ((v − parent) / width)²

with each source's rows sharing a total weight of 1 (FIDELITY.md section 1), ρ the soft-L1 loss
(a few odd rows cannot drag the fit), and each specific value shrunk toward its parent (a family's
toward the default, a family-and-precision's toward the family's, a stack's toward the stack it is
like, or the default): a value moves only as far as its rows insist. Solved by trust-region least
squares within every parameter's physical range (``scipy.optimize.least_squares``); deterministic.

Leave-one-source-out (``cross_validate``) refits without each source in turn and predicts that
source: its stack and GPU family keep only the values other sources support, which is exactly the
position of a buyer whose stack or GPU no source measured.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
from scipy.optimize import least_squares

from optimizer.catalog.efficiency_table import MULTIPLIER_RANGE, RELEASE_RATIO, Parameter
from optimizer.catalog.stacks import Efficiency
from optimizer.perf.params import ServeParams, TrainParams

MIN_ROWS = 3  # rows a specific value needs behind it
SHRINK = float(os.environ.get("GPUOPT_SHRINK", 0.1))  # λ: pull of a specific value toward its parent
PRIOR = float(os.environ.get("GPUOPT_PRIOR", 0.02))  # pull of a default toward its documented prior
LOSS_SCALE = 0.15  # soft-L1 knee, in log error (≈ 15 %)
SOURCE_SHRINK = float(os.environ.get("GPUOPT_SOURCE_SHRINK", 0))  # pull of a source's level toward 0
# stop once a step lowers the cost by less than this share: the serving fit's cost stops moving in its
# fifth digit after about 14 steps, and the default (1e-8) took 9 more for nothing
FTOL = 1e-5
TINY = 1e-9  # the floor of a value whose logarithm is taken


@dataclass(frozen=True)
class Observation:
    case: int  # index into the cases
    metric: str
    measured: float
    weight: float


@dataclass
class Slot:
    """One free value: a parameter's default, or its value for a family / stack."""

    param: str
    key: str  # "default", "hw:<family[/precision]>", "stack:<id>"
    start: float
    lo: float
    hi: float
    parent: int  # slot it shrinks toward (-1: the prior)
    center: float  # the prior (for defaults) or 0 (for multipliers, in log space)
    width: float
    log: bool  # a stack multiplier: shrinks toward 1 in log space


class Layout:
    """Which values are free and which slot each row's parameters read."""

    def __init__(self, kind: str, eff: Efficiency, contexts: list[tuple[str, str, str]],
                 sensitive: dict[str, np.ndarray], rows_of: list[int]) -> None:
        self.kind = kind
        table = eff.table.training if kind == "training" else eff.table.serving
        self.params = table
        self.slots: list[Slot] = []
        self.hw_index: dict[str, np.ndarray] = {}
        self.stack_index: dict[str, np.ndarray] = {}
        # a release_trend parameter: earlier releases between each row's engine and the value it reads,
        # and the (earlier release, its successor) value pairs whose ratios give ``release_overhead``
        self.release_hops: dict[str, np.ndarray] = {}
        self.release_pairs: list[tuple[int, int]] = []
        self.release_names: list[str] = []  # "vllm-0.7/vllm step_overhead", one per pair
        self.shrink_hops: dict[int, int] = {}  # slot → earlier releases between it and the value it shrinks toward
        n = len(contexts)
        for name, p in table.items():
            lo, hi = p.range
            width = (hi - lo) or 1.0
            default = self._add(Slot(name, "default", _prior(p), lo, hi, -1, _prior(p), width, False))
            hw = np.full(n, default)
            st = np.full(n, -1)
            uses = sensitive[name]
            hw_keys = self._hardware_keys(eff, contexts, uses, rows_of) if "hardware" in p.by else {}
            for key in sorted(hw_keys, key=lambda k: (k.count("/"), k)):
                family = key.split("/")[0]
                parent = self._find(name, f"hw:{family}") if "/" in key else default
                slot = self._add(Slot(name, f"hw:{key}", _prior(p), lo, hi,
                                      parent if parent >= 0 else default, 0.0, width, False))
                for i in hw_keys[key]:
                    hw[i] = slot
            if "stack" in p.by:
                st = self._stack_slots(name, p, eff, contexts, uses, rows_of, default)
            self.hw_index[name] = hw
            self.stack_index[name] = st
        self._gather = _Gather(self)

    def _add(self, slot: Slot) -> int:
        self.slots.append(slot)
        return len(self.slots) - 1

    def _find(self, param: str, key: str) -> int:
        return next((i for i, s in enumerate(self.slots) if s.param == param and s.key == key), -1)

    def _hardware_keys(self, eff: Efficiency, contexts, uses: np.ndarray, rows_of: list[int]) -> dict[str, list[int]]:
        """family and family/precision keys with enough rows; each row mapped to its most specific."""
        counts: dict[str, set[int]] = {}
        for i, (family, precision, _) in enumerate(contexts):
            if uses[i]:
                for key in (family, f"{family}/{precision}"):
                    counts.setdefault(key, set()).add(rows_of[i])
        keys = {k for k, rows in counts.items() if len(rows) >= MIN_ROWS}
        out: dict[str, list[int]] = {}
        for i, (family, precision, _) in enumerate(contexts):
            for fam in eff.family_chain(family):
                key = next((k for k in (f"{fam}/{precision}", fam) if k in keys), None)
                if key:
                    out.setdefault(key, []).append(i)
                    break
        for key in keys:
            if "/" in key and key.split("/")[0] not in keys:
                out.setdefault(key.split("/")[0], [])  # a family/precision value needs its family's parent
        return out

    def _stack_slots(self, name: str, p: Parameter, eff: Efficiency, contexts, uses, rows_of, default: int):
        """A value per stack (and, for a kernel efficiency, per stack on a GPU family, or on a family
        at a precision: ``Efficiency.stack_keys``) that at least ``MIN_ROWS`` rows read, itself or
        through a more specific value shrunk toward it."""
        kind: Literal["training", "serving"] = "training" if self.kind == "training" else "serving"
        memo: dict[tuple[str, str, str], list[str]] = {}

        def keys_of(stack: str, family: str, precision: str) -> list[str]:
            if (stack, family, precision) not in memo:
                memo[stack, family, precision] = eff.param_stack_keys(kind, p, stack, family, precision)
            return memo[stack, family, precision]
        candidates = [keys_of(stack, family, precision) if uses[i] else []
                      for i, (family, precision, stack) in enumerate(contexts)]
        keys = {k for cs in candidates for k in cs}
        while True:  # drop the values too few rows read until every one left has enough
            parent = {k: next((g for g in _more_general(eff, kind, k) if g in keys), None) for k in keys}
            readers: dict[str, set[int]] = {k: set() for k in keys}
            for i, cs in enumerate(candidates):
                key = next((c for c in cs if c in keys), None)
                while key is not None:
                    readers[key].add(rows_of[i])
                    key = parent[key]
            # too few rows, or (a value per family) no rows beyond those of one more specific value
            weak = {k for k in keys if len(readers[k]) < MIN_ROWS
                    or "@" in k and any(parent[c] == k and readers[c] == readers[k] for c in keys)}
            if not weak:
                break
            keys -= weak
        slot_of: dict[str, int] = {}
        for key in sorted(keys, key=lambda k: (len(_more_general(eff, kind, k)), k)):
            up = slot_of[up_key] if (up_key := parent[key]) else -1
            if p.multiply:
                slot = Slot(name, f"stack:{key}", 1.0, *MULTIPLIER_RANGE, up, 0.0, 1.0, True)
            else:
                lo, hi = p.range
                # an unpooled parameter's stack values say nothing of each other's or the default's
                toward = up if up >= 0 else (default if p.pooled else -1)
                slot = Slot(name, f"stack:{key}", _prior(p), lo, hi, toward, _prior(p), (hi - lo) or 1.0, False)
            slot_of[key] = self._add(slot)
        read = [next((k for k in keys_of(stack, family, precision) if k in slot_of), "")
                for family, precision, stack in contexts]
        if p.release_trend:
            self._link_releases(name, eff, contexts, read, slot_of, parent)
        return np.array([slot_of[k] if k else -1 for k in read])

    def _link_releases(self, name: str, eff: Efficiency, contexts, read: list[str], slot_of: dict[str, int],
                       parent: dict[str, str | None]) -> None:
        """For a ``release_trend`` parameter: the earlier releases between each row's engine and the value
        it reads, those between each value and the one it shrinks toward, and the (earlier release, its
        successor) value pairs whose median ratio is ``release_overhead``."""
        self.release_hops[name] = np.array([eff.release_hops("serving", stack, key)
                                            for key, (_, _, stack) in zip(read, contexts, strict=True)], dtype=int)
        for key, slot in sorted(slot_of.items()):
            hops = eff.release_hops("serving", key.partition("@")[0], parent[key] or "")
            if hops and self.slots[slot].parent >= 0:
                self.shrink_hops[slot] = hops
            engine = eff.engines.get(key)
            if engine is not None and engine.earlier_release and engine.like in slot_of:
                self.release_pairs.append((slot, slot_of[engine.like]))
                self.release_names.append(f"{key}/{engine.like} {name}")

    def start(self) -> np.ndarray:
        return np.array([min(max(s.start, s.lo), s.hi) for s in self.slots])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([s.lo for s in self.slots]), np.array([s.hi for s in self.slots])

    def values(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Every row's value of every parameter."""
        return self._gather.values(x)

    def penalties(self, x: np.ndarray) -> np.ndarray:
        """Each value's pull toward its parent (or, for a default, its prior), as residuals."""
        return self._gather.penalties(x)

    def release_ratio(self, x: np.ndarray) -> float:
        """``release_overhead`` at ``x``: the median ratio of an earlier release's host overhead to its
        successor's over every pair with both values (1 without pairs). A median, so that an overhead
        one engine fits near zero (a ratio of 100 or 0.01) does not set it."""
        return self._gather.release_ratio(x)


class _Gather:
    """A layout's indices as arrays, so that a residual evaluation is a few array operations
    (the least-squares fit evaluates it hundreds of times per fit, thousands per cross-validation)."""

    def __init__(self, layout: Layout) -> None:
        self.names = list(layout.params)
        self.hw = np.array([layout.hw_index[n] for n in self.names], dtype=int).reshape(len(self.names), -1)
        st = np.array([layout.stack_index[n] for n in self.names], dtype=int).reshape(self.hw.shape)
        self.has_stack = st >= 0
        self.stack = np.where(self.has_stack, st, 0)
        column = (len(self.names), 1)
        self.multiply = np.array([layout.params[n].multiply for n in self.names]).reshape(column)
        self.lo = np.array([layout.params[n].range[0] for n in self.names], dtype=float).reshape(column)
        floor = [p.range[0] if (p := layout.params[n]).stack_floor is None else p.stack_floor for n in self.names]
        self.floor = np.where(self.has_stack, np.array(floor, dtype=float).reshape(column), self.lo)
        self.hi = np.array([layout.params[n].range[1] for n in self.names], dtype=float).reshape(column)
        slots = layout.slots
        self.log = np.array([s.log for s in slots], dtype=bool)
        self.parent = np.array([max(s.parent, 0) for s in slots], dtype=int)
        self.has_parent = np.array([s.parent >= 0 for s in slots], dtype=bool)
        self.center = np.array([s.center for s in slots], dtype=float)
        self.width = np.array([s.width for s in slots], dtype=float)
        self.hops = np.array([layout.release_hops.get(n, np.zeros(self.hw.shape[1], dtype=int))
                              for n in self.names], dtype=int).reshape(self.hw.shape)
        self.pairs = np.array(layout.release_pairs, dtype=int).reshape(-1, 2)
        self.shrink_hops = np.array([layout.shrink_hops.get(i, 0) for i in range(len(slots))], dtype=int)
        self.crossing = bool(self.hops.any())  # some row reads a successor's overhead across releases
        self.shrinking = bool(self.shrink_hops.any())  # some value shrinks toward a successor's times the ratio

    def release_ratio(self, x: np.ndarray) -> float:
        """``Layout.release_ratio``."""
        if not len(self.pairs):
            return 1.0
        logs = np.log(np.maximum(x[self.pairs[:, 0]], TINY)) - np.log(np.maximum(x[self.pairs[:, 1]], TINY))
        return float(np.clip(np.exp(np.median(logs)), RELEASE_RATIO[0], RELEASE_RATIO[1]))

    def values(self, x: np.ndarray) -> dict[str, np.ndarray]:
        own, stack = x[self.hw], x[self.stack]
        value = np.where(self.has_stack, np.where(self.multiply, own * stack, stack), own)
        if self.crossing:
            value = value * self.release_ratio(x) ** self.hops
        value = np.clip(value, self.floor, self.hi)
        return {name: value[i] for i, name in enumerate(self.names)}

    def penalties(self, x: np.ndarray) -> np.ndarray:
        """A stack multiplier shrinks toward its parent's (or 1) in log space; a default toward its
        prior; any other value toward its parent's (an earlier release's host overhead toward its
        successor's times ``release_ratio`` per release between them), each in units of the
        parameter's range."""
        if not len(x):
            return np.zeros(0)
        parent = x[self.parent]
        if self.shrinking:
            parent = parent * self.release_ratio(x) ** self.shrink_hops
        logs = np.log(np.maximum(x, TINY)) - np.where(self.has_parent, np.log(np.maximum(parent, TINY)), 0.0)
        linear = np.where(self.has_parent, (x - parent) / self.width, (x - self.center) / self.width)
        scale = np.where(self.has_parent | self.log, math.sqrt(SHRINK), math.sqrt(PRIOR))
        return scale * np.where(self.log, logs, linear)


def _more_general(eff: Efficiency, kind: Literal["training", "serving"], key: str) -> list[str]:
    """The keys a stack value falls back to, nearest first: ``trtllm@blackwell/fp8`` →
    ``trtllm@blackwell`` → ``trtllm@hopper`` (the family it is like) → ``trtllm`` → the stack
    ``trtllm`` is like, and so on."""
    stack, _, on = key.partition("@")
    family, _, precision = on.partition("/")
    on_family = [f"{stack}@{f}" for f in eff.family_chain(family)[0 if precision else 1:]] if family else []
    return on_family + eff.chain(kind, stack)[0 if family else 1:]


def _prior(p: Parameter) -> float:
    return p.prior


@dataclass(frozen=True)
class FitResult:
    layout: Layout
    x: np.ndarray
    cost: float


def robust(r: np.ndarray) -> np.ndarray:
    """Soft-L1 on log errors as a residual: squares to ``2c²(√(1 + (r/c)²) − 1)``, quadratic below
    the knee ``c`` and linear above it, so a few odd rows cannot drag the fit (penalties stay
    quadratic)."""
    c = LOSS_SCALE
    return np.sign(r) * c * np.sqrt(2.0 * (np.sqrt(1.0 + (r / c) ** 2) - 1.0))


def params_class(kind: str):
    return TrainParams if kind == "training" else ServeParams


def build_params(kind: str, values: dict[str, np.ndarray]):
    cls = params_class(kind)
    return cls(**{f.name: values[f.name] for f in fields(cls)})


def fit(layout: Layout, observations: list[Observation], predict, x0: np.ndarray | None = None,
        max_nfev: int = 60, sparsity=None, groups: np.ndarray | None = None) -> FitResult:
    """Least squares over the layout's free values (see the module docstring).

    ``groups`` (one source index per observation) adds a level for each source: a nuisance
    log-offset on its throughputs, shrunk toward 0 and never used to predict. It soaks up what one
    benchmark harness does to all of its rows (a client, a tuning, a clock), so that the shared
    parameters follow what varies within sources, as random effects do."""
    case_idx = np.array([o.case for o in observations])
    n_slots = len(layout.slots)
    n_groups = int(groups.max()) + 1 if groups is not None and len(groups) else 0
    rate = np.array([o.metric not in ("ttft_ms", "tpot_ms") for o in observations])
    measured = np.log(np.array([o.measured for o in observations]))
    weights = np.sqrt(np.array([o.weight for o in observations]))
    metrics = [o.metric for o in observations]
    by_metric = {m: np.array([i for i, mm in enumerate(metrics) if mm == m]) for m in sorted(set(metrics))}

    def residuals(x: np.ndarray) -> np.ndarray:
        predicted = predict(build_params(layout.kind, layout.values(x[:n_slots])))
        logp = np.empty(len(observations))
        for m, idx in by_metric.items():
            logp[idx] = np.log(np.maximum(predicted[m][case_idx[idx]], 1e-30))
        if n_groups:
            logp = logp + np.where(rate, x[n_slots:][groups], 0.0)
        extra = math.sqrt(SOURCE_SHRINK) * x[n_slots:]
        return np.concatenate([weights * robust(logp - measured), layout.penalties(x[:n_slots]), extra])

    lo, hi = layout.bounds()
    lo, hi = np.concatenate([lo, np.full(n_groups, -2.0)]), np.concatenate([hi, np.full(n_groups, 2.0)])
    start = np.concatenate([layout.start() if x0 is None else x0, np.zeros(n_groups)])
    result = least_squares(residuals, start, bounds=(lo, hi), x_scale="jac", max_nfev=max_nfev, method="trf", ftol=FTOL,
                           jac_sparsity=sparsity)
    return FitResult(layout, result.x[:n_slots], float(result.cost))
