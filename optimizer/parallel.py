"""Independent tasks over worker processes, in task order, or in this process where workers
cannot start (a sandbox without POSIX semaphores, a process limit) or die: the answers are the same
either way, only slower, so a failed pool costs time and a warning, not the command."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(task: Callable[[T], R], items: Sequence[T], workers: int, initializer: Callable[..., None],
                initargs: tuple[Any, ...], serial: Callable[[T], R] | None = None) -> Iterator[R]:
    """``task`` over ``items`` in ``workers`` processes (each set up by ``initializer(*initargs)``),
    yielding results in the order of ``items`` as they come. With one worker, and for whatever is left
    when the pool cannot start or breaks, items are computed in this process: by ``serial``, or
    (None) by ``task`` once ``initializer`` has set this process up too."""
    done = 0
    if workers > 1 and len(items) > 1:
        try:
            with ProcessPoolExecutor(min(workers, len(items)), initializer=initializer, initargs=initargs) as pool:
                for result in pool.map(task, items):
                    yield result
                    done += 1
            return
        except (OSError, BrokenProcessPool) as err:
            warnings.warn(f"worker processes failed ({type(err).__name__}: {err}); running the remaining "
                          f"{len(items) - done} of {len(items)} tasks in this process", RuntimeWarning, stacklevel=2)
    if serial is None and done < len(items):
        initializer(*initargs)
    yield from map(serial or task, items[done:])
