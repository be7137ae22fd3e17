"""Names in a problem file checked against the catalog: GPUs as people say them ("H100 SXM",
"4090") turned into catalog ids, and every unknown or ambiguous id of a file found in one run,
each with its field, close matches and the ids that would do."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optimizer.catalog import Catalog, gpu_names, priced_item
from optimizer.errors import CatalogError, suggest


def gpu_id(text: str, catalog: Catalog) -> tuple[str, tuple[str, ...]]:
    """(the catalog id a GPU name as people say it means, or the text itself where it names none
    or is already an id; the GPUs an ambiguous name could be, empty otherwise — its id is the first)."""
    if text in catalog.gpus or text in catalog.servers:
        return text, ()
    found = gpu_names.resolve(text, catalog.gpus)
    if isinstance(found, str):
        return found, ()
    return (found[0], tuple(found)) if len(found) > 1 else (text, ())


def gpu_ids(data: dict[str, Any], catalog: Catalog, path: Path) -> tuple[dict[str, Any], list[str]]:
    """``data`` with the GPUs of hardware.allow_gpus / exclude_gpus / max_units and inventory
    written as people say them ("H100 SXM", "4090", "MI300X") turned into catalog ids, and the
    errors of names that could be several GPUs (each listing them; the name is kept as the first,
    so that the other checks still run). Names matching nothing are left for the id checks
    (unknown id, with close matches)."""
    errors: list[str] = []

    def one(text: object, field: str) -> object:
        if not isinstance(text, str):
            return text
        ident, several = gpu_id(text, catalog)
        if several:
            errors.append(f"{path}: field '{field}': '{text}' could be any of {', '.join(several)}. "
                          "To fix: name the one you mean (or list each you allow).")
        return ident

    out = dict(data)
    hw = data.get("hardware")
    if isinstance(hw, dict):
        hw = dict(hw)
        for key in ("allow_gpus", "exclude_gpus"):
            if isinstance(hw.get(key), list):
                hw[key] = [one(g, f"hardware.{key}[{i}]") for i, g in enumerate(hw[key])]
        if isinstance(hw.get("max_units"), dict):
            hw["max_units"] = {one(k, f"hardware.max_units.{k}"): v for k, v in hw["max_units"].items()}
        out["hardware"] = hw
    if isinstance(data.get("inventory"), list):
        out["inventory"] = [{**e, "gpu": one(e.get("gpu"), f"inventory[{i}].gpu")} if isinstance(e, dict) else e
                            for i, e in enumerate(data["inventory"])]
    return out, errors


def price_id_errors(data: dict[str, Any], path: Path, catalog: Catalog) -> list[str]:
    """The price book's entries that name nothing in the catalog (as ``resolve_prices`` says it)."""
    out = []
    for item in data["prices"] if isinstance(data.get("prices"), dict) else ():
        try:
            priced_item(catalog, item)
        except CatalogError as exc:
            out.append(f"{path}: field 'prices.{item}': {exc}")
    return out


def id_errors(data: dict[str, Any], path: Path, catalog: Catalog) -> list[str]:
    """Every unknown GPU, server, fabric, offer and priced item of a problem, so that one run
    reports every fault (each as its own check would; ``resolve.model_errors`` adds the models)."""
    out: list[str] = []

    def check(named: list[tuple[str, object]], table: Mapping[str, object]) -> None:
        out.extend(f"{path}: field '{field}': unknown id '{ident}'.{suggest(ident, table)}"
                   f" To fix: use one of {', '.join(sorted(table))}."
                   for field, ident in named if isinstance(ident, str) and ident not in table)

    def listed(field: str, ids: object) -> list[tuple[str, object]]:
        return [(f"{field}[{i}]", x) for i, x in enumerate(ids)] if isinstance(ids, (list, tuple)) else []

    raw = data.get("hardware")
    hw: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for field, table in (("allow_gpus", catalog.gpus), ("exclude_gpus", catalog.gpus),
                         ("exclude_servers", catalog.servers), ("exclude_fabrics", catalog.fabrics)):
        check(listed(f"hardware.{field}", hw.get(field)), table)
    if isinstance(hw.get("max_units"), dict):
        check([(f"hardware.max_units.{k}", k) for k in hw["max_units"]], {**catalog.gpus, **catalog.servers})
    for i, e in enumerate(data.get("inventory") or () if isinstance(data.get("inventory"), list) else ()):
        if isinstance(e, dict):
            check([(f"inventory[{i}].gpu", e.get("gpu"))], catalog.gpus)
            check([(f"inventory[{i}].server", e.get("server"))], catalog.servers)
    proc = data.get("procurement")
    if isinstance(proc, dict):
        check(listed("procurement.offers", proc.get("offers")), catalog.offers)
    out += price_id_errors(data, path, catalog)
    return out
