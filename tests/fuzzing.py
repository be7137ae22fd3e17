"""Seeded mutations of the shipped problem files, and one run of ``gpuopt solve`` on each.

A case drops keys, swaps values for junk of other types (strings, negative numbers, zero,
lists, mappings, None, huge numbers, NaN) or for values of the right type that are off, adds
unknown keys, misspells keys; or it changes the file text: cuts it short, writes an odd scalar
(an impossible date, a 5000-digit number, brackets nested 3000 deep) or inserts bytes that are
not UTF-8. Every case must end in exit code 0, 1 or 2 with a message: never a traceback. Shared by
tests/test_fuzz.py (a few hundred cases) and benchmarks/fuzz_inputs.py (thousands).

Each case is first loaded in-process (the path that parses and validates a problem). One that
fails to load runs through the CLI, which must exit 2 with a message. One that loads is solved
through the CLI (MIP time limit one second) when its source problem enumerates plans quickly
and the seed picks it; the rest count as loaded.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import functools
import math
import random
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from click.testing import CliRunner

from optimizer.catalog import Catalog, load_catalog
from optimizer.cli import main
from optimizer.errors import GpuoptError
from optimizer.problem import load_priced

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "problems").glob("*.yaml"))
# problems whose plans enumerate in about a second: mutations of these may be solved
QUICK = {"buy_or_rent_serving.yaml", "chat_and_batch_serving.yaml", "export_controlled_racks.yaml",
         "lab_quotes.yaml", "llama2_70b_serving.yaml", "llama2_70b_serving_4090.yaml",
         "llama2_70b_serving_h100.yaml", "owned_inventory_serving.yaml", "rent_or_buy_pretrain.yaml"}
JUNK: tuple[Any, ...] = (
    None, "", "junk", "1T", "-5", "0", " ", "nan", "1e999", 0, -1, -7, 0.0, -0.5, 2.5, 1e308, -1e308, 10**30,
    2**63, 10**400, math.inf, -math.inf, math.nan, True, False, [], [0], [-1], ["junk"], [None], [[1, 2]], [{}],
    {}, {"junk": 1}, {1: 2}, {"id": None}, datetime.date(2024, 1, 1),
)
UNKNOWN_KEYS = ("colour", "tp2", "gpus", "deadline", "id", "price", "1", "search", "model")
EXIT_CODES = (0, 1, 2)


@dataclass(frozen=True)
class Case:
    """One mutated problem: the seed that made it, its source file, what was done, and the text."""

    seed: int
    source: Path
    mutations: tuple[str, ...]
    content: bytes  # the mutated file
    solve: bool  # solve it if it loads (else load only)


@dataclass(frozen=True)
class Outcome:
    """How a case ended: the exit code (None: loaded, not solved) and any failure report."""

    case: Case
    exit_code: int | None
    failure: str | None = None

    def report(self) -> str:
        """The seed, the mutations, the mutated YAML and what went wrong."""
        c = self.case
        return (f"seed {c.seed} ({c.source.name}; {'; '.join(c.mutations)}): {self.failure}\n"
                f"--- mutated YAML ---\n{c.content.decode('utf-8', 'replace')}\n--- end ---")


def _nodes(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, Any, tuple[Any, ...]]]:
    """Every (container, key, path) below ``data``, where ``container[key]`` is a value."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in list(items):
        yield data, key, (*path, key)
        yield from _nodes(value, (*path, key))


def _containers(data: Any) -> list[tuple[dict, tuple[Any, ...]]]:
    """Every mapping in ``data`` with its path, the top level included."""
    found = [(data, ())] if isinstance(data, dict) else []
    return found + [(c[k], path) for c, k, path in _nodes(data) if isinstance(c[k], dict)]


def _where(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top)"


def _junk(rng: random.Random) -> Any:
    """A fresh copy of one junk value (never shared, so later mutations cannot reach into JUNK)."""
    return copy.deepcopy(rng.choice(JUNK))


def _near(value: Any, rng: random.Random) -> Any:
    """A value of the same kind as ``value`` but off: a number negated, zeroed, halved, made
    fractional or huge; a string misspelt; a list emptied, cut or repeated."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)) and abs(value) < 1e300:
        return rng.choice([-value, 0, value / 100, value / 2, value + 0.5, value * 2, value * 100, 10**400, -1])
    if isinstance(value, str):
        return rng.choice([value[:-1], value.upper(), value + "x", "", f" {value}"])
    if isinstance(value, list):
        return rng.choice([[], value[:1], value + value[-1:], value[::-1], [value]])
    return _junk(rng)


def _drop(data: dict, rng: random.Random) -> str:
    container, key, path = rng.choice(list(_nodes(data)))
    del container[key]
    return f"drop {_where(path)}"


def _replace(data: dict, rng: random.Random) -> str:
    container, key, path = rng.choice(list(_nodes(data)))
    value = _near(container[key], rng) if rng.random() < 0.5 else _junk(rng)
    container[key] = value
    return f"{_where(path)} = {value!r}"


def _add_unknown(data: dict, rng: random.Random) -> str:
    container, path = rng.choice(list(_containers(data)))
    key = rng.choice(UNKNOWN_KEYS)
    if key in container:
        key = key + "_x"
    container[key] = _junk(rng)
    return f"add {_where((*path, key))}"


def _misspell(data: dict, rng: random.Random) -> str:
    container, path = rng.choice(list(_containers(data)))
    if not container:
        return "misspell nothing"
    key = rng.choice(list(container))
    wrong = str(key)[:-1] or "x"
    container[wrong] = container.pop(key)
    return f"rename {_where((*path, key))} to {wrong!r}"


MUTATIONS = (_drop, _replace, _replace, _add_unknown, _misspell)
VALUE_LINE = re.compile(r"^(\s*-?\s*[\w-]+:[ \t]+)(\S.*)$", re.MULTILINE)


def _set_value(text: str, rng: random.Random, value: str) -> str:
    """``text`` with the value of one random 'key: value' line written as ``value``."""
    lines = list(VALUE_LINE.finditer(text))
    if not lines:
        return text + value
    m = rng.choice(lines)
    return text[: m.start(2)] + value + text[m.end(2):]


def _cut(text: str, rng: random.Random) -> tuple[bytes, str]:
    cut = rng.randrange(len(text))
    return text[:cut].encode(), f"truncate at {cut} of {len(text)} characters"


def _huge_integer(text: str, rng: random.Random) -> tuple[bytes, str]:
    digits = rng.choice((400, 5000))
    return _set_value(text, rng, "9" * digits).encode(), f"a value of {digits} digits"


def _odd_scalar(text: str, rng: random.Random) -> tuple[bytes, str]:
    value = rng.choice(("2024-02-30", "2024-13-01", ".nan", "-.inf", "0x1F", "0o17", "1_000", "~", "'", "{", "*x",
                        "!!binary aGk=", "!!python/name:os.system", "[" * 3000 + "]" * 3000))
    return _set_value(text, rng, value).encode(), f"a value written {value[:20]!r}"


def _bad_bytes(text: str, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(text))
    junk = rng.choice((b"\xe9", b"\xff\xfe", b"\x00", b"\t", b"\r", b"\x1b[31m"))
    raw = text.encode()
    return raw[:at] + junk + raw[at:], f"insert {junk!r} at byte {at}"


TEXT_MUTATIONS = (_cut, _cut, _huge_integer, _odd_scalar, _odd_scalar, _bad_bytes)


def make_case(seed: int, solve_share: float = 0.5) -> Case:
    """The mutated problem of ``seed``: 1-3 mutations of a shipped problem's keys and values, or
    one of its text (cut short, an odd scalar, a huge number, bytes that are not UTF-8)."""
    rng = random.Random(seed)
    source = rng.choice(SOURCES)
    text = source.read_text(encoding="utf-8")
    solve = source.name in QUICK and rng.random() < solve_share
    if rng.random() < 0.15:
        content, done = rng.choice(TEXT_MUTATIONS)(text, rng)
        return Case(seed, source, (done,), content, solve)
    data = yaml.safe_load(text)
    count = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
    done = tuple(rng.choice(MUTATIONS)(data, rng) for _ in range(count))
    content = yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()
    return Case(seed, source, done, content, solve)


@functools.cache
def shared_catalog() -> Catalog:
    """The shipped catalog, loaded once (each run of the CLI would otherwise reload it)."""
    return load_catalog()


@contextlib.contextmanager
def quick_catalog() -> Iterator[None]:
    """Let the CLI's commands use the catalog loaded once."""
    with mock.patch("optimizer.api.load_catalog", lambda root=None: shared_catalog()):
        yield


def _cli(case: Case, path: Path, *extra: str, expect: tuple[int, ...] = EXIT_CODES) -> Outcome:
    """Run ``gpuopt solve`` on the case; a traceback, an exit code not in ``expect`` or an exit
    without a message is a failure."""
    result = CliRunner().invoke(main, ["solve", str(path), *extra])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else repr(result.exception)
        return Outcome(case, None, f"traceback:\n{trace}")
    if result.exit_code not in expect:
        return Outcome(case, result.exit_code, f"exit code {result.exit_code}:\n{result.output}")
    if result.exit_code and not result.output.strip():
        return Outcome(case, result.exit_code, f"exit code {result.exit_code} without a message")
    return Outcome(case, result.exit_code)


def run_case(case: Case, folder: Path) -> Outcome:
    """Load the case in-process; through the CLI if it fails to load, or if it loads and is to be solved.
    Call inside ``quick_catalog()``."""
    path = folder / f"fuzz_{case.seed}.yaml"
    path.write_bytes(case.content)
    try:
        load_priced(path, shared_catalog())
    except GpuoptError:
        return _cli(case, path, expect=(2,))  # bad input: exit 2 with the message
    except Exception:  # the fuzzer reports whatever escapes the loader
        return Outcome(case, None, f"traceback while loading:\n{traceback.format_exc()}")
    if not case.solve:
        return Outcome(case, None)
    return _cli(case, path, "--time-limit", "1")
