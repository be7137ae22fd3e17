"""CLI: the model against published runs (validate) and the fit that writes the catalog's
efficiency parameters and bands (fit). Thin over ``optimizer.calibration``."""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

import click

from optimizer.cli_common import catalog_option, handle_errors


def _kinds(kind: str) -> tuple[str, ...]:
    return ("training", "serving") if kind == "both" else (kind,)


def _progress(kind: str):
    if not sys.stderr.isatty():
        return None

    def show(k: int, source: str) -> None:
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
@catalog_option
@handle_errors
def validate_cmd(cv: str, kind: str, rows: bool, fmt: str, data_dir: Path | None, catalog_dir: Path | None) -> None:
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
    from optimizer.calibration import crossval, render
    from optimizer.catalog import load_catalog

    catalog = load_catalog(catalog_dir)
    results = []
    for k in _kinds(kind):
        ds = crossval.load_dataset(k, catalog, data_dir)
        results.append(crossval.cross_validate(ds, catalog, _progress(k)) if cv == "source"
                       else crossval.with_catalog(ds, catalog))
        if cv == "source" and sys.stderr.isatty():
            click.echo("", err=True)
    if fmt == "json":
        click.echo(render.to_json(results), nl=False)
    elif fmt == "csv":
        click.echo(render.csv(results), nl=False)
    else:
        click.echo(render.text(results, rows), nl=False)


@click.command("fit")
@click.option("--check", is_flag=True, help="Only compare: exit 1 if the catalog differs from what the fit gives.")
@catalog_option
@handle_errors
def fit_cmd(check: bool, catalog_dir: Path | None) -> None:
    """Refit the efficiency parameters and the bands from calibration/ and write them to
    catalogs/efficiency.yaml and catalogs/uncertainty.yaml (deterministic: same rows, same files).

    Parameters are fitted on every row; the bands come from the leave-one-source-out residuals.
    """
    from optimizer.calibration import crossval, write
    from optimizer.catalog import default_root, load_catalog

    catalog = load_catalog(catalog_dir)
    root = Path(catalog_dir) if catalog_dir else default_root()
    fits, validations = {}, {}
    for kind in ("training", "serving"):
        ds = crossval.load_dataset(kind, catalog)
        v = crossval.cross_validate(ds, catalog, _progress(kind))
        fits[kind] = (v.fit, ds, v.sensitivity)
        validations[kind] = v
    rows = {k: len(f[1].cases) for k, f in fits.items()}
    sources = {k: len({c.source for c in f[1].cases}) for k, f in fits.items()}
    fitted = (f"`gpuopt fit` on {date.today().isoformat()}: training {rows['training']} rows from "
              f"{sources['training']} sources, serving {rows['serving']} rows from {sources['serving']} sources")
    from optimizer.calibration.data import default_data_dir, load_sources

    files = {root / "efficiency.yaml": write.efficiency_yaml(catalog.efficiency.table, fits, fitted),
             root / "uncertainty.yaml": write.uncertainty_yaml(validations),
             default_data_dir() / "SOURCES.md": write.sources_markdown(load_sources(),
                                                                      {k: f[1] for k, f in fits.items()})}
    differ = []
    for path, text in files.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if _strip_date(old) != _strip_date(text):
            differ.append(path.name)
            if not check:
                path.write_text(text, encoding="utf-8")
    verb = "differ from the fit" if check else "written"
    click.echo(f"{', '.join(differ) or 'nothing'} {verb if differ else 'changed'}; {fitted}")
    if check and differ:
        sys.exit(1)


def _strip_date(text: str) -> str:
    """The files without the fit's date, so that refitting unchanged rows changes nothing."""
    import re

    return re.sub(r"`gpuopt fit` on \d{4}-\d{2}-\d{2}", "`gpuopt fit`", text)
