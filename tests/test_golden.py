"""Golden numbers from DESIGN.md and the published model cards, with tolerances that can fail."""

from __future__ import annotations

import math

import pytest

from optimizer.perf import (
    ModelSpec,
    TrainPlan,
    activation_bytes_per_layer,
    gpu_hours,
    model_flops_per_token,
    param_count,
    tp_bound,
    training_flops,
    training_memory,
)
from optimizer.perf.memory import ADAM_BYTES, GRAD_BYTES, WEIGHT_BYTES, mlp_activation_width

PUBLISHED_B = {"llama2-7b": 6.74, "llama2-70b": 68.98, "llama3-8b": 8.03, "llama3-70b": 70.55,
               "llama3-405b": 405.85, "gpt3-175b": 174.6, "llama2-13b": 13.02}


@pytest.mark.parametrize("preset", sorted(PUBLISHED_B))
def test_preset_parameter_counts(catalog, preset):
    count = param_count(catalog.models[preset].spec()) / 1e9
    assert count == pytest.approx(PUBLISHED_B[preset], abs=0.005 + 0.0005 * PUBLISHED_B[preset])


def test_every_preset_has_a_published_count_within_half_a_percent(catalog):
    for m in catalog.models.values():
        assert m.published_params_b, m.id
        assert param_count(m.spec()) / 1e9 == pytest.approx(m.published_params_b, rel=0.005,
                                                            abs=m.published_rounding_b / 2), m.id


def test_llama2_70b_memory_example():
    """140 + 140 + 840 + 730 = 1,850 GB (seed 003, Korthikanti's selective-recompute formula)."""
    n = 70e9
    assert WEIGHT_BYTES * n / 1e9 == pytest.approx(140)
    assert GRAD_BYTES * n / 1e9 == pytest.approx(140)
    assert ADAM_BYTES * n / 1e9 == pytest.approx(840)
    # the seed's arithmetic is GPT's 34·s·b·h per layer: a GPT-shaped layer of the same width
    gpt_shape = ModelSpec("gpt-like", 80, 8192, 64, 64, 4 * 8192, 32000, 4096, "gelu")
    acts = 80 * activation_bytes_per_layer(gpt_shape, 4096, 8, 1, "selective", False) / 1e9
    assert acts == pytest.approx(4096 * 8 * 8192 * 80 * 34 / 1e9)
    assert acts == pytest.approx(730, abs=1)
    total = 140 + 140 + 840 + acts
    assert total == pytest.approx(1850, abs=1)
    assert math.ceil(total / 80) == 24
    assert math.ceil(total / 24) == 78


def test_llama2_70b_memory_with_its_own_shape(catalog):
    """The model's own figure: GQA shrinks K/V, SwiGLU's 3.5h MLP keeps 6·s·b·f: 35.5·s·b·h."""
    m = catalog.models["llama2-70b"].spec()
    acts = 80 * activation_bytes_per_layer(m, 4096, 8, 1, "selective", False) / 1e9
    assert acts == pytest.approx(4096 * 8 * 8192 * 80 * 35.5 / 1e9)
    mem = training_memory(m, TrainPlan(tp=1, pp=1, dp=1, micro_batch=8, recompute="selective", zero=0))
    assert mem.weights / 1e9 == pytest.approx(137.95, abs=0.01)
    assert mem.optimizer / 1e9 == pytest.approx(827.7, abs=0.1)


def test_tensor_parallel_shards_activations_korthikanti_table2():
    gpt = ModelSpec("gpt", 80, 8192, 64, 64, 4 * 8192, 32000, 4096, "gelu")
    s, b, h, t = 4096, 1, 8192, 8
    assert activation_bytes_per_layer(gpt, s, b, t, "selective", False) == pytest.approx(s * b * h * (10 + 24 / t))
    assert activation_bytes_per_layer(gpt, s, b, t, "selective", True) == pytest.approx(s * b * h * 34 / t)
    a = 64
    assert activation_bytes_per_layer(gpt, s, b, 1, "none", False) == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert activation_bytes_per_layer(gpt, s, b, 1, "full", False) == pytest.approx(2 * s * b * h)


def test_six_n_d_and_llama2_gpu_hours():
    flops = training_flops(70e9, 2e12)
    assert flops == pytest.approx(8.4e23)
    implied = flops / (1_720_320 * 3600)
    assert implied / 1e12 == pytest.approx(136, abs=0.5)
    assert implied / 312e12 == pytest.approx(0.43, abs=0.01)
    assert math.ceil(1_720_320 / (30 * 24)) == 2390
    assert gpu_hours(flops, implied) == pytest.approx(1_720_320)


def test_a100_hours_rule_of_thumb():
    """≈ 13.3 A100-hours per billion parameters per billion tokens (seed 004)."""
    assert gpu_hours(training_flops(1e9, 1e9), 312e12 * 0.40) == pytest.approx(13.3, abs=0.1)


def test_narayanan_flops_formula_for_gpt_shape():
    B, s, L, h, V = 1, 2048, 96, 12288, 51200
    gpt3 = ModelSpec("gpt3", L, h, 96, 96, 4 * h, V, s, "gelu")
    per_step = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flops_per_token(gpt3) * B * s == pytest.approx(per_step)


@pytest.mark.parametrize(("peak_tflops", "link_one_way_gbs", "expected"), [
    (330, 32, 2.4),     # RTX 4090 over PCIe 4.0, the seed's FP16-accumulate peak
    (1979, 200, 2.5),   # H800, 400 GB/s NVLink, the seed's sparse peak
    (1979, 450, 5.6),   # H100 with the sparse figure the seed used
    (989, 450, 11.2),   # H100 with the dense figure the catalog records
])
def test_tp_bounds(peak_tflops, link_one_way_gbs, expected):
    assert tp_bound(8192, peak_tflops * 1e12, link_one_way_gbs * 1e9) == pytest.approx(expected, abs=0.06)


def test_catalog_records_dense_h100(catalog):
    assert catalog.gpus["h100-sxm"].bf16_tflops == 989
    assert catalog.gpus["h800-sxm"].link_bw_gbs == 400


def test_interleaved_schedule_shrinks_the_bubble_and_costs_memory(catalog):
    """Narayanan et al. 2021: bubble (pp−1)/v slots; Korthikanti et al. 2022: activations ×(1 + (pp−1)/(pp·v))."""
    from optimizer.perf import train_step

    m = catalog.models["llama3.1-405b"].spec()
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", "ib-ndr-8")
    plans = {v: TrainPlan(tp=8, pp=16, dp=8, micro_batch=1, num_micro_batches=16, recompute="full",
                          sequence_parallel=True, zero=1, virtual_stages=v) for v in (1, 2, 4)}
    r = {v: train_step(m, hw, p, *catalog.train_setup("h100-sxm")) for v, p in plans.items()}
    bubble = {v: dict(x.breakdown)["pp_bubble"] for v, x in r.items()}
    assert bubble[2] == pytest.approx(bubble[1] / 2, rel=0.02) and bubble[4] == pytest.approx(bubble[1] / 4, rel=0.03)
    assert r[4].tokens_per_s > r[2].tokens_per_s > r[1].tokens_per_s
    acts = {v: x.memory.activations for v, x in r.items()}
    assert acts[2] == pytest.approx(acts[1] * (1 + 15 / 32), rel=1e-6)
    assert acts[4] == pytest.approx(acts[1] * (1 + 15 / 64), rel=1e-6)


def test_moe_presets_total_and_active_parameters(catalog):
    """Mixtral 8x7B: 46.7 B total, 12.9 B active; DeepSeek-V3: 671 B total, 37 B active."""
    from optimizer.perf.model import active_param_count

    for preset in ("mixtral-8x7b", "deepseek-v3"):
        p = catalog.models[preset]
        m = p.spec()
        assert param_count(m) / 1e9 == pytest.approx(p.published_params_b, rel=0.005)
        assert active_param_count(m) / 1e9 == pytest.approx(p.published_active_params_b, rel=0.02)
    dense = catalog.models["llama3-8b"].spec()
    assert active_param_count(dense) == param_count(dense)


def test_moe_flops_count_active_parameters_only(catalog):
    from optimizer.perf.model import active_param_count, embedding_params

    m = catalog.models["mixtral-8x7b"].spec()
    s = 4096
    flops = model_flops_per_token(m, s)
    attention = 12 * s * m.hidden * m.layers
    # 6 × (active matmul weights) + attention: embeddings' lookup costs nothing, the output layer 6·V·h
    matmul_active = active_param_count(m) - embedding_params(m) + m.vocab * m.hidden
    assert flops == pytest.approx(6 * matmul_active + attention, rel=0.002)
    assert flops < 6 * param_count(m) / 3  # far below what a dense 47 B model would cost


def test_moe_memory_expert_parallel_shards_only_the_experts(catalog):
    from optimizer.perf.model import expert_params

    m = catalog.models["mixtral-8x7b"].spec()
    base = TrainPlan(tp=1, pp=1, dp=8, micro_batch=1, recompute="full", zero=0, seq_len=4096)
    one = training_memory(m, base)
    eight = training_memory(m, TrainPlan(**{**base.__dict__, "ep": 8}))
    assert one.weights == pytest.approx(2 * param_count(m))
    assert eight.weights == pytest.approx(2 * (param_count(m) - expert_params(m) * 7 / 8))
    assert eight.activations == one.activations  # EP moves tokens, not activations

@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("ep", [1, 2, 8])
def test_zero_shards_expert_state_over_the_expert_data_parallel_group(catalog, ep, zero):
    """Each expert lives on dp/ep of the dp ranks (the expert-data-parallel group), so ZeRO shards its
    state over those, the dense part's over all dp: summed over the tp x dp GPUs, every state is held
    exactly once, whatever ep. (Sharding expert state over all dp put 96 Mixtral GPUs at EP=8 at a
    sixth of one copy of its Adam state.)"""
    from optimizer.perf.model import expert_params

    m = catalog.models["mixtral-8x7b"].spec()
    plan = TrainPlan(tp=2, pp=1, dp=24, ep=ep, micro_batch=1, recompute="full", zero=zero, seq_len=4096)
    mem = training_memory(m, plan)
    gpus = plan.tp * plan.dp
    assert mem.optimizer * gpus == pytest.approx(ADAM_BYTES * param_count(m))
    experts = expert_params(m)
    copies = (param_count(m) - experts) * plan.dp + experts * plan.dp / ep  # unsharded: one per dp rank
    assert mem.gradients * gpus == pytest.approx(GRAD_BYTES * (param_count(m) if zero >= 2 else copies))
    if zero >= 3:
        assert mem.weights * gpus == pytest.approx(WEIGHT_BYTES * param_count(m))



def test_moe_decode_reads_only_the_experts_a_batch_touches(catalog):
    from optimizer.perf.model import expert_params, param_count
    from optimizer.perf.serve import decode_weight_bytes
    from optimizer.perf.weights import streamed_weight_bytes

    m = catalog.models["mixtral-8x7b"].spec()
    streamed = streamed_weight_bytes(m, "fp16")  # all but the input embedding table (32,000 x 4,096)
    assert streamed == 2 * (param_count(m) - 32000 * 4096)
    dense_part = streamed - 2 * expert_params(m)
    assert decode_weight_bytes(m, "fp16", 1) == pytest.approx(dense_part + 2 * expert_params(m) * 2 / 8)
    assert decode_weight_bytes(m, "fp16", 1000) == pytest.approx(streamed, rel=1e-6)


def test_mla_kv_cache_is_compressed(catalog):
    from optimizer.perf.serve import kv_bytes_per_token

    m = catalog.models["deepseek-v3"].spec()
    assert kv_bytes_per_token(m) == 61 * (512 + 64) * 2  # 70,272 B/token in fp16


def test_expert_parallel_adds_all_to_all_and_fits_mixtral(catalog):
    from optimizer.perf import train_step

    m = catalog.models["mixtral-8x7b"].spec()
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", "ib-ndr-8")
    plan = TrainPlan(tp=1, pp=1, dp=64, micro_batch=1, num_micro_batches=8, recompute="full", zero=1, seq_len=4096)
    r1 = train_step(m, hw, plan, *catalog.train_setup(hw.device.name))
    r8 = train_step(m, hw, TrainPlan(**{**plan.__dict__, "ep": 8}), *catalog.train_setup(hw.device.name))
    assert not r1.fits and r8.fits
    assert dict(r8.breakdown)["ep_comm"] > 0 == dict(r1.breakdown)["ep_comm"]
    with pytest.raises(ValueError, match="expert parallelism"):
        train_step(catalog.models["llama3-8b"].spec(), hw, TrainPlan(dp=8, ep=8), catalog.efficiency)


def test_context_parallel_splits_the_sequence(catalog):
    """CP divides a sequence's activations and compute over cp GPUs; the K/V ring costs time only
    where attention is too short to hide it; gradients reduce over DP × CP."""
    from optimizer.perf import train_step

    m = catalog.models["llama3.1-8b"].spec()
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    base = TrainPlan(tp=1, pp=1, dp=1, micro_batch=1, recompute="full", zero=1, seq_len=131072)
    one = train_step(m, hw, base, *catalog.train_setup(hw.device.name))
    eight = train_step(m, hw, TrainPlan(**{**base.__dict__, "cp": 8}), *catalog.train_setup(hw.device.name))
    assert eight.memory.activations == pytest.approx(one.memory.activations / 8, rel=0.01)
    assert eight.memory.optimizer == pytest.approx(one.memory.optimizer / 8)  # ZeRO-1 over DP × CP
    assert not one.fits and eight.fits
    assert eight.tokens_per_step == one.tokens_per_step  # CP splits a sequence, it adds no data
    assert eight.tokens_per_s == pytest.approx(8 * one.tokens_per_s, rel=0.1)
    assert dict(eight.breakdown)["cp_comm"] == 0  # 128k tokens of attention hide the ring
    short = TrainPlan(**{**base.__dict__, "cp": 8, "seq_len": 2048})
    assert dict(train_step(m, hw, short, *catalog.train_setup(hw.device.name)).breakdown)["cp_comm"] > 0
    with pytest.raises(ValueError, match="context parallelism"):
        train_step(m, hw, TrainPlan(**{**base.__dict__, "cp": 3}), *catalog.train_setup(hw.device.name))


def test_head_size_apart_from_hidden_and_squared_relu_mlp():
    """Qwen3-32B's attention is 64 heads × 128 over a hidden of 5,120 (Q and O are 5,120 × 8,192);
    a squared-ReLU MLP (Nemotron-4) has two matrices and no biases."""
    qwen = ModelSpec("qwen3-32b-like", 64, 5120, 64, 8, 25600, 151936, 4096, "swiglu", attn_head_dim=128)
    assert qwen.q_hidden == 8192 and qwen.head_dim == 128
    per_layer = 2 * 5120 * 8192 + 2 * 5120 * 1024 + 3 * 5120 * 25600 + 2 * 5120
    assert param_count(qwen) == 64 * per_layer + 2 * 151936 * 5120 + 5120
    tied = ModelSpec("tied", 64, 5120, 64, 8, 25600, 151936, 4096, "swiglu", attn_head_dim=128, tie_embeddings=True)
    assert param_count(qwen) - param_count(tied) == 151936 * 5120
    relu2 = ModelSpec("relu2", 2, 1024, 8, 8, 4096, 1000, 2048, "relu2")
    assert param_count(relu2) == 2 * (4 * 1024 * 1024 + 2 * 1024 * 4096 + 2 * 1024) + 2 * 1000 * 1024 + 1024


def test_expert_gradients_reduce_over_the_expert_data_parallel_group(catalog):
    """With EP=8 inside each 8-GPU server and DP=16 over two servers, a GPU's routed experts are
    held by one GPU in the other server only: their gradients all-reduce between the two servers
    over that GPU's share of the NICs, with no intra-node step to shrink them, while the dense
    weights reduce hierarchically over all 16 ranks. With EP over all 16 ranks the experts are
    not reduced at all."""
    from optimizer.perf.comm import allreduce_time, dp_reduce_time, span_link
    from optimizer.perf.model import expert_params
    from optimizer.perf.train import data_parallel_comm, params_per_gpu

    m = catalog.models["mixtral-8x7b"].spec()
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", "ib-ndr-8")
    plan = TrainPlan(tp=1, pp=1, dp=16, ep=8, micro_batch=1, num_micro_batches=8, zero=0, seq_len=4096)
    experts = expert_params(m) / 8
    dense = params_per_gpu(m, plan) - experts
    nic = span_link(16, hw)  # one GPU's share of its server's network
    expected = (dp_reduce_time(dense * plan.grad_reduce_bytes, plan, hw)
                + allreduce_time(experts * plan.grad_reduce_bytes, 2, nic))
    assert data_parallel_comm(m, hw, plan) == (pytest.approx(expected, rel=1e-12), 0.0)
    assert dp_reduce_time(experts, plan, hw, 8) > 2 * dp_reduce_time(experts, plan, hw)  # no intra-node step
    wide = TrainPlan(**{**plan.__dict__, "ep": 16})
    dense16 = params_per_gpu(m, wide) - expert_params(m) / 16
    assert data_parallel_comm(m, hw, wide)[0] == pytest.approx(dp_reduce_time(dense16 * 4.0, wide, hw))


def test_a10g_all_reduce_runs_at_the_bus_bandwidth_measured_on_a_g5_instance(catalog):
    """nccl-tests on a g5.12xlarge's four A10G (NCCL 2.18.5, pytorch/pytorch issue 127077): one
    29,388,800-byte all-reduce in 14,207 us (busbw 3.10 GB/s). G5 has no usable peer-to-peer, so the
    catalog's pcie4-g5 link is a tenth of a PCIe 4.0 server's with peer-to-peer."""
    from optimizer.perf.comm import allreduce_time
    g5 = catalog.hardware("a10g", "pcie-4", None)
    assert g5.group_link(4).name == "pcie4-g5"
    assert allreduce_time(29_388_800, 4, g5.group_link(4)) == pytest.approx(14_207e-6, rel=0.03)
    with_p2p = catalog.hardware("a100-pcie-80gb", "pcie-4", None).group_link(4)
    assert with_p2p.effective_bw > 3 * g5.group_link(4).effective_bw


def test_a_mesh_link_gives_a_group_the_links_to_its_peers_only(catalog):
    """MI300X's Infinity Fabric is seven point-to-point xGMI links per GPU, 64 GB/s each way ("a single
    peer pair gets only 64 GB/s each way; 896 is all-to-all over 7 links", the catalog's note): a TP
    group of n GPUs drives n - 1 of them. Gaudi's on-die RoCE is a mesh too (3 of 21 ports per peer);
    NVSwitch gives every group the whole link."""
    from optimizer.perf.comm import tp_allreduce_parts
    mi300x = catalog.hardware("mi300x", "oam-mi300x-8", None)
    assert [mi300x.group_link(n).bw_one_way / 1e9 for n in (2, 4, 8)] == pytest.approx([64.0, 192.0, 448.0])
    gaudi2 = catalog.hardware("gaudi2", "gaudi2-8", None)
    assert gaudi2.group_link(2).bw_one_way == pytest.approx(gaudi2.link.bw_one_way / 7)
    h100 = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    assert {h100.group_link(n).bw_one_way for n in (2, 4, 8)} == {h100.link.bw_one_way}
    # a 64 MB all-reduce among 2 MI300X: a ring moves it once over the one link, at the link's efficiency
    seconds, _ = tp_allreduce_parts(64e6, mi300x, 2)
    assert seconds == pytest.approx(64e6 / (64e9 * mi300x.link.efficiency))
    # an MI250 server holds 4 GPUs: its links reach 3 peers, so the whole node drives all of them
    mi250 = catalog.hardware("mi250", "oam-mi250-4", None)
    assert mi250.mesh_peers == 3 and mi250.group_link(4).bw_one_way == mi250.link.bw_one_way


def test_on_a_mesh_a_collective_drives_the_links_to_the_ranks_it_exchanges_with(catalog):
    """A group spread over a node (its span) uses the node's link, but on a mesh only the links to
    the GPUs it exchanges with: a pipeline send or a ring neighbour one, the 2 DP ranks between TP4
    ranks one, an expert all-to-all among 4 ranks three (MI300X: 64 GB/s each way per link)."""
    from optimizer.perf.comm import dp_reduce_time, span_link
    mi300x = catalog.hardware("mi300x", "oam-mi300x-8", None)
    link = 64e9 * mi300x.link.efficiency
    assert mi300x.group_link(8, 2).effective_bw == pytest.approx(link)
    assert span_link(8, mi300x, 2).effective_bw == pytest.approx(link)
    assert span_link(4, mi300x, 4).effective_bw == pytest.approx(3 * link)
    plan = TrainPlan(tp=4, pp=1, dp=2, micro_batch=1, num_micro_batches=8)
    # a ring of 2 sends the whole buffer once each way over their one link, plus the link's latency
    assert dp_reduce_time(1e9, plan, mi300x) == pytest.approx(1e9 / link + mi300x.link.latency)


def test_activations_take_the_attention_widths_the_layer_computes(catalog):
    """Korthikanti et al.'s 24·s·b·h of Q, K, V and the attention output is 2·s·b times their widths:
    hidden each in GPT-3, but Qwen3-32B's 64 heads of 128 make Q and the output 8,192 wide on a
    5,120 hidden size, and DeepSeek-V3's MLA decompresses K and V per head (QK 192, V 128 for 128
    heads) and keeps its compressed latents (1,536 + 512 + 64) for their projections' gradients."""
    s, b = 4096, 1
    qwen = catalog.models["qwen3-32b"].spec()
    base = 10 * s * b * qwen.hidden + 6 * s * b * qwen.ffn_hidden  # layer-norm, QKV/MLP inputs, SwiGLU
    attention = 2 * s * b * (8192 + 2 * 1024 + 8192)
    assert activation_bytes_per_layer(qwen, s, b, 1, "selective", False) == base + attention
    ds = catalog.models["deepseek-v3"].spec()
    with_tp = activation_bytes_per_layer(ds, s, b, 8, "selective", False)
    widths = 2 * 128 * 192 + 2 * 128 * 128
    mlp = 6 * s * b * mlp_activation_width(ds)
    latents = 2 * s * b * (1536 + 512 + 64)
    assert with_tp == pytest.approx(10 * s * b * ds.hidden + latents + (2 * s * b * widths + mlp) / 8)
    llama = catalog.models["llama3-70b"].spec()  # Q and the output at hidden, K and V at GQA width: as before
    assert activation_bytes_per_layer(llama, s, b, 1, "selective", False) == (
        10 * s * b * 8192 + 4 * s * b * 8192 + 4 * s * b * 1024 + 6 * s * b * llama.ffn_hidden)
