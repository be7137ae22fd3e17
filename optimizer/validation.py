"""Reading YAML and turning pydantic's complaints into messages a user can act on.

Each message names the file, the entry, the field, what was expected and a likely fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ValidationError

from optimizer.errors import GpuoptError, suggest

# a value such as 50,000 in a flow mapping: YAML would end the value at its comma
_FLOW_THOUSANDS = re.compile(r"(:[ \t]+)(\d{1,3}(?:,\d{3})+)(?=[ \t]*[,}])")


def thousands_in_flow(text: str) -> str:
    """``{name: chat, output_tokens_per_s: 50,000}`` read as 50000, as people write it: in a flow
    mapping YAML splits ``50,000`` at the comma into 50 and a key ``000``. Only a value after a
    key's colon, on a line inside braces, with groups of three digits, followed by a comma or the
    closing brace; quoted text and block mappings are untouched."""
    lines = []
    for line in text.splitlines(keepends=True):
        if "{" in line and not line.lstrip().startswith("#"):
            line = _FLOW_THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), line)
        lines.append(line)
    return "".join(lines)


class _UniqueKeys:
    """Refuses a mapping that gives one key twice (PyYAML keeps the last silently, so a second
    `budget:` would quietly replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        loader: Any = self  # a yaml loader: this class is mixed into one
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key '{key}' is given twice (lines {seen[key]} and {line})", key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """YAML's safe loader in Python: what every message about a malformed file comes from."""


class _FastUniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same on libyaml's parser (the catalogs' 11,000 nodes in a tenth of the time)."""


def _load(text: str) -> Any:
    """The YAML document in ``text``; a file libyaml cannot read is read again in Python, whose
    error (and line) is the one reported."""
    try:
        return yaml.load(text, Loader=_FastUniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except Exception:  # noqa: BLE001 - any fault: the Python loader below raises the one to report
        pass
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: Path, error: type[GpuoptError],
              rewrite: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Parse a YAML file or raise ``error`` with the file and the line of the fault; ``rewrite``
    may first turn what people type into YAML (``thousands_in_flow``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file. To fix: check the path.") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise error(f"{path}: not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at line {line}. "
                    "To fix: save the file as UTF-8.") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror}).") from None
    if rewrite is not None:
        text = rewrite(text)
    try:
        data = _load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        fix = "keep one of them" if "given twice" in problem else "check indentation and quoting"
        raise error(f"{path}: malformed YAML{where}: {problem}. To fix: {fix}.") from None
    except ValueError as exc:  # a well-formed scalar its type cannot hold: 2024-02-30, an integer of 5000 digits
        reason = str(exc).split(";")[0]  # not Python's advice on sys.set_int_max_str_digits
        raise error(f"{path}: unreadable YAML value{_where_unreadable(text)}: {reason}. To fix: correct it, "
                    "or quote it to keep it as text.") from None
    except RecursionError:  # PyYAML composes nested lists and mappings recursively
        raise error(f"{path}: lists or mappings nested too deeply to read. To fix: check the brackets.") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of keys at the top level, found {type(data).__name__}.")
    return data


def _where_unreadable(text: str) -> str:
    """' at line L, column C' of the first scalar that YAML parses but cannot construct ('' if none)."""
    loader = yaml.SafeLoader(text)
    try:
        pending, seen = [loader.get_single_node()], set()
        while pending:
            node = pending.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, yaml.ScalarNode):
                try:
                    loader.construct_object(node)
                except ValueError:
                    return f" at line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"
            elif isinstance(node, yaml.MappingNode):
                pending += [part for pair in reversed(node.value) for part in reversed(pair)]
            else:
                pending += reversed(node.value)
    except (yaml.YAMLError, RecursionError):
        return ""
    finally:
        loader.dispose()
    return ""


_MISSING = object()


def _step(node: Any, part: Any) -> Any:
    """The child of ``node`` that a location part names, or ``_MISSING``."""
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return _MISSING


def _entry_label(data: Any, loc: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """Describe where ``loc`` points: 'gpus[2] (id 'h100-sxm')' and the rest of the path."""
    node = data
    label = []
    for i, part in enumerate(loc):
        child = _step(node, part)
        if child is _MISSING:
            break
        if isinstance(node, list):
            ident = child.get("id") if isinstance(child, dict) else None
            label.append(f"[{part}]" + (f" (id '{ident}')" if ident else ""))
            if ident:
                return "".join(label).lstrip("."), loc[i + 1 :]
        else:
            label.append(f".{part}" if label else str(part))
        node = child
    return "", loc


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at ``loc`` (for a close-match suggestion on an unknown key)."""
    candidates: list[Any] = [model]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        nested: list[Any] = []
        for current in candidates:
            fields = getattr(current, "model_fields", {})
            if part in fields:
                nested += _models_in(fields[part].annotation)
        candidates = nested or candidates
    names: list[str] = []
    for current in candidates:
        names += [n for n in getattr(current, "model_fields", {}) if n not in names]
    return names


def _models_in(annotation: Any) -> list[Any]:
    """The pydantic models inside an annotation (through Optional, unions, Annotated, tuples)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[Any] = []
    for arg in getattr(annotation, "__args__", ()):
        found += _models_in(arg)
    return found


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` without the tags pydantic inserts for tagged unions (parts the data does not have),
    keeping the last part (a missing field is, by definition, not in the data)."""
    node, kept = data, []
    loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))  # validator tags of unions
    for i, part in enumerate(loc):
        child = _step(node, part)
        if child is not _MISSING:
            node = child
            kept.append(part)
        elif i == len(loc) - 1 or not isinstance(part, str) or not isinstance(node, dict):
            kept.append(part)
    return tuple(kept)


def format_errors(exc: ValidationError, path: Path, data: Any, model: type[BaseModel]) -> str:
    """One line per pydantic error: file, entry, field, what was wrong, how to fix it."""
    lines = []
    for err in exc.errors():
        if _losing_union_branch(data, tuple(err["loc"]), err["type"]):
            continue
        loc = _data_path(data, tuple(err["loc"]))
        entry, rest = _entry_label(data, loc)
        field = _dotted(rest) or "(entry)"
        where = f"{entry}: field '{field}'" if entry else (f"field '{_dotted(loc)}'" if loc else "the whole file")
        kind = err["type"]
        if kind == "extra_forbidden":
            hint = suggest(str(loc[-1]), _fields_at(model, loc))
            lines.append(f"{path}: {where}: unknown key.{hint or ' To fix: remove it.'}")
        elif kind == "missing":
            lines.append(f"{path}: {where}: required but missing. To fix: add it.")
        else:
            got = err.get("input")
            msg = err["msg"].removeprefix("Value error, ")
            shown = f" (got {short_repr(got)})" if not isinstance(got, (dict, list)) and repr(got) not in msg else ""
            lines.append(f"{path}: {where}: {msg}{shown}.")
    return "\n".join(lines)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (a 400-digit number is not worth printing)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def _dotted(parts: tuple[Any, ...]) -> str:
    """A location as the user writes it: keys joined by dots, list positions in brackets (search.tp[0])."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _losing_union_branch(data: Any, loc: tuple[Any, ...], kind: str) -> bool:
    """A 'should be a string/number' complaint about a value the user wrote as a mapping comes
    from the scalar branch of a union (``model: preset-id | {shape}``); the other branch's error
    is the one that helps."""
    if kind not in ("string_type", "int_type", "float_type", "bool_type") or len(loc) < 2:
        return False
    node = data
    for part in loc[:-1]:
        child = _step(node, part)
        if child is not _MISSING:
            node = child
        elif not (isinstance(part, str) and isinstance(node, dict)):
            return False
    return isinstance(node, dict) and loc[-1] in ("str", "int", "float", "bool")


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, path: Path, error: type[GpuoptError]) -> M:
    """``model.model_validate(data)`` with our message on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_errors(exc, path, data, model)) from None


_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_quantity(value: object) -> float:
    """Read 1e12, '1T', '500B', '2.5M' or '500k' as a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and abs(value) > 1e300:  # float() of a larger int overflows
            raise ValueError(f"expected a number below 1e300, not one of {len(str(abs(value)))} digits")
        number = float(value)
    else:
        text = str(value)
        if re.fullmatch(r"\s*[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?\s*[kmbgtKMBGT]?\s*", text):
            text = text.replace(",", "")  # thousands separators: '1,000', '50,000'
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*", text, re.IGNORECASE)
        if not match:
            raise ValueError(f"expected a number such as 1e12, '1T', '500B', '250k' or '1,000', got {value!r}")
        number = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def parse_positive(value: object) -> float:
    """A positive finite number, written as ``parse_quantity`` reads it."""
    number = parse_quantity(value)
    if not 0 < number < math.inf:
        raise ValueError(f"must be a positive finite number, got {value!r}")
    return number


def parse_count(value: object) -> int:
    """A whole number written as 64, '1,000' or '2k' (the schema's range checks follow)."""
    number = parse_quantity(value)
    if number != int(number):
        raise ValueError(f"expected a whole number such as 64, '1,000' or '2k', got {value!r}")
    return int(number)


def parse_fraction(value: object) -> float:
    """A share written as 0.1 or '10%'."""
    if isinstance(value, str) and value.strip().endswith("%"):
        return parse_quantity(value.strip()[:-1]) / 100.0
    return parse_quantity(value)


Count = Annotated[int, BeforeValidator(parse_count)]  # 64, '1,000' or '2k'
Number = Annotated[float, BeforeValidator(parse_quantity)]  # 30, '1,000' or '2.5k'
Fraction = Annotated[float, BeforeValidator(parse_fraction)]  # 0.1 or '10%'
