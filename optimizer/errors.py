"""The one small exception hierarchy of gpuopt.

The library raises these; only the CLI (``optimizer.cli.common.handle_errors``) turns them into messages and exit codes
(bad input → 2, infeasible → 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuoptError(Exception):
    """Base of every error gpuopt raises on purpose."""


class CatalogError(GpuoptError):
    """A catalog file is missing, malformed, or holds an impossible value."""


class ProblemError(GpuoptError):
    """A problem file (or a command-line configuration) is malformed or impossible."""


class InfeasibleError(GpuoptError):
    """No cluster meets the targets; ``hints`` say what would make one feasible."""

    def __init__(self, message: str, hints: Iterable[str] = ()) -> None:
        self.hints = list(hints)
        text = message
        if self.hints:
            text += "\n" + "\n".join(f"  - {h}" for h in self.hints)
        super().__init__(text)


class SolverError(GpuoptError):
    """The MIP solver failed or stopped without a usable answer."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean 'x'?' for the closest match among ``choices``, or ''."""
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return f" Did you mean '{match[0]}'?" if match else ""
