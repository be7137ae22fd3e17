"""The model against every published row: in sample, and with each source left out of the fit.

``load_dataset`` turns the rows of a kind into cases (or reasons), ``fit_all`` fits the catalog's
parameters on every row, and ``cross_validate`` refits with each source left out in turn and
predicts that source's rows from the others (FIDELITY.md section 1). The out-of-source errors
are the headline accuracy; the in-sample ones are only for contrast.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix

from optimizer.calibration import fit as fitting
from optimizer.calibration.agreement import Agreement, agreement
from optimizer.calibration.data import LATENCY, Comparison, load_aliases, load_sources
from optimizer.calibration.serving import ServingCase, serving_cases
from optimizer.calibration.training import TrainingCase, training_cases
from optimizer.catalog import Catalog
from optimizer.catalog.stacks import efficiency_precision
from optimizer.parallel import ordered_map
from optimizer.perf.params import Num, stack_arrays
from optimizer.perf.serve import ServeTerms, serve_time
from optimizer.perf.train import TrainTerms, step_time

TRAIN_METRICS = ("mfu", "tflops_per_gpu", "tokens_per_s_per_gpu")
# A latency counts a tenth as much as a throughput in a source's weight. What a TTFT or TPOT holds
# varies with the harness (queueing, HTTP and tokenising, the first token in or out of TPOT), and
# fitted closely it did not carry to other sources: out of source, at 0.5, 0.25, 0.1 and 0 serving
# throughput was 13.4 % / 49.0 %, 13.3 % / 48.8 %, 13.2 % / 48.3 % and 13.3 % / 51.1 % (median /
# p90 |error|), the median TPOT 25.3 %, 22.9 %, 22.8 % and 24.0 %, TTFT 34.5 %, 34.5 %, 34.4 % and
# 33.6 %; at 0 the parameters only latencies reach lose their rows.
LATENCY_WEIGHT = 0.1


@dataclass
class Dataset:
    kind: str
    cases: list
    skipped: list[tuple[str, str, str]]  # (row, source, reason)
    observations: list[fitting.Observation] = field(default_factory=list)
    vendors: dict[str, str] = field(default_factory=dict)  # GPU family → vendor

    @property
    def contexts(self) -> list[tuple[str, str, str]]:
        return [(c.family, efficiency_precision(c.precision), c.stack) for c in self.cases]

    @property
    def sources(self) -> np.ndarray:
        return np.array([c.source for c in self.cases])

    def agreement(self) -> Agreement:
        """How far apart rows the model cannot tell apart were measured (``calibration.agreement``):
        rows with equal contexts and work get one predicted rate, which ``predictor`` scales to each
        row's metric; each row's measured throughput is taken back to that rate."""
        keys = [(context, c.terms) for context, c in zip(self.contexts, self.cases, strict=True)]
        return agreement(keys, [c.source for c in self.cases],
                         {i: rate for i, c in enumerate(self.cases) if (rate := self._rate(c)) is not None})

    def _rate(self, c: TrainingCase | ServingCase) -> float | None:
        """A row's measured throughput over the factor ``predictor`` scales its metric by: serving,
        output tokens/s (a total taken back to its output share); training, the inverse step time."""
        if isinstance(c, TrainingCase):
            return c.measured / c.scale
        measured = dict(c.measured)
        if "output_tokens_per_s" in measured:
            return measured["output_tokens_per_s"] / c.scale
        if "total_tokens_per_s" in measured:
            t = c.terms
            return float(measured["total_tokens_per_s"] * t.output_len / (t.input_len + t.output_len) / c.scale)
        return None

    def predictor(self):
        """A function of (array) parameters → predicted value per metric, one per case."""
        scale = np.array([c.scale for c in self.cases])
        if self.kind == "training":
            terms = stack_arrays([c.terms for c in self.cases], TrainTerms)

            def predict_train(params) -> dict[str, Num]:
                value = scale / step_time(terms, params).total
                return dict.fromkeys(TRAIN_METRICS, value)
            return predict_train
        sterms = stack_arrays([c.terms for c in self.cases], ServeTerms)

        def predict_serve(params) -> dict[str, Num]:
            t = serve_time(sterms, params)
            rate = t.output_tokens_per_s * scale
            return {"output_tokens_per_s": rate,
                    "total_tokens_per_s": rate * (sterms.input_len + sterms.output_len) / sterms.output_len,
                    "ttft_ms": t.ttft * 1e3, "tpot_ms": t.tpot * 1e3}
        return predict_serve


def load_dataset(kind: str, catalog: Catalog, data_dir=None) -> Dataset:
    """Every row of a kind as a case (or a reason), with one weighted observation per measured figure:
    each source's observations share a weight of 1 (a latency counts ``LATENCY_WEIGHT``)."""
    aliases, sources = load_aliases(data_dir), load_sources(data_dir)
    builder = training_cases if kind == "training" else serving_cases
    cases, skipped = builder(catalog, aliases, sources, data_dir)
    ds = Dataset(kind, cases, skipped, vendors={g.family: g.vendor for g in catalog.gpus.values()})
    raw = []
    for i, c in enumerate(cases):
        figures = ((c.metric, c.measured),) if kind == "training" else c.measured
        for metric, value in figures:
            raw.append((i, metric, value, LATENCY_WEIGHT if metric in LATENCY else 1.0))
    totals: dict[str, float] = {}
    for i, _, _, w in raw:
        totals[cases[i].source] = totals.get(cases[i].source, 0.0) + w
    ds.observations = [fitting.Observation(i, m, v, w / totals[cases[i].source]) for i, m, v, w in raw]
    return ds


def _prior_values(table, n: int) -> dict[str, np.ndarray]:
    return {name: np.full(n, p.prior, dtype=float) for name, p in table.items()}


def sensitivity(ds: Dataset, catalog: Catalog) -> dict[str, np.ndarray]:
    """Which rows each parameter moves (at the priors): a value needs rows that depend on it."""
    table = catalog.efficiency.table.training if ds.kind == "training" else catalog.efficiency.table.serving
    predict = ds.predictor()
    base_values = _prior_values(table, len(ds.cases))
    base = predict(fitting.build_params(ds.kind, base_values))
    out = {}
    for name, p in table.items():
        lo, hi = p.range
        changed = np.zeros(len(ds.cases), dtype=bool)
        # at either end of its range: a parameter that binds only there (a cap) still counts
        for value in (lo, hi):
            values = dict(base_values)
            values[name] = np.full(len(ds.cases), value, dtype=float)
            moved = predict(fitting.build_params(ds.kind, values))
            for metric in base:
                changed |= np.abs(moved[metric] / base[metric] - 1.0) > 1e-3
        out[name] = changed
    return out


def _sparsity(layout: fitting.Layout, observations, groups: np.ndarray | None) -> csr_matrix:
    """Which free values each residual depends on (lets least squares difference in groups): an
    observation its row's value of every parameter (and its source's level, and every release pair's
    values where it reads a successor's overhead), a penalty its value and its parent."""
    n_slots, n_obs = len(layout.slots), len(observations)
    n_groups = int(groups.max()) + 1 if groups is not None and len(groups) else 0
    case = np.array([o.case for o in observations], dtype=int)
    obs = np.arange(n_obs)
    pairs = np.unique(np.array(layout.release_pairs, dtype=int))  # the slots ``release_ratio`` reads
    rows, cols = [], []
    for name in layout.params:
        rows.append(obs)
        cols.append(layout.hw_index[name][case])
        stack = layout.stack_index[name][case]
        rows.append(obs[stack >= 0])
        cols.append(stack[stack >= 0])
        if name in layout.release_hops and len(pairs):  # a value read across releases: every pair's
            crossing = obs[layout.release_hops[name][case] > 0]
            rows.append(np.repeat(crossing, len(pairs)))
            cols.append(np.tile(pairs, len(crossing)))
    if n_groups and groups is not None:
        rows.append(obs)
        cols.append(n_slots + groups)
    slots = np.arange(n_slots)
    parents = np.array([s.parent for s in layout.slots], dtype=int)
    for slot in layout.shrink_hops:  # an earlier release's pull toward its successor times the ratio
        rows.append(np.full(len(pairs), n_obs + slot))
        cols.append(pairs)
    rows += [n_obs + slots, n_obs + slots[parents >= 0], n_obs + n_slots + np.arange(n_groups)]
    cols += [slots, parents[parents >= 0], n_slots + np.arange(n_groups)]
    r, c = np.concatenate(rows), np.concatenate(cols)
    jac = coo_matrix((np.ones(len(r), dtype=int), (r, c)), shape=(n_obs + n_slots + n_groups, n_slots + n_groups))
    jac = jac.tocsr()
    jac.data[:] = 1  # a value read twice (a parameter's default for two) is still one dependence
    return jac


def fit_on(ds: Dataset, catalog: Catalog, mask: np.ndarray, sens: dict[str, np.ndarray]) -> fitting.FitResult:
    """Fit on the cases ``mask`` selects; values exist only where those cases support them."""
    layout = fitting.Layout(ds.kind, catalog.efficiency, ds.contexts, {k: v & mask for k, v in sens.items()},
                            list(range(len(ds.cases))))
    observations = [o for o in ds.observations if mask[o.case]]
    groups = None
    if fitting.SOURCE_SHRINK > 0:
        names = sorted({ds.cases[o.case].source for o in observations})
        groups = np.array([names.index(ds.cases[o.case].source) for o in observations])
    return fitting.fit(layout, observations, ds.predictor(), sparsity=_sparsity(layout, observations, groups),
                       groups=groups)


def predictions(ds: Dataset, result: fitting.FitResult) -> dict[str, np.ndarray]:
    return ds.predictor()(fitting.build_params(ds.kind, result.layout.values(result.x)))


def _comparisons(ds: Dataset, predicted: dict[str, np.ndarray], cases: np.ndarray,
                 extrapolated: dict[int, tuple[str, ...]]) -> list[Comparison]:
    out = []
    for o in ds.observations:
        if cases[o.case]:
            c = ds.cases[o.case]
            out.append(Comparison(c.row, c.source, c.regime, c.config, o.metric, o.measured,
                                  float(predicted[o.metric][o.case]), extrapolated.get(o.case, ()),
                                  ds.vendors.get(c.family, "")))
    return out


def _gaps(ds: Dataset, mask: np.ndarray) -> dict[int, tuple[str, ...]]:
    """For each case outside ``mask``: its GPU family and stack if no case inside has them."""
    families = {c.family for c, m in zip(ds.cases, mask, strict=True) if m}
    stacks = {c.stack for c, m in zip(ds.cases, mask, strict=True) if m}
    out = {}
    for i, c in enumerate(ds.cases):
        if not mask[i]:
            gaps = ([f"GPU family {c.family}"] if c.family not in families else []) + \
                   ([f"stack {c.stack}"] if c.stack not in stacks else [])
            out[i] = tuple(gaps)
    return out


@dataclass(frozen=True)
class Validation:
    kind: str
    cv: str  # "source": leave-one-source-out; "none": the catalog's parameters on every row
    in_sample: tuple[Comparison, ...]
    out_of_source: tuple[Comparison, ...]  # with cv "none", the same comparisons as in_sample
    skipped: tuple[tuple[str, str, str], ...]
    fit: fitting.FitResult | None = None
    sensitivity: dict | None = None
    agreement: Agreement | None = None  # of the measurements themselves (``Dataset.agreement``)


def with_catalog(ds: Dataset, catalog: Catalog) -> Validation:
    """Every expressed row predicted with the catalog's parameters as they are (no refit)."""
    kind = "training" if ds.kind == "training" else "serving"
    resolved = [catalog.efficiency.resolve(kind, c.family, c.precision, c.stack) for c in ds.cases]  # type: ignore[arg-type]
    params = stack_arrays([r.params for r in resolved], fitting.params_class(ds.kind))
    gaps = {i: r.extrapolated for i, r in enumerate(resolved)}
    comps = tuple(_comparisons(ds, ds.predictor()(params), np.ones(len(ds.cases), dtype=bool), gaps))
    return Validation(ds.kind, "none", comps, comps, tuple(ds.skipped), agreement=ds.agreement())


def fit_all(ds: Dataset, catalog: Catalog) -> fitting.FitResult:
    return fit_on(ds, catalog, np.ones(len(ds.cases), dtype=bool), sensitivity(ds, catalog))


_WORKER: dict = {}  # a process's dataset, catalog and sensitivities (``_init_worker``)


def _init_worker(ds: Dataset, catalog: Catalog, sens: dict[str, np.ndarray]) -> None:
    _WORKER.update(ds=ds, catalog=catalog, sens=sens)


def _fit_without(ds: Dataset, catalog: Catalog, sens: dict[str, np.ndarray], source: str | None) -> fitting.FitResult:
    """The fit without ``source``'s rows (None: on every row)."""
    mask = np.ones(len(ds.cases), dtype=bool) if source is None else ds.sources != source
    return fit_on(ds, catalog, mask, sens)


def _fit_task(source: str | None) -> fitting.FitResult:
    """``_fit_without`` in a pool process, on what ``_init_worker`` handed it."""
    return _fit_without(_WORKER["ds"], _WORKER["catalog"], _WORKER["sens"], source)


def cross_validate(ds: Dataset, catalog: Catalog, progress=None, workers: int = 1) -> Validation:
    """In-sample and leave-one-source-out comparisons for every expressed row. The fits are
    independent (and each deterministic), so ``workers`` processes give the same comparisons."""
    sens = sensitivity(ds, catalog)
    sources = ds.sources
    left_out = sorted(set(sources))
    tasks: list[str | None] = [None, *left_out]
    fits = _collect(ordered_map(_fit_task, tasks, workers, _init_worker, (ds, catalog, sens),
                                lambda source: _fit_without(ds, catalog, sens, source)), progress, left_out)
    full, *folds = fits
    everything = np.ones(len(ds.cases), dtype=bool)
    in_sample = _comparisons(ds, predictions(ds, full), everything, {})
    out: list[Comparison] = []
    for source, result in zip(left_out, folds, strict=True):
        held = sources == source
        out += _comparisons(ds, predictions(ds, result), held, _gaps(ds, ~held))
    order = {c.row: i for i, c in enumerate(ds.cases)}
    out.sort(key=lambda c: (order[c.row], c.metric))
    return Validation(ds.kind, "source", tuple(in_sample), tuple(out), tuple(ds.skipped), full, sens,
                      ds.agreement())


def _collect(results: Iterator[fitting.FitResult], progress, left_out: list[str]) -> list[fitting.FitResult]:
    """The fits in task order (every row first, then each source left out), telling ``progress``
    of each source before its fit is awaited."""
    fits = [next(results)]
    for k, source in enumerate(left_out):
        if progress:
            progress(k, source)
        fits.append(next(results))
    return fits
