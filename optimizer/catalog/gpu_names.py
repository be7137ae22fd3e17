"""GPU names as people write them ("H100", "4090", "MI300X", "RTX 6000 Ada") to catalog ids.

A name resolves when exactly one catalog GPU carries all its words (in its id or its name, vendor
and brand words aside), or when one GPU's id is exactly those words, a series word such as "RTX"
aside ("H100 SXM" is h100-sxm, not the 96 GB variant; "3090" the RTX 3090, not the 3090 Ti).
Otherwise it stays as written: the problem's id checks then say it is unknown (with close
matches), and ``candidates`` lets the caller list the GPUs an ambiguous name could be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

BRAND_WORDS = frozenset({"nvidia", "amd", "intel", "geforce", "instinct", "radeon", "habana"})
SERIES_WORDS = frozenset({"rtx"})  # "3090" is the RTX 3090: a series word may be left out


class Named(Protocol):
    name: str


def words(text: str) -> frozenset[str]:
    """Lower-case words of a GPU name, vendor and brand words left out ('NVIDIA GeForce RTX 4090' ->
    {'rtx', '4090'})."""
    return frozenset(w for w in re.split(r"[^a-z0-9]+", text.lower()) if w and w not in BRAND_WORDS)


def candidates(text: str, gpus: Mapping[str, Named]) -> list[str]:
    """The catalog GPUs a name could mean, most specific first: the id itself; else the one id
    that is exactly the name's words; else every GPU whose id or name has all of them."""
    if text in gpus:
        return [text]
    wanted = words(text)
    if not wanted:
        return []
    exact = [gid for gid in gpus if words(gid) - SERIES_WORDS == wanted - SERIES_WORDS]
    if len(exact) == 1:
        return exact
    return sorted(gid for gid, gpu in gpus.items() if wanted <= words(gid) | words(gpu.name))


def resolve(text: str, gpus: Mapping[str, Named]) -> str | list[str]:
    """The catalog id a name means, or the list of ids it could mean (empty: none)."""
    found = candidates(text, gpus)
    return found[0] if len(found) == 1 else found
