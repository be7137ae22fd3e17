"""What every gpuopt command shares: turning gpuopt's exceptions into messages and exit codes
(0 success, 1 infeasible, 2 bad input and solver failures), and the --catalog option."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import click

from optimizer.api import CatalogError, GpuoptError, InfeasibleError, ProblemError, parse_quantity

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2


def handle_errors(fn):
    """Turn gpuopt's exceptions into a message on stderr and the documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InfeasibleError as exc:
            click.echo(f"infeasible: {exc}", err=True)
            sys.exit(EXIT_INFEASIBLE)
        except GpuoptError as exc:
            kind = {CatalogError: "catalog error", ProblemError: "problem error"}.get(type(exc), "error")
            click.echo(f"{kind}: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except BrokenPipeError:  # stdout closed early (`gpuopt … | head`): not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as exc:  # an output file (--csv, --plot, --bom, -o) that cannot be written
            where = exc.filename or "a file"
            click.echo(f"error: cannot write {where}: {exc.strerror or exc}. To fix: check that its folder "
                       "exists and is writable.", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper


catalog_option = click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False, path_type=Path),
                              default=None, help="Catalog folder (default: the catalogs/ shipped with gpuopt).")

price_option = click.option("--price", "prices", multiple=True, metavar="ID=VALUE",
                            help="Override a catalog price (GPU, server, NIC, switch, cable or cloud offer): "
                                 "ID=21000, ID=21k or ID=-15%. Repeatable; wins over the problem's price book.")


def workers_option(what: str, note: str = "") -> Any:
    """``--workers``: processes for ``what``; 0 (the default) is one per core, and the command
    receives the resolved count."""
    return click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
                        callback=lambda _ctx, _param, n: n or os.cpu_count() or 1,
                        help=f"Processes for {what} (0: one per core){'; ' + note if note else ''}.")


class Count(click.ParamType):
    """A positive whole number written as people write it on the command line: 512, 1k, 32K, 1e3
    (the problem files' quantities: k = 1,000)."""

    name = "count"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            number: float = value
        else:
            try:
                number = parse_quantity(value)
            except ValueError as exc:
                self.fail(f"{exc}", param, ctx)
        if number < 1 or number != int(number):
            self.fail(f"expected a positive whole number (such as 512 or 1k), got {value!r}", param, ctx)
        return int(number)


COUNT = Count()

