"""Published measurements: the CSV rows, the sources they come from, and the names they use.

``calibration/*.csv`` hold the rows (every number read from the source named in the row).
``calibration/sources.yaml`` lists each source document once: which rows are its (by id
prefix), its software stack or serving engine, how it counts FLOPs, the facts its rows leave out
(each with the reason), and rows the model does not try. ``calibration/aliases.yaml`` maps the
names a source uses for models, GPUs and number formats to catalog ids. Data, not code.
"""

from __future__ import annotations

import csv
import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from optimizer.errors import ProblemError, suggest
from optimizer.perf.specs import Precision
from optimizer.validation import read_yaml, validate

Kind = Literal["training", "serving"]
THROUGHPUT = ("output_tokens_per_s", "total_tokens_per_s", "mfu", "tflops_per_gpu", "tokens_per_s_per_gpu")
LATENCY = ("ttft_ms", "tpot_ms")
TRAINING_COLUMNS = ("id", "model", "params_b", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len",
                    "vocab", "tokens_b", "gpu", "gpu_count", "tp", "pp", "dp", "cp", "global_batch_tokens_or_seqs",
                    "micro_batch", "recompute", "zero_stage", "precision", "achieved_tflops_per_gpu", "mfu_pct",
                    "hfu_pct", "tokens_per_sec_per_gpu", "wall_clock_days", "gpu_hours", "source", "notes")
SERVING_COLUMNS = ("id", "model", "params_b", "precision", "gpu", "gpu_count", "tp", "pp", "engine", "input_len",
                   "output_len", "batch_or_concurrency", "throughput_output_tok_s", "throughput_total_tok_s", "ttft_ms",
                   "tpot_ms", "source", "notes")
# the facts a source may state for its rows (`rows`) or assume for cells they leave empty (`assume`):
# what optimizer/calibration/training.py and serving.py read, the training plan traits among them
FACTS: dict[str, frozenset[str]] = {
    "training": frozenset({
        "exclude", "model", "gpu", "stack", "metric", "precision", "gpus", "tp", "pp", "cp", "dp", "ep",
        "virtual_stages", "seq_len", "micro_batch", "global_batch", "token_million", "recompute", "zero",
        "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "ffn_mult", "vocab", "mlp", "grad_reduce_bytes",
        "flash_attention"}),
    "serving": frozenset({
        "exclude", "model", "precision", "engine", "split", "load", "batching", "requests", "input_len",
        "output_len", "per_gpu", "ignore", "attention_dp", "online", "token_budget"}),
}


def _whole(what: str = "") -> tuple[str, Callable[[Any], bool]]:
    text = f"a whole number of {what}" if what else "a whole number, at least 1"
    return text, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1


_FLAG = ("true or false", lambda v: isinstance(v, bool))
# what a fact's value must be where the readers convert it: a value they would choke on is named at
# load, with its source and place, not a traceback from deep inside one row
FACT_VALUES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "token_budget": _whole("tokens (those the engine profiles at start-up, e.g. 8192)"),
    "requests": _whole("requests"),
    **{key: _whole("tokens") for key in ("input_len", "output_len", "seq_len")},
    **{key: _whole("GPUs") for key in ("gpus", "tp", "pp", "cp", "dp", "ep")},
    **{key: _whole() for key in ("virtual_stages", "micro_batch", "global_batch", "layers",
                                                   "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")},
    **{key: _FLAG for key in ("online", "attention_dp", "per_gpu", "flash_attention")},
    "zero": ("0, 1, 2 or 3", lambda v: v in (0, 1, 2, 3) and not isinstance(v, bool)),
    "batching": ("'continuous' or 'static'", lambda v: v in ("continuous", "static")),
    "load": ("'max', or 'batch', 'burst' or 'rate' and a whole number, e.g. 'burst 256'",
             lambda v: isinstance(v, str) and re.fullmatch(r"max|(batch|burst|rate) [1-9]\d*", v) is not None),
    "ignore": (f"a list of {', '.join(THROUGHPUT[:2] + LATENCY)}",
               lambda v: isinstance(v, list) and all(m in THROUGHPUT[:2] + LATENCY for m in v)),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """One document: a paper's tables, a repository's benchmark page at a commit, one blog post."""

    id: str
    title: str
    where: str
    date: str
    kind: Kind
    prefixes: tuple[str, ...]
    stack: str  # catalogs/stacks.yaml id (training stack or serving engine)
    tflops: Literal["model", "hardware"] = "model"  # what achieved_tflops_per_gpu counts
    mfu_peak: Literal["plan", "bf16"] = "plan"  # the peak MFU divides by
    assume: dict[str, Any] = {}  # facts for cells the rows leave empty (reason in `why`)
    rows: dict[str, dict[str, Any]] = {}  # id glob → facts from the source's text, or {exclude: reason}
    why: str = ""  # where the assumed facts come from

    @model_validator(mode="after")
    def _known_facts(self) -> Source:
        known = FACTS[self.kind]
        stated = [("assume", key) for key in self.assume]
        stated += [(f"rows.'{pattern}'", key) for pattern, facts in self.rows.items() for key in facts]
        for where, key in stated:
            if key not in known:
                raise ValueError(f"source '{self.id}': {where}: unknown fact '{key}'.{suggest(key, known)} "
                                 f"A {self.kind} source may state: {', '.join(sorted(known))}")
        for where, facts in [("assume", self.assume), *((f"rows.'{p}'", f) for p, f in self.rows.items())]:
            for key, value in facts.items():
                expected, ok = FACT_VALUES.get(key, ("", lambda _: True))
                if not ok(value):
                    raise ValueError(f"source '{self.id}': {where}: {key} {value!r} is not {expected}")
        return self


class SourcesFile(_Strict):
    schema_version: int
    sources: tuple[Source, ...]


class Placement(_Strict):
    gpu: str
    server: str | None = None
    fabric: str | None = None


class Format(_Strict):
    weights: str
    kv: str


class Aliases(_Strict):
    """calibration/aliases.yaml: names the published runs use → catalog ids."""

    schema_version: int
    models: dict[str, str]  # model names → presets
    gpus: dict[str, Placement]  # GPU names → GPU (and the server and fabric it sat in)
    precisions: dict[str, Format]  # serving precision labels → weight and KV formats
    training_precisions: dict[str, Precision] = {}  # training precision labels → bf16 | fp16 | fp8 | fp4
    engines: dict[str, str] = {}  # regular expression on a row's engine text → engine id (first match wins)

    @field_validator("engines")
    @classmethod
    def _patterns_compile(cls, engines: dict[str, str]) -> dict[str, str]:
        for pattern in engines:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"'{pattern}' is not a regular expression ({exc})") from exc
        return engines


@dataclass(frozen=True)
class Comparison:
    """One measured figure of one row against the model's prediction."""

    row: str
    source: str
    regime: str
    config: str
    metric: str  # output_tokens_per_s | ttft_ms | tpot_ms | mfu | tflops_per_gpu | tokens_per_s_per_gpu
    measured: float
    predicted: float
    extrapolated: tuple[str, ...] = ()  # GPU family or stack with no calibration rows of its own
    vendor: str = ""  # the GPU's vendor (serving bands are kept per vendor)

    @property
    def error(self) -> float:
        """Signed relative error, (predicted − measured) / measured."""
        return (self.predicted - self.measured) / self.measured

    @cached_property
    def log_ratio(self) -> float:
        """log(measured / predicted): what the bands are made of (read thousands of times per row
        by their nested leave-one-source-out, so kept once computed)."""
        return math.log(self.measured / self.predicted)


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def default_data_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "calibration"


def load_sources(data_dir: Path | None = None) -> tuple[Source, ...]:
    path = (data_dir or default_data_dir()) / "sources.yaml"
    return validate(SourcesFile, read_yaml(path, ProblemError), path, ProblemError).sources


def load_aliases(data_dir: Path | None = None) -> Aliases:
    path = (data_dir or default_data_dir()) / "aliases.yaml"
    return validate(Aliases, read_yaml(path, ProblemError), path, ProblemError)


def source_of(row_id: str, sources: tuple[Source, ...]) -> Source | None:
    """The source whose longest prefix starts the row id."""
    best: tuple[int, Source] | None = None
    for s in sources:
        for prefix in s.prefixes:
            if row_id.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), s)
    return best[1] if best else None


def row_facts(row_id: str, source: Source) -> dict[str, Any]:
    """Facts the source's text gives for this row (every matching glob, in file order)."""
    facts: dict[str, Any] = {}
    for pattern, values in source.rows.items():
        if fnmatch.fnmatchcase(row_id, pattern):
            facts.update(values)
    return facts


def read_rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise ProblemError(f"{path}: missing column(s) {', '.join(missing)}. "
                                   f"To fix: a calibration CSV needs {', '.join(required)}.")
            rows = list(reader)
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file. To fix: check the path.") from None
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}). "
                           "To fix: save the file as UTF-8.") from None
    width = len(reader.fieldnames or [])
    for line, row in enumerate(rows, start=2):
        if None in row or None in row.values():
            raise ProblemError(f"{path}: line {line} ({row.get('id') or 'no id'}) does not have the header's {width} "
                               "cells. To fix: quote cells that hold commas, and fill every column (empty is fine).")
    return rows


def data_files(kind: Kind, data_dir: Path | None = None) -> tuple[str, ...]:
    """The calibration files of a kind, in number order: ``serving_runs.csv``, ``serving_runs_2.csv``,
    ... (a new file is read once it is there; none is listed by hand)."""
    stem = "training_runs" if kind == "training" else "serving_runs"
    numbered = {p.name: int(m.group(1) or 1) for p in (data_dir or default_data_dir()).glob(f"{stem}*.csv")
                if (m := re.fullmatch(rf"{stem}(?:_(\d+))?\.csv", p.name))}
    return tuple(sorted(numbered, key=numbered.__getitem__))


def read_kind(kind: Kind, data_dir: Path | None = None) -> list[dict[str, str]]:
    """Every row of a kind, from every file of that kind; each file has every column."""
    required = TRAINING_COLUMNS if kind == "training" else SERVING_COLUMNS
    data_dir = data_dir or default_data_dir()
    return [row for name in data_files(kind, data_dir) for row in read_rows(data_dir / name, required)]


def claimed(row: dict[str, str], sources: tuple[Source, ...], counts: tuple[str, ...]
            ) -> tuple[Source, dict[str, Any]] | str:
    """The row's source and the facts it states about the row, or why the row is not tried: no
    source claims it, its source excludes it, or a count column cannot be read."""
    source = source_of(row["id"], sources)
    if source is None:
        return "no source in calibration/sources.yaml claims this row's id"
    facts = row_facts(row["id"], source)
    if "exclude" in facts:
        return str(facts["exclude"])
    if bad := malformed_count(row, counts):
        return bad
    return source, facts


def collect_cases(kind: Kind, build: Callable[[dict[str, str]], Any], sources: tuple[Source, ...],
                  data_dir: Path | None = None) -> tuple[list[Any], list[tuple[str, str, str]]]:
    """(cases, skipped) over every row of a kind: ``build`` returns a case or the reason it cannot be
    expressed; skipped is (row id, source id, reason)."""
    cases: list[Any] = []
    skipped: list[tuple[str, str, str]] = []
    for row in read_kind(kind, data_dir):
        case = build(row)
        if isinstance(case, str):
            src = source_of(row["id"], sources)
            skipped.append((row["id"], src.id if src else "", case))
        else:
            cases.append(case)
    return cases, skipped


def malformed_count(row: dict[str, str], columns: tuple[str, ...]) -> str | None:
    """The reason a filled-in count cell (GPUs, TP, a layer count, ...) cannot be read, if one cannot."""
    for column in columns:
        value = (row.get(column) or "").strip()
        if value and not ((n := to_int(value)) is not None and n > 0):
            return f"column '{column}' is not a positive whole number ('{value}')"
    return None


def to_int(value: Any) -> int | None:
    try:
        return int(str(value).replace(",", "").strip())
    except (TypeError, ValueError):
        return None


def measured_value(text: str | None) -> float | None:
    """A measurement cell: a finite number above zero, else None (not a measurement)."""
    value = to_float(text)
    return value if value is not None and math.isfinite(value) and value > 0 else None


def to_float(value: Any) -> float | None:
    try:
        return float(str(value).replace(",", "").strip()) if value not in ("", None) else None
    except ValueError:
        return None
