"""Reading YAML and turning pydantic's complaints into messages a user can act on.

Each message names the file, the entry, the field, what was expected and a likely fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from optimizer.errors import GpuoptError, suggest


def read_yaml(path: Path, error: type[GpuoptError]) -> Any:
    """Parse a YAML file or raise ``error`` with the file and the line of the fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file. To fix: check the path.") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror}).") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{path}: malformed YAML{where}: {problem}. To fix: check indentation and quoting.") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of keys at the top level, found {type(data).__name__}.")
    return data


def _entry_label(data: Any, loc: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """Describe where ``loc`` points: 'gpus[2] (id 'h100-sxm')' and the rest of the path."""
    node = data
    label = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
            ident = node.get("id") if isinstance(node, dict) else None
            label.append(f"[{part}]" + (f" (id '{ident}')" if ident else ""))
            if ident:
                return "".join(label).lstrip("."), loc[i + 1 :]
        elif isinstance(node, dict) and part in node:
            node = node[part]
            label.append(f".{part}" if label else str(part))
        else:
            break
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
    for i, part in enumerate(loc):
        present = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node))
        if present:
            node = node[part]
            kept.append(part)
        elif i == len(loc) - 1 or not isinstance(part, str) or not isinstance(node, dict):
            kept.append(part)
    return tuple(kept)


def format_errors(exc: ValidationError, path: Path, data: Any, model: type[BaseModel]) -> str:
    """One line per pydantic error: file, entry, field, what was wrong, how to fix it."""
    lines = []
    for err in exc.errors():
        loc = _data_path(data, tuple(err["loc"]))
        entry, rest = _entry_label(data, loc)
        field = ".".join(str(p) for p in rest) or "(entry)"
        where = f"{entry}: field '{field}'" if entry else f"field '{'.'.join(str(p) for p in loc)}'"
        kind = err["type"]
        if kind == "extra_forbidden":
            hint = suggest(str(loc[-1]), _fields_at(model, loc))
            lines.append(f"{path}: {where}: unknown key.{hint or ' To fix: remove it.'}")
        elif kind == "missing":
            lines.append(f"{path}: {where}: required but missing. To fix: add it.")
        else:
            got = err.get("input")
            shown = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
            lines.append(f"{path}: {where}: {err['msg']}{shown}.")
    return "\n".join(lines)


def validate(model: type[BaseModel], data: Any, path: Path, error: type[GpuoptError]) -> Any:
    """``model.model_validate(data)`` with our message on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_errors(exc, path, data, model)) from None
