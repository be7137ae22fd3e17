"""CLI: the model against published runs (validate) and the fit that writes the catalog's
efficiency parameters and bands (fit). Thin over ``optimizer.calibration``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from optimizer import api as go
from optimizer.cli.common import catalog_option, handle_errors, workers_option


def _progress() -> Callable[[str, int, str], None] | None:
    """A line on a terminal naming the source left out; nothing in a pipe or a log."""
    if not sys.stderr.isatty():
        return None
    shown: list[str] = []

    def show(kind: str, k: int, source: str) -> None:
        if shown and shown[-1] != kind:
            click.echo("", err=True)
        shown.append(kind)
        click.echo(f"\r{kind}: leaving out source {k + 1} ({source})" + " " * 20, nl=False, err=True)
    return show


@click.command("validate")
@click.option("--cv", type=click.Choice(["none", "source"]), default="none", show_default=True,
              help="'source': refit with each source left out and predict it (the headline accuracy); "
                   "'none': the catalog's parameters on every row.")
@click.option("--kind", type=click.Choice(["training", "serving", "both"]), default="both", show_default=True)
@click.option("--rows", is_flag=True, help="List every row's comparison and every row that cannot be expressed.")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A folder of calibration CSVs with its sources.yaml and aliases.yaml (default: calibration/).")
@workers_option("the leave-one-source-out fits", "the figures are the same with any number")
@catalog_option
@handle_errors
def validate_cmd(cv: str, kind: str, rows: bool, fmt: str, data_dir: Path | None, workers: int,
                 catalog_dir: Path | None) -> None:
    """Predicted versus measured for every published run the model can express.

    Training rows compare MFU, TFLOP/s or tokens/s per GPU by each source's own FLOP convention;
    serving rows compare throughput, TTFT and TPOT. With --cv source every source (paper, document,
    benchmark table) is predicted by a fit that never saw it: median and 90th-percentile |error|
    per regime and source, the in-sample figures beside them, and how often the 90 % band holds.

    \b
    Examples:
      gpuopt validate --cv source
      gpuopt validate --kind serving --rows
      gpuopt validate --cv source --format csv > errors.csv
    """
    progress = _progress() if cv == "source" else None
    result = go.validate(kind, cv, rows, data_dir, go.load_catalog(catalog_dir), progress, workers)
    if progress:
        click.echo("", err=True)
    click.echo(result.render(fmt), nl=False)


@click.command("fit")
@click.option("--check", is_flag=True, help="Only compare: exit 1 if the catalog differs from what the fit gives.")
@workers_option("the leave-one-source-out fits", "the figures are the same with any number")
@catalog_option
@handle_errors
def fit_cmd(check: bool, workers: int, catalog_dir: Path | None) -> None:
    """Refit the efficiency parameters and the bands from calibration/ and write them to
    catalogs/efficiency.yaml and catalogs/uncertainty.yaml (deterministic: same rows, same files).

    Parameters are fitted on every row; the bands come from the leave-one-source-out residuals.
    """
    progress = _progress()
    outcome = go.fit(catalog_dir, check, progress, workers)
    if progress:
        click.echo("", err=True)
    click.echo(outcome.text(), nl=False)
    if check and outcome.differ:
        sys.exit(1)
