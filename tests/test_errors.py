"""Every class of bad input exits 2 with a message naming file, entry and field; infeasible exits 1."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from tests.conftest import ROOT, TINY


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_malformed_yaml(tmp_path):
    r = run("solve", write(tmp_path, "schema_version: 1\nname: [unclosed\n"))
    assert r.exit_code == 2
    assert "malformed YAML at line" in r.output and "p.yaml" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize(("text", "words"), [
    ("name: 2024-02-30", "unreadable YAML value at line 2, column 7: day is out of range for month"),
    ("name: 1" + "0" * 5000, "unreadable YAML value at line 2, column 7: Exceeds the limit (4300 digits)"),
    ("name: " + "[" * 5000 + "]" * 5000, "nested too deeply to read"),
])
def test_yaml_values_that_cannot_be_read(tmp_path, text, words):
    """Well-formed YAML whose value its type cannot hold, or nested past Python's recursion limit."""
    r = run("solve", write(tmp_path, TINY.replace("name: tiny", text)))
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    assert "set_int_max_str_digits" not in r.output


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(TINY.replace("name: tiny", "name: caf\xe9").encode("latin-1"))
    r = run("solve", str(path))
    assert r.exit_code == 2 and "not UTF-8 text: byte 0xe9 at line 2. To fix: save the file as UTF-8" in r.output


def test_missing_file():
    r = run("solve", "no/such/problem.yaml")
    assert r.exit_code == 2 and "no such file" in r.output


def test_unknown_key_suggests_the_right_one(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("objective:", "objectve:")))
    assert r.exit_code == 2
    assert "field 'objectve': unknown key. Did you mean 'objective'?" in r.output


def test_unknown_nested_key_suggests(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("power_cap_kw", "power_cap_kW")))
    assert r.exit_code == 2 and "Did you mean 'power_cap_kw'?" in r.output


def test_unknown_gpu_id_suggests(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("a100-sxm-80gb", "a100-sxm-80")))
    assert r.exit_code == 2
    assert "hardware.allow_gpus" in r.output and "Did you mean 'a100-sxm-80gb'?" in r.output


def test_unknown_model_suggests(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("model: llama2-7b", "model: llama2-7")))
    assert r.exit_code == 2 and "unknown model 'llama2-7'" in r.output and "Did you mean 'llama2-7b'" in r.output


@pytest.mark.parametrize(("old", "new", "field"), [
    ("tokens: 20B", "tokens: -5", "workload.tokens"),
    ("tokens: 20B", "tokens: lots", "workload.tokens"),
    ("power_cap_kw: 200", "power_cap_kw: 0", "site.power_cap_kw"),
    ("deadline_days: 30", "deadline_days: -1", "deadline_days"),
    ("max_gpus: 64", "max_gpus: 0", "hardware.max_gpus"),
])
def test_impossible_values_name_the_field(tmp_path, old, new, field):
    r = run("solve", write(tmp_path, TINY.replace(old, new)))
    assert r.exit_code == 2, r.output
    assert f"field '{field}'" in r.output


def test_min_cost_needs_a_deadline(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("deadline_days: 30\n", "")))
    assert r.exit_code == 2 and "needs 'deadline_days'" in r.output


def test_wrong_schema_version(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("schema_version: 1", "schema_version: 7")))
    assert r.exit_code == 2 and "schema_version" in r.output


def test_bad_bom_extension(tiny_problem, tmp_path):
    r = run("solve", str(tiny_problem), "--bom", str(tmp_path / "bom.pdf"))
    assert r.exit_code == 2 and ".csv, .xlsx, .json or .md" in r.output


def _broken_catalog(tmp_path: Path, old: str, new: str, file: str = "gpus.yaml") -> str:
    root = tmp_path / "cat"
    shutil.copytree(ROOT / "catalogs", root)
    text = (root / file).read_text()
    assert old in text
    (root / file).write_text(text.replace(old, new, 1))
    return str(root)


def test_catalog_negative_value_names_entry_and_field(tmp_path):
    root = _broken_catalog(tmp_path, "memory_gb: 80", "memory_gb: -80")
    r = run("catalog", "validate", "--catalog", root)
    assert r.exit_code == 2
    assert "gpus.yaml" in r.output and "(id 'h100-sxm')" in r.output and "field 'memory_gb'" in r.output


def test_catalog_unknown_key_suggests(tmp_path):
    root = _broken_catalog(tmp_path, "mem_bw_gbs: 3350", "mem_bw_gb: 3350")
    r = run("catalog", "validate", "--catalog", root)
    assert r.exit_code == 2 and "Did you mean 'mem_bw_gbs'?" in r.output


@pytest.mark.parametrize("old, new, words", [
    ("      hopper/bf16:", "      hoper/bf16:", ["training.gemm.hardware: 'hoper/bf16'", "Did you mean 'hopper'?"]),
    ("      hopper/bf16:", "      hopper/bf61:", ["unknown training precision 'bf61'", "Did you mean 'bf16'?"]),
    ("      llamacpp: ", "      llamacp: ", ["support.serving.stacks: 'llamacp'", "Did you mean 'llamacpp'?"]),
    # FP16 values are stored under bf16 (one tensor-core rate): an fp16 key would never be read
    ("      hopper/bf16:\n        value: 0.", "      hopper/fp16:\n        value: 0.",
     ["'hopper/fp16': fp16 values are stored under bf16"]),
    ("      trtllm@hopper/fp8:", "      trtllm@hopper/fp9:", ["serving.gemm.stacks: 'trtllm@hopper/fp9'",
                                                              "precision 'fp9'", "Did you mean 'fp8'?"]),
    ("      trtllm@hopper/bf16:", "      trtllm@hopper/fp16:", ["'trtllm@hopper/fp16': fp16 values are stored"]),
    ("    - stack@family\n    - stack@precision", "    - stack@precision",
     ["'stack@precision' refines 'stack@family'"]),
    # a value keyed finer than the parameter's 'by' reads would silently never be used
    ("    - stack@family\n    - stack@precision", "    - stack@family",
     ["/bf16' is never read", "does not list 'stack@precision'", "To fix: remove the value"]),
])
def test_efficiency_values_keyed_by_unknown_families_precisions_or_stacks_are_named(tmp_path, old, new, words):
    """A value under a misspelt GPU family, precision or engine would silently never be used."""
    r = run("catalog", "validate", "--catalog", _broken_catalog(tmp_path, old, new, "efficiency.yaml"))
    assert r.exit_code == 2 and "efficiency.yaml" in r.output and "Traceback" not in r.output, r.output
    for w in words:
        assert w in r.output, (w, r.output)


def test_catalog_dangling_reference(tmp_path):
    root = _broken_catalog(tmp_path, "accepts: [h100-sxm,", "accepts: [h100-sxn,", "servers.yaml")
    r = run("catalog", "validate", "--catalog", root)
    assert r.exit_code == 2 and "unknown id 'h100-sxn'" in r.output and "Did you mean 'h100-sxm'" in r.output


def test_catalog_duplicate_id(tmp_path):
    root = _broken_catalog(tmp_path, "id: h100-pcie", "id: h100-sxm")
    r = run("catalog", "validate", "--catalog", root)
    assert r.exit_code == 2 and "appears twice" in r.output


def test_estimate_unknown_gpu_and_bad_split():
    r = run("estimate", "train", "--model", "llama2-7b", "--gpu", "h100-sx", "--gpus", "8")
    assert r.exit_code == 2 and "Did you mean 'h100-sxm'" in r.output
    r = run("estimate", "train", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "12", "--tp", "8")
    assert r.exit_code == 2 and "not a multiple of TP 8" in r.output
    r = run("estimate", "train", "--model", "llama2-7b", "--gpu", "v100-sxm2", "--gpus", "8")
    assert r.exit_code == 2 and "no bf16" in r.output


@pytest.mark.parametrize("tokens", ["lots", "1e999"])
def test_estimate_bad_tokens(tokens):
    r = run("estimate", "train", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "8", "--tokens", tokens)
    assert r.exit_code == 2 and f"--tokens '{tokens}': expected a" in r.output, r.output


def test_infeasible_deadline_exits_1_with_what_would_help(tmp_path):
    # 32 sequences a step allow at most 32 replicas, 64 GPUs at PP 2: both caps bind whichever plan is fastest
    tiny = TINY.replace("deadline_days: 30", "deadline_days: 0.5").replace("max_seqs: 256", "max_seqs: 32")
    r = run("solve", write(tmp_path, tiny))
    assert r.exit_code == 1, r.output
    assert "infeasible" in r.output and "deadline 0.5 days (deadline_days): the fastest cluster" in r.output
    assert "global batch cap 0.1M tokens (32 sequences" in r.output and "GPU count 64 (hardware.max_gpus)" in r.output
    # the tokens a step needs are printed to a tenth of a million, as the cap is (not "0M")
    assert re.search(r"0\.5 days needs about \d+\.\dM tokens per step", r.output) and "about 0M" not in r.output
    assert "power cap" not in r.output  # 200 kW is not what binds


def test_infeasible_budget_says_how_much_more(tmp_path):
    text = TINY.replace("deadline_days: 30", "deadline_days: 5\nbudget: {usd: 100k}")
    r = run("solve", write(tmp_path, text))
    assert r.exit_code == 1, r.output
    # named once: the budget's wall, with the least capex and rent that meets every other target
    budget = [line for line in r.output.splitlines() if "budget" in line]
    assert len(budget) == 1 and "of capex and rent (+$" in budget[0] and "meets every other target" in budget[0]


def test_nothing_fits_explains_per_gpu(tmp_path):
    text = TINY.replace("model: llama2-7b", "model: llama3-405b").replace("allow_gpus: [a100-sxm-80gb, l40s]",
                                                                          "allow_gpus: [l4]")
    r = run("solve", write(tmp_path, text))
    assert r.exit_code == 1, r.output
    assert "l4: memory: needs" in r.output


def test_budget_hint_applied_makes_the_problem_feasible(tmp_path):
    import re

    text = TINY.replace("deadline_days: 30", "deadline_days: 5\nbudget: {usd: 100k}")
    r = run("solve", write(tmp_path, text))
    assert r.exit_code == 1, r.output
    needed = re.search(r"\$([0-9,]+) of capex and rent \(\+\$[0-9,]+\) meets every other target", r.output)
    assert needed, r.output
    usd = int(needed.group(1).replace(",", ""))  # the smallest budget: exactly it must be feasible
    fixed = run("solve", write(tmp_path, text.replace("usd: 100k", f"usd: {usd}"), "fixed.yaml"))
    assert fixed.exit_code == 0, fixed.output


def test_quantities_are_validated_by_the_schema(tmp_path):
    r = run("solve", write(tmp_path, TINY.replace("deadline_days: 30", "deadline_days: 30\nbudget: {usd: lots}")))
    assert r.exit_code == 2 and "field 'budget.usd'" in r.output and "got 'lots'" in r.output
    assert "Traceback" not in r.output and "Value error" not in r.output


GRID = "search: {pp: [1, 2], micro_batch: [1, 2], zero: [1]}"


@pytest.mark.parametrize(("grid", "field", "words"), [
    ("{tp: [0]}", "search.tp[0]", "a tensor-parallel degree as a whole number from 1 to 1024, got 0"),
    ("{pp: [0]}", "search.pp[0]", "a pipeline-parallel degree"),
    ("{micro_batch: [2, 0]}", "search.micro_batch[1]", "a micro-batch size in sequences"),
    ("{micro_batches_per_stage: [0]}", "search.micro_batches_per_stage[0]", "micro-batches per pipeline stage"),
    ("{virtual_stages: [0]}", "search.virtual_stages[0]", "model chunks per GPU"),
    ("{cp: [0]}", "search.cp[0]", "a context-parallel degree"),
    ("{ep: [-2]}", "search.ep[0]", "an expert-parallel degree as a whole number from 1 to 1024, got -2"),
    ("{tp: [2.5]}", "search.tp[0]", "got 2.5"),
    ("{tp: [two]}", "search.tp[0]", "got 'two'"),
    ("{tp: [true]}", "search.tp[0]", "got True"),
    ("{tp: [1, 100000]}", "search.tp[1]", "from 1 to 1024"),
    ("{zero: [4]}", "search.zero[0]", "a ZeRO stage as a whole number from 0 to 3"),
    ("{recompute: [some]}", "search.recompute[0]", "'none', 'selective' or 'full'"),
    ("{pp: []}", "search.pp", "expected at least one value, got an empty list"),
    ("{tp: 8}", "search.tp", "expected a list such as [1, 2, 4, 8], got 8"),
    ("{tp: null}", "search.tp", "expected a list"),
])
def test_search_grid_values_are_checked(tmp_path, grid, field, words):
    """A zero, negative, fractional or non-numeric grid value once ended in ZeroDivisionError."""
    r = run("solve", write(tmp_path, TINY.replace(GRID, f"search: {grid}")))
    assert r.exit_code == 2, r.output
    assert f"p.yaml: field '{field}': " in r.output and words in r.output, r.output
    assert "Traceback" not in r.output and "Value error" not in r.output


@pytest.mark.parametrize(("model", "tp", "words"), [
    ("llama2-13b", "[1, 2, 3]", "field 'search.tp[2]': TP 3 does not divide the 40 attention heads of llama2-13b"),
    ("{layers: 4, hidden: 768, heads: 48, kv_heads: 8, ffn_hidden: 2048, vocab: 1000, seq_len: 512, mlp: swiglu}",
     "[12]", "field 'search.tp[0]': TP 12 neither divides the 8 KV heads of custom nor is a multiple of them"),
])
def test_search_tp_must_fit_the_model(tmp_path, model, tp, words):
    text = TINY.replace("model: llama2-7b", f"model: {model}").replace(GRID, f"search: {{tp: {tp}}}")
    r = run("solve", write(tmp_path, text))
    assert r.exit_code == 2, r.output
    assert words in r.output and "To fix: drop it, or use TP values that fit (1, 2, 4" in r.output, r.output


def test_search_tp_of_several_workloads_is_checked_against_their_models(tmp_path):
    """The grid shared by several workloads: a TP value none of their models can use is named."""
    path = ROOT / "problems" / "pretrain_finetune_serve.yaml"
    text = path.read_text().replace("  tp: [1, 2, 4, 8]", "  tp: [1, 3]")
    r = run("solve", write(tmp_path, text))
    assert r.exit_code == 2 and "field 'search.tp[1]': TP 3 does not divide the 32 attention heads" in r.output


@pytest.mark.parametrize(("old", "new", "field"), [
    ("tokens: 20B", "tokens: .inf", "workload.tokens"),
    ("tokens: 20B", "tokens: 1" + "0" * 400, "workload.tokens"),
    ("global_batch: {max_seqs: 256}", "global_batch: {max_tokens: .nan}", "workload.global_batch.max_tokens"),
    ("deadline_days: 30", "deadline_days: .inf", "deadline_days"),
    ("power_cap_kw: 200", "power_cap_kw: .nan", "site.power_cap_kw"),
])
def test_infinite_and_huge_numbers_are_rejected(tmp_path, old, new, field):
    """NaN and infinity pass a 'positive' check; a 400-digit number overflows a float."""
    r = run("solve", write(tmp_path, TINY.replace(old, new)))
    assert r.exit_code == 2, r.output
    assert f"field '{field}'" in r.output and "Traceback" not in r.output
    assert len(r.output) < 400, r.output  # the 400-digit number is not printed whole


def test_inline_model_errors_name_the_shape_not_the_union(tmp_path):
    shape = "{layers: 2, hidden: 100, heads: 3, ffn_hidden: 10, vocab: 10, seq_len: 8, mlp: gelu}"
    r = run("solve", write(tmp_path, TINY.replace("model: llama2-7b", f"model: {shape}")))
    assert r.exit_code == 2
    assert "field 'workload.model': hidden 100 is not divisible by heads 3" in r.output
    assert "str" not in r.output.split("workload.model")[1].split(":")[0] and "function-after" not in r.output


SHIPPED = Path(__file__).parents[1] / "calibration"
MINE = ("schema_version: 1\nsources:\n  - {id: mine, title: my runs, where: lab notebook, date: '2026-11',"
        " kind: serving, prefixes: [x], stack: vllm}\n")


def _own_runs(folder: Path, rows: list[str], *, sources: str = MINE, aliases: str | None = None,
              header: str | None = None) -> None:
    """A folder of one's own serving runs, as `validate --data DIR` reads it."""
    (folder / "aliases.yaml").write_text(aliases if aliases is not None else (SHIPPED / "aliases.yaml").read_text())
    (folder / "sources.yaml").write_text(sources)
    header = header or (SHIPPED / "serving_runs.csv").read_text().splitlines()[0]
    (folder / "serving_runs.csv").write_text("\n".join([header, *rows]) + "\n")


def _row(i: int = 1, gpus: str = "1", throughput: str = "100", tail: str = ",src,n") -> str:
    return f"x{i},Llama-3.1-8B,8,FP8,L40S,{gpus},1,1,e,128,128,max load,{throughput},,,{tail}"


def test_validate_explains_rows_it_cannot_read(tmp_path):
    """A folder of one's own runs: a row with an unreadable cell is listed with the column and the value."""
    _own_runs(tmp_path, [_row(gpus="one")])
    r = run("validate", "--data", str(tmp_path), "--kind", "serving", "--rows")
    assert r.exit_code == 0, r.output
    assert "x1 [mine]: column 'gpu_count' is not a positive whole number ('one')" in r.output
    assert "nothing to compare" in r.output and "nan" not in r.output
    (tmp_path / "aliases.yaml").unlink()
    r = run("validate", "--data", str(tmp_path), "--kind", "serving")
    assert r.exit_code == 2 and "aliases.yaml" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("part, old, new, words", [
    ("sources", "stack: vllm", "stack: vlm", ["unknown serving engine 'vlm'", "vllm"]),
    ("sources", "stack: vllm}", "stack: vllm, assume: {input_length: 128}}",
     ["sources.yaml", "source 'mine': assume: unknown fact 'input_length'", "Did you mean 'input_len'?"]),
    ("sources", "stack: vllm}", "stack: vllm, assume: {token_budget: 91k}}",
     ["sources.yaml", "source 'mine': assume: token_budget '91k' is not a whole number of tokens", "8192"]),
    ("sources", "stack: vllm}", "stack: vllm, assume: {requests: lots}}",
     ["sources.yaml", "source 'mine': assume: requests 'lots' is not a whole number of requests"]),
    ("sources", "stack: vllm}", "stack: vllm, rows: {'x*': {batching: dynamic}}}",
     ["sources.yaml", "source 'mine': rows.'x*': batching 'dynamic' is not 'continuous' or 'static'"]),
    ("sources", "stack: vllm}", "stack: vllm, assume: {load: busy}}",
     ["sources.yaml", "load 'busy' is not 'max', or 'batch', 'burst' or 'rate' and a whole number"]),
    ("aliases", "engines:\n", "engines:\n  \"^SGLang(\": sglang\n", ["aliases.yaml", "not a regular expression"]),
    ("header", ",notes", "", ["serving_runs.csv", "missing column(s) notes"]),
    ("row", ",src,n", ",src", ["serving_runs.csv", "line 2 (x1)", "18 cells"]),
])
def test_calibration_data_that_cannot_be_read_is_named(tmp_path, part, old, new, words):
    """An unknown engine, a broken pattern, a missing column or a short row: a message, exit 2."""
    files = {"sources": MINE, "aliases": (SHIPPED / "aliases.yaml").read_text(),
             "header": (SHIPPED / "serving_runs.csv").read_text().splitlines()[0], "row": _row()}
    assert old in files[part]
    files[part] = files[part].replace(old, new, 1)
    _own_runs(tmp_path, [files["row"]], sources=files["sources"], aliases=files["aliases"], header=files["header"])
    r = run("validate", "--data", str(tmp_path), "--kind", "serving")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    for w in words:
        assert w in r.output, (w, r.output)


def test_a_measurement_that_is_not_a_positive_number_is_not_compared(tmp_path):
    _own_runs(tmp_path, [_row(i, throughput=v) for i, v in enumerate(("-100", "nan"))])
    r = run("validate", "--data", str(tmp_path), "--kind", "serving", "--rows")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert r.output.count("no measured throughput or latency in the row") == 2
