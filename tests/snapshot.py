"""Byte-for-byte snapshots of what the CLI prints (issue 14: every refactoring step leaves them
unchanged, or changes them in a commit of its own that says why).

A snapshot that differs fails with a unified diff. To accept new output on purpose, run the tests
with ``GPUOPT_UPDATE_SNAPSHOTS=1`` and commit the rewritten files under ``tests/snapshots/`` in a
commit that names the change.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("GPUOPT_UPDATE_SNAPSHOTS") == "1"


def assert_snapshot(name: str, text: str) -> None:
    """``text`` equals the stored snapshot ``name`` (rewritten instead when updating)."""
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"no snapshot {path.name}: run the tests with GPUOPT_UPDATE_SNAPSHOTS=1 to record it")
    stored = path.read_text(encoding="utf-8")
    if stored != text:
        diff = difflib.unified_diff(stored.splitlines(keepends=True), text.splitlines(keepends=True),
                                    f"{name} (stored)", f"{name} (now)", n=2)
        raise AssertionError(f"output differs from snapshot {name}:\n" + "".join(list(diff)[:80]))
