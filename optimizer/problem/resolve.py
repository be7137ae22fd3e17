"""A problem file (or mapping) → ``Problem``: catalog ids and GPU names resolved, models looked up,
search grids checked against the model, prices applied, several workloads put in their windows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, Catalog, with_used_prices
from optimizer.catalog.records import train_regime
from optimizer.catalog.stacks import Kind
from optimizer.errors import CatalogError, ProblemError, suggest
from optimizer.perf.specs import ModelSpec
from optimizer.problem.enums import BudgetCovers, Objective
from optimizer.problem.hf_config import is_hf_config, read_hf_config
from optimizer.problem.limits import margins, power_caps
from optimizer.problem.model import Demand, Problem, ServeWorkload, TrainWorkload, Workload
from optimizer.problem.names import gpu_ids, id_errors
from optimizer.problem.procurement import (
    apply_prices,
    nothing_usable,
    parse_cli_price,
    resolve_procurement,
)
from optimizer.problem.schema import (
    DEFAULT_BATCH_TOKENS,
    SCHEMA_VERSION,
    GlobalBatch,
    HardwareChoice,
    InlineModel,
    ProblemFile,
    ServeSpec,
    TrainPhase,
    TrainSpec,
)
from optimizer.validation import read_yaml, short_repr, thousands_in_flow, validate


def model_errors(data: dict[str, Any], path: Path, catalog: Catalog) -> list[str]:
    """The workloads' model names that name no preset, file or config (with close matches),
    named as their workload ("workloads[1] (finetune).model")."""
    out = []
    raw = data.get("workloads")
    workloads: list[Any] = raw if isinstance(raw, list) else []
    entries = [("workload", data.get("workload"))] + [
        (f"workloads[{i}]" + (f" ({w['name']})" if isinstance(w.get("name"), str) else ""), w)
        for i, w in enumerate(workloads) if isinstance(w, dict)]
    for where, w in entries:
        ref = w.get("model") if isinstance(w, dict) else None
        if isinstance(ref, str):
            try:
                resolve_model(ref, catalog, path, f"{where}.model")
            except ProblemError as exc:
                out.append(str(exc))
    return out


def tp_fits(model: ModelSpec, tp: int, serving: bool = False) -> bool:
    """Whether TP can shard the model's attention: it divides the attention heads and, for
    training, it divides the KV heads or is a multiple of them (each KV head then replicated)."""
    if model.heads % tp:
        return False
    return serving or not (model.kv_heads % tp and tp % model.kv_heads)


def _tp_misfit(model: ModelSpec, tp: int) -> str:
    """Why no plan of ``model`` can use TP ``tp`` (for a message)."""
    if model.heads % tp:
        return f"TP {tp} does not divide the {model.heads} attention heads of {model.name}"
    return (f"TP {tp} neither divides the {model.kv_heads} KV heads of {model.name} nor is a multiple of them "
            "(training shards or replicates whole KV heads)")


def _check_grid(path: Path, data: dict[str, Any], workloads: list[tuple[ModelSpec, bool]],
              seq_lens: tuple[int, ...] = ()) -> None:
    """Reject a TP, PP or CP value the problem's own search grid lists that no workload can use
    (``workloads``: each workload's model and whether it is served; ``seq_lens``: the training
    sequence lengths, which CP must divide). The default grid is left to the planner, which skips
    what does not fit."""
    raw = data.get("search")
    search: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for i, tp in enumerate(search.get("tp") or ()):
        if any(tp_fits(model, tp, serving) for model, serving in workloads):
            continue
        fits = sorted({t for m, s in workloads for t in range(1, m.heads + 1) if tp_fits(m, t, s)})
        raise ProblemError(f"{path}: field 'search.tp[{i}]': {_tp_misfit(workloads[0][0], tp)}, so no plan can "
                           f"use it. To fix: drop it, or use TP values that fit ({', '.join(map(str, fits))}).")
    layers = max(m.layers for m, _ in workloads)
    for i, pp in enumerate(search.get("pp") or ()):
        if pp > layers:
            raise ProblemError(f"{path}: field 'search.pp[{i}]': PP {pp} has more stages than the {layers} layers "
                               "to put in them, so no plan can use it. To fix: drop it, or use PP values up to "
                               f"{layers}.")
    for i, cp in enumerate(search.get("cp") or ()):
        if seq_lens and all(s % cp for s in seq_lens):
            raise ProblemError(f"{path}: field 'search.cp[{i}]': CP {cp} does not divide the sequence length "
                               f"({', '.join(map(str, sorted(set(seq_lens))))} tokens), so no plan can use it. "
                               "To fix: drop it, or use CP values that divide it, such as [1, 2, 4].")


def resolve_model(ref: str | InlineModel, catalog: Catalog, path: Path, field: str = "workload.model") -> ModelSpec:
    """A preset id, a YAML file with the shape keys, a Hugging Face config.json (or the directory
    holding one), or an inline shape → ModelSpec."""
    if isinstance(ref, InlineModel):
        return ref.spec()
    if ref in catalog.models:
        return catalog.models[ref].spec()
    file = Path(ref) if Path(ref).is_absolute() else path.parent / ref
    if ref.endswith((".yaml", ".yml")) and file.exists():
        data = read_yaml(file, ProblemError)
        return validate(InlineModel, data, file, ProblemError).spec()
    hf = is_hf_config(ref, path.parent)
    if hf is not None:
        return validate(InlineModel, {"name": hf.parent.name or hf.stem, **read_hf_config(hf)}, hf, ProblemError).spec()
    raise ProblemError(f"{path}: field '{field}': unknown model '{ref}'.{suggest(ref, catalog.models)}"
                       f" To fix: use a preset ({', '.join(sorted(catalog.models))}), a path to a YAML"
                       " file with the shape keys or to a Hugging Face config.json, or spell the shape out (layers,"
                       " hidden, heads, kv_heads, ffn_hidden, vocab, seq_len, mlp).")


def load_problem(path: Path | str, catalog: Catalog) -> Problem:
    """Read and validate a problem file against ``catalog``."""
    path = Path(path)
    return problem_from_data(read_yaml(path, ProblemError, thousands_in_flow), path, catalog)


def load_priced(path: Path | str, catalog: Catalog, cli_prices: tuple[str, ...] = ()) -> tuple[Problem, Catalog]:
    """The problem and the catalog at its prices (see ``with_prices``)."""
    problem = with_prices(load_problem(path, catalog), catalog, cli_prices)
    assert problem.catalog is not None
    return problem, problem.catalog


def with_prices(problem: Problem, catalog: Catalog, cli_prices: tuple[str, ...] = ()) -> Problem:
    """The problem carrying the catalog at its prices: used-market GPU prices where the problem
    allows used hardware, then the problem file's price book, then any ``--price ID=VALUE`` from
    the command line (which wins). The problem keeps the list, so the output can say which prices
    it used."""
    book = {p.item: p for p in problem.prices}
    for spec in cli_prices:
        override = parse_cli_price(spec, catalog)
        book[override.item] = override
    prices = tuple(book[k] for k in sorted(book))
    problem = problem.with_quotes({item for item, p in book.items() if p.quote})
    if problem.end_of_life and not problem.buy_gpus and not problem.offers and not problem.inventory:
        raise nothing_usable(problem.path, problem.end_of_life, catalog)
    base = with_used_prices(catalog) if problem.allow_used else catalog
    return replace(problem, prices=prices, catalog=apply_prices(base, prices))


def _raise(errors: list[str]) -> None:
    if errors:
        raise ProblemError("\n".join(errors))


def _validated(data: dict[str, Any], path: Path, catalog: Catalog) -> tuple[dict[str, Any], ProblemFile, list[str]]:
    """(the data with GPU names resolved, its schema-checked form, every ambiguous or unknown name
    in it): a file's faults are reported in one run, not one per run."""
    data, ambiguous = gpu_ids(data, catalog, path)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ProblemError(f"{path}: schema_version is {short_repr(data.get('schema_version'))}; this gpuopt reads "
                           f"{SCHEMA_VERSION}. To fix: add 'schema_version: 1' at the top.")
    errors = ambiguous + id_errors(data, path, catalog) + model_errors(data, path, catalog)
    try:
        return data, validate(ProblemFile, data, path, ProblemError), errors
    except ProblemError as exc:
        raise ProblemError("\n".join([str(exc), *errors])) from None


def problem_from_data(data: dict[str, Any], path: Path, catalog: Catalog, check_grid: bool = True) -> Problem:
    """Validate a problem given as a mapping (as read from YAML); ``path`` names it in messages.
    ``check_grid``: reject search-grid TP values the model cannot use (off for the workloads of a
    problem with several, whose grid is checked against all their models at once)."""
    data, spec, errors = _validated(data, path, catalog)
    if spec.workloads:
        _raise(errors)
        return _several(data, spec, path, catalog)
    w = spec.workload
    if w is None:
        _raise([f"{path}: no 'workload'. To fix: add a workload (kind: train or serve), or a list 'workloads' of "
                "several, each with a name and a time window.", *errors])
    assert w is not None
    if not (isinstance(w.model, str) and w.model in catalog.models):
        _raise(errors)  # the model may be one of the unknown names
    model = resolve_model(w.model, catalog, path)
    serving = isinstance(w, ServeSpec)
    if check_grid:
        try:
            seq = () if isinstance(w, ServeSpec) else (w.seq_len or model.seq_len,)
            _check_grid(path, data, [(model, serving)], seq)
        except ProblemError as exc:
            errors.insert(0, str(exc))
    _raise(errors)
    _check_objective(path, spec, serving)
    workload = _workload(path, catalog, w, model, spec.deadline_days * 86400.0 if spec.deadline_days else None)
    hw = spec.hardware
    extra = resolve_procurement(path, spec, _allowed_gpus(path, hw, catalog), catalog)
    fac = catalog.facility
    pue = spec.site.pue or (fac.pue.datacenter.value if spec.site.datacenter else fac.pue.other.value)
    return Problem(
        name=spec.name,
        path=path,
        description=spec.description,
        workloads=(workload,),
        objective=Objective(spec.objective),
        budget_usd=float(spec.budget.usd) if spec.budget else None,
        budget_covers=BudgetCovers(spec.budget.covers) if spec.budget else BudgetCovers.CAPEX,
        datacenter=spec.site.datacenter,
        allow_workstations=(spec.site.allow_workstations if spec.site.allow_workstations is not None
                            else not spec.site.datacenter),
        allow_used=hw.allow_used,
        **power_caps(spec, pue),
        electricity_usd_per_kwh=spec.site.electricity_usd_per_kwh or fac.electricity_usd_per_kwh.value,
        pue=pue,
        horizon_years=spec.cost.horizon_years or fac.amortisation_years.value,
        load_factor=fac.load_factor.value,
        exclude_servers=hw.exclude_servers,
        exclude_fabrics=hw.exclude_fabrics,
        max_gpus=hw.max_gpus,
        search=spec.search,
        solver=spec.solver,
        confidence=spec.confidence,
        oversubscription=spec.network.oversubscription,
        **margins(spec, catalog),
        **extra,
    )


def _check_objective(path: Path, spec: ProblemFile, serving: bool) -> None:
    """The objective has what it needs: serving is planned at minimum cost; min_cost training needs a
    deadline, min_time a budget or a power cap (else the fastest cluster is unbounded)."""
    if serving and spec.objective != "min_cost":
        raise ProblemError(f"{path}: field 'objective': a serving workload is planned at minimum cost for its "
                           "demand. To fix: use objective: min_cost (the demand is in workload.classes).")
    if spec.objective == "min_cost" and spec.deadline_days is None and not serving:
        raise ProblemError(f"{path}: objective min_cost needs 'deadline_days'. To fix: add deadline_days: 30,"
                           " or use objective: min_time with a budget.")
    if spec.objective == "min_time" and spec.budget is None and spec.site.power_cap_kw is None \
            and spec.site.facility_power_cap_kw is None:
        raise ProblemError(f"{path}: objective min_time needs a 'budget' (or at least a power cap), or the "
                           "fastest cluster is unbounded. To fix: add budget: {usd: 500000}.")


def _max_global_batch(path: Path, gb: GlobalBatch, seq_len: int) -> int:
    """The most sequences per step: as given, or max_tokens (default 4M) over the sequence length."""
    max_seqs = gb.max_seqs
    if max_seqs is None:
        max_tokens = float(gb.max_tokens if gb.max_tokens is not None else DEFAULT_BATCH_TOKENS)
        max_seqs = max(1, int(max_tokens // seq_len))
    if gb.min_seqs > max_seqs:
        raise ProblemError(f"{path}: field 'workload.global_batch': min_seqs {gb.min_seqs} exceeds max_seqs "
                           f"{max_seqs}. To fix: lower min_seqs or raise max_seqs.")
    return max_seqs


def _allowed_gpus(path: Path, hw: HardwareChoice, catalog: Catalog) -> tuple[str, ...]:
    """The GPUs the allow and exclude lists leave (their ids checked by ``names.id_errors``): by default
    every purchasable GPU; entries kept for calibration only (purchasable: false) when listed."""
    allowed = hw.allow_gpus if hw.allow_gpus is not None else tuple(g for g, gpu in catalog.gpus.items()
                                                                     if gpu.purchasable)
    gpus = tuple(g for g in allowed if g not in hw.exclude_gpus)
    if not gpus:
        raise ProblemError(f"{path}: field 'hardware': the allow and exclude lists leave no GPU. "
                           "To fix: allow at least one GPU.")
    return gpus


def _workload(path: Path, catalog: Catalog, w: TrainSpec | ServeSpec, model: ModelSpec,
              deadline_s: float | None) -> Workload:
    """The workload in SI units and catalog ids: a serving one's request classes (latency limits in
    seconds) and formats, a training one's tokens, precision, sequence length and global-batch
    range, and the stack or engine either names (checked against the catalog)."""
    model_id = w.model if isinstance(w.model, str) else model.name
    if isinstance(w, ServeSpec):
        demands = tuple(Demand(c.name, c.input_len, c.output_len, c.demand, c.ttft_ms / 1e3 if c.ttft_ms else None,
                               c.tpot_ms / 1e3 if c.tpot_ms else None, c.offline) for c in w.classes)
        return ServeWorkload(model=model, model_id=model_id, demands=demands,
                             precisions=tuple(dict.fromkeys(w.precisions)), kv_precision=w.kv_precision,
                             stack=_stack(path, catalog, "serving", w.engine))
    seq_len = w.seq_len or model.seq_len
    return TrainWorkload(model=model, model_id=model_id, tokens=float(w.tokens), precision=w.precision,
                         seq_len=seq_len, min_global_batch=w.global_batch.min_seqs,
                         max_global_batch=_max_global_batch(path, w.global_batch, seq_len), deadline_s=deadline_s,
                         stack=_stack(path, catalog, "training", w.stack))


def _stack(path: Path, catalog: Catalog, kind: Kind, ident: str | None) -> str | None:
    """A stack or engine named by id or alias, as its id (bad names name the file and field)."""
    if ident is None:
        return None
    field = "workload.stack" if kind == "training" else "workload.engine"
    try:
        return catalog.efficiency.stack(kind, ident).id
    except CatalogError as exc:
        raise ProblemError(f"{path}: field '{field}': {exc}") from None


def serve_regime(demand: Demand) -> str:
    """The band regime a request class is planned in: at a batch where a latency limit caps the
    batch, at maximum load (the most sequences that fit) where none does."""
    return AT_BATCH if demand.ttft_s is not None or demand.tpot_s is not None else AT_MAX_LOAD


def answer_regime(demands: tuple[Demand, ...] | list[Demand]) -> str | None:
    """The band regime of a serving answer: at maximum load where any class is planned so (its band
    is the wider), at a batch where every class has a latency limit; None without classes."""
    regimes = {serve_regime(d) for d in demands}
    return AT_MAX_LOAD if AT_MAX_LOAD in regimes else (AT_BATCH if regimes else None)


def confidence_factor(problem: Problem, catalog: Catalog, gpu_id: str, precision: str | None = None,
                      demand: Demand | None = None) -> float:
    """What a GPU's predicted rates are multiplied by to plan at the problem's confidence: the
    (100 - confidence)th percentile of measured / predicted over the out-of-source rows, from the
    wider band where the GPU's efficiency values (at ``precision``, default the problem's) are
    borrowed from another family or stack, and for a serving ``demand`` the band of its regime."""
    if problem.confidence is None:
        return 1.0
    w = problem.workload
    default = w.precision if isinstance(w, TrainWorkload) else "bf16"
    regime = train_regime(w.model.moe) if isinstance(w, TrainWorkload) else (
        serve_regime(demand) if demand is not None else None)
    band = catalog.band_for(w.kind, w.stack, (gpu_id, precision or default), regime=regime)
    return band.ratio(100 - problem.confidence)


PHASE_FIELDS = {"name", "start_days", "deadline_days", "end_days"}


def _several(data: dict[str, Any], spec: ProblemFile, path: Path, catalog: Catalog) -> Problem:
    """A problem with several workloads: each is checked as a problem of its own (the shared site,
    hardware, prices and solver, its deadline or horizon the length of its window), and the
    whole holds them, each in its window (``Problem.alone`` gives one back as a problem)."""
    def bad(field: str, what: str, fix: str) -> ProblemError:
        return ProblemError(f"{path}: field '{field}': {what}. To fix: {fix}.")

    if spec.workload is not None:
        raise bad("workload", "give either 'workload' or 'workloads', not both", "move it into the list 'workloads'")
    if spec.objective != "min_cost":
        raise bad("objective", "several workloads are planned at minimum cost, each by its own deadline",
                  "use objective: min_cost")
    if spec.deadline_days is not None:
        raise bad("deadline_days", "with several workloads each training workload has its own deadline",
                  "give deadline_days in each entry of 'workloads' instead")
    names = [w.name for w in spec.workloads]
    if len(set(names)) != len(names):
        raise bad("workloads", f"names must be unique, got {names}", "give each workload its own name")
    horizon_years = spec.cost.horizon_years or catalog.facility.amortisation_years.value
    horizon_days = horizon_years * 365.25
    problems: list[Problem] = []
    workloads: list[Workload] = []
    for i, w in enumerate(spec.workloads):
        train = isinstance(w, TrainPhase)
        end = w.deadline_days if isinstance(w, TrainPhase) else (w.end_days or horizon_days)
        where = f"workloads[{i}] ({w.name})"
        if end <= w.start_days:
            raise bad(where, f"it starts on day {w.start_days:g} and ends on day {end:g}",
                      "make deadline_days (or end_days) later than start_days")
        if end > horizon_days * (1 + 1e-9):
            raise bad(where, f"it ends on day {end:g}, after the {horizon_years:g}-year horizon "
                      f"({horizon_days:,.0f} days)", "end it sooner or raise cost.horizon_years")
        sub = {k: v for k, v in data.items() if k not in ("workloads", "name")}
        sub.update(name=f"{spec.name}/{w.name}", objective="min_cost",
                   workload=w.model_dump(mode="json", exclude=PHASE_FIELDS, exclude_none=True))
        if train:
            sub["deadline_days"] = end - w.start_days
        else:
            sub["cost"] = {**(data.get("cost") or {}), "horizon_years": (end - w.start_days) / 365.25}
        try:
            alone = problem_from_data(sub, path, catalog, check_grid=False)
        except ProblemError as exc:  # name the entry: its fields are checked as the workload of its own problem
            raise ProblemError(str(exc).replace("field 'workload.", f"field '{where}.")) from exc
        problems.append(alone)
        workloads.append(replace(alone.workload, name=w.name, start_s=w.start_days * 86400.0, end_s=end * 86400.0))
    _check_grid(path, data, [(x.model, isinstance(x, ServeWorkload)) for x in workloads],
              tuple(x.seq_len for x in workloads if isinstance(x, TrainWorkload)))
    return replace(problems[0], name=spec.name, description=spec.description, horizon_years=horizon_years,
                   workloads=tuple(workloads))
