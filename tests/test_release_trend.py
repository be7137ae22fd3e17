"""Earlier engine releases: where one has no host overheads of its own, it takes its successor's
times the ratio the fitted release pairs show (``release_overhead``), in the catalog lookup and in
the fit alike."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

from optimizer.calibration import crossval
from optimizer.calibration import fit as fitting
from optimizer.catalog import load_catalog
from optimizer.catalog.efficiency_table import ReleaseRatio
from optimizer.errors import CatalogError
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def eff():
    return load_catalog().efficiency


def _without(eff, param: str, *engines: str, ratio: float | None = 2.0):
    """``eff`` with ``engines``' own values of ``param`` removed and ``release_overhead`` at ``ratio``."""
    p = eff.table.serving[param]
    stacks = {k: v for k, v in p.stacks.items() if k not in engines}
    release = None if ratio is None else ReleaseRatio(value=ratio, pairs=1)
    table = eff.table.model_copy(update={"serving": {**eff.table.serving, param: p.model_copy(
        update={"stacks": stacks})}, "release_overhead": release})
    return replace(eff, table=table)


def test_the_shipped_catalog_marks_the_releases_and_the_overheads_that_follow_them(eff):
    earlier = sorted(e.id for e in eff.engines.values() if e.earlier_release)
    assert earlier == ["tgi-1.0", "trtllm-0.6", "vllm-0.5", "vllm-0.7", "vllm-rocm-0.6", "vllm-rocm-0.6.1"]
    trend = sorted(name for name, p in eff.table.serving.items() if p.release_trend)
    assert trend == ["layer_overhead", "seq_overhead", "server_overhead", "server_seq_overhead", "step_overhead"]
    ratio = eff.table.release_overhead
    assert ratio is not None and ratio.pairs >= 10 and 1.0 < ratio.value < 4.0, ratio
    assert eff.release_hops("serving", "vllm-rocm-0.6.1", "vllm-rocm") == 2
    assert eff.release_hops("serving", "vllm-rocm-0.6.1", "vllm-rocm-0.6.1") == 0
    assert eff.release_hops("serving", "tgi", "vllm-0.5") == 0  # the engine TGI is like, read as it is
    assert eff.release_hops("serving", "tgi", "vllm") == 2  # through vLLM 0.5 and 0.7, both earlier releases
    assert eff.release_hops("serving", "vllm-rocm-0.6.1", "vllm-rocm@cdna3") == 2  # a value on a GPU family
    assert eff.release_hops("serving", "vllm-rocm-0.6.1", "") == 2  # the default stands for the chain's root
    assert eff.release_hops("training", "megatron-lm", "megatron-core") == 0
    with pytest.raises(ValueError, match="does not read values of sglang"):
        eff.release_hops("serving", "vllm-0.5", "sglang")


def test_a_release_without_its_own_overhead_takes_its_successors_times_the_ratio(eff):
    step = eff.table.serving["step_overhead"].stacks
    one = _without(eff, "step_overhead", "vllm-rocm-0.6.1")
    got = one.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.step_overhead
    assert got == pytest.approx(2.0 * step["vllm-rocm-0.6"].value)
    two = _without(eff, "step_overhead", "vllm-rocm-0.6.1", "vllm-rocm-0.6", ratio=1.5)
    got = two.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.step_overhead
    assert got == pytest.approx(1.5**2 * step["vllm-rocm"].value)
    # the successor itself, an engine with values of its own and a parameter without the trend are as stored
    assert one.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6").params.step_overhead == pytest.approx(
        step["vllm-rocm-0.6"].value)
    assert one.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.kv_bw == pytest.approx(
        eff.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.kv_bw)
    # no engine in the chain has a value: the default times every earlier release in the chain
    bare = _without(eff, "step_overhead", "vllm-rocm-0.6.1", "vllm-rocm-0.6", "vllm-rocm", "vllm", ratio=1.5)
    got = bare.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.step_overhead
    assert got == pytest.approx(1.5**2 * eff.table.serving["step_overhead"].default.value)
    # the product stays in the parameter's range
    top = _without(eff, "step_overhead", "vllm-rocm-0.6.1", ratio=16.0)
    hi = eff.table.serving["step_overhead"].range[1]
    assert top.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.step_overhead == pytest.approx(
        min(hi, 16 * step["vllm-rocm-0.6"].value))
    # a catalog fitted before the ratio existed: the successor's value as it is
    none = _without(eff, "step_overhead", "vllm-rocm-0.6.1", ratio=None)
    assert none.resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.step_overhead == pytest.approx(
        step["vllm-rocm-0.6"].value)


def test_the_fit_reads_a_missing_release_value_as_its_successors_times_the_median_pair_ratio(eff):
    """Rows of vllm-rocm-0.6.1 with too few rows for values of their own read vllm-rocm-0.6's
    times the median ratio of the pairs that have both (here vllm-0.7 against vllm)."""
    contexts = ([("hopper", "bf16", "vllm")] * 3 + [("hopper", "bf16", "vllm-0.7")] * 3
                + [("cdna3", "bf16", "vllm-rocm-0.6")] * 3 + [("cdna3", "bf16", "vllm-rocm-0.6.1")] * 2)
    n = len(contexts)
    layout = fitting.Layout("serving", eff, contexts, {k: np.ones(n, dtype=bool) for k in eff.table.serving},
                            list(range(n)))
    assert sorted(layout.release_names)[:2] == ["vllm-0.7/vllm layer_overhead", "vllm-0.7/vllm seq_overhead"]
    x = layout.start()
    slot = {(s.param, s.key): i for i, s in enumerate(layout.slots)}
    ratios = []
    for k, name in enumerate(sorted({s.param for s in layout.slots if eff.table.serving[s.param].release_trend})):
        for earlier, successor in (("vllm-0.7", "vllm"), ("vllm-rocm-0.6", "vllm-rocm")):
            x[slot[name, f"stack:{successor}"]] = 1e-4
            x[slot[name, f"stack:{earlier}"]] = 1e-4 * (1.5 + k)  # ratios 1.5, 2.5, ... → their median
            ratios.append(1.5 + k)
    assert layout.release_ratio(x) == pytest.approx(float(np.median(ratios)))
    step = layout.values(x)["step_overhead"]
    own = x[slot["step_overhead", "stack:vllm-rocm-0.6"]]
    assert step[8] == pytest.approx(own) and step[9] == pytest.approx(own * layout.release_ratio(x))
    assert layout.release_hops["step_overhead"].tolist() == [0] * 9 + [1] * 2
    # an earlier release's own value shrinks toward its successor's times the ratio, not toward it as it is
    earlier, successor = slot["step_overhead", "stack:vllm-0.7"], slot["step_overhead", "stack:vllm"]
    assert layout.shrink_hops[earlier] == 1 and successor not in layout.shrink_hops
    penalty = layout.penalties(x)[earlier]
    expected = (x[earlier] - x[successor] * layout.release_ratio(x)) / layout.slots[earlier].width
    assert penalty == pytest.approx(expected * np.sqrt(fitting.SHRINK))
    # every residual that reads across releases, and every such penalty, depends on the pair values
    observations = [fitting.Observation(i, "output_tokens_per_s", 1.0, 1.0) for i in range(n)]
    jac = crossval._sparsity(layout, observations, None).toarray()
    pair_slots = sorted({i for pair in layout.release_pairs for i in pair})
    assert jac[9, pair_slots].all() and jac[10, pair_slots].all()
    assert jac[n + earlier, pair_slots].all()
    assert not jac[0, [i for i in pair_slots if i not in (slot[k, "stack:vllm"] for k in eff.table.serving
                                                          if (k, "stack:vllm") in slot)]].any()


@pytest.mark.parametrize(("name", "old", "new", "message"), [
    ("stacks.yaml", "  - id: sglang\n", "  - id: sglang\n    earlier_release: true\n", "earlier_release needs 'like'"),
    ("efficiency.yaml", "    multiply: true\n", "    multiply: true\n    release_trend: true\n",
     "release_trend needs a value per stack"),
    ("efficiency.yaml", "    by:\n    - stack\n", "    by:\n    - stack\n    release_trend: true\n",
     "release_trend is for serving engines"),
])
def test_a_release_marked_without_what_it_needs_is_a_catalog_error(tmp_path, name, old, new, message):
    root = tmp_path / "catalogs"
    shutil.copytree(ROOT / "catalogs", root)
    text = (root / name).read_text()
    assert old in text
    (root / name).write_text(text.replace(old, new, 1))
    with pytest.raises(CatalogError, match=message):
        load_catalog(root)


def test_fit_writes_the_ratio_with_its_pairs_and_none_without_pairs(eff):
    from optimizer.calibration.write import _head

    class Fit:  # what ``_head`` reads of a serving fit
        def __init__(self, names: list[str], ratio: float) -> None:
            self.layout = type("L", (), {"release_names": names, "release_ratio": lambda _, x: ratio})()
            self.x = np.zeros(1)

    head = _head(eff.table, {"serving": (Fit(["b/a step_overhead", "a/c seq_overhead"], 1.98304), None, None)}, "")
    assert head["release_overhead"]["value"] == 1.983 and head["release_overhead"]["pairs"] == 2
    assert head["release_overhead"]["source"].endswith("a/c seq_overhead; b/a step_overhead")
    assert "release_overhead" not in _head(eff.table, {"serving": (Fit([], 1.0), None, None)}, "")
    kept = _head(eff.table, {}, "")  # a training-only refit keeps the serving ratio as it is
    assert kept["release_overhead"] == eff.table.release_overhead.model_dump()
