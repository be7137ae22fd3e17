"""A burst of requests arriving together: how long its longest request runs, and how long its
requests wait for their first token. Element-wise arithmetic over numbers or arrays, used by
``optimizer.perf.serve``."""

from __future__ import annotations

import numpy as np

from optimizer.perf.params import Num

EULER_GAMMA = 0.5772156649


def longest_share(requests: Num, cap: Num) -> Num:
    """The longest of a burst's N outputs over their mean, where lengths vary: the expected
    maximum of N exponentially distributed lengths is the mean times the harmonic number H_N
    (Rényi's representation of exponential order statistics; David & Nagaraja, "Order
    Statistics", 2003, section 4.6), up to ``cap`` (``longest_output``), where a benchmark's
    length limit or the dataset's longest conversation stops it. One request is its own longest;
    two average 1.5 times the mean (GPUStack's and dstack's bursts of 2 to 1,000 requests)."""
    n = np.maximum(requests, 1.0)
    harmonic = np.log(n) + EULER_GAMMA + 0.5 / n - 1.0 / (12.0 * n * n)  # H_N, within 1 % at N = 1
    return np.clip(harmonic, 1.0, np.maximum(cap, 1.0))


def burst_ttft(requests: Num, batch: Num, output_len: Num, prompts_together: Num, prefill_pass: Num,
               tpot: Num, step: Num) -> Num:
    """Mean TTFT of N requests arriving at once at a replica that serves b at a time: the first b
    are prefilled ``prompts_together`` per pass of ``prefill_pass`` seconds (a request waits for
    half of them on average), the rest queue for a slot. Under continuous batching a slot frees
    every request time / b, so the k-th queued request waits k/b request times and the mean wait
    is max(0, N − b)² / (2·N·b) request times."""
    n, b = np.maximum(requests, 1.0), batch
    request_time = output_len * tpot
    wait = np.maximum(n - b, 0.0) ** 2 / (2.0 * n * b) * request_time
    return wait + 0.5 * np.minimum(n, b) * prefill_pass / prompts_together + step


def burst_prefill_share(requests: Num, batch: Num, input_len: Num, output_len: Num, budget: Num,
                        per_prompt: Num, steady: Num, waves: Num) -> Num:
    """Seconds of other requests' prefill in a burst request's time per output token (its TPOT
    beyond the decode step).

    The first n = min(N, b) requests are admitted together and their prompts prefilled at most
    ``budget`` tokens a step (vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size,
    TensorRT-LLM's max_num_tokens): P = n·s / budget steps, each costing the requests already
    decoding c = budget / s prompts' prefill. A request prefilled at a uniform point of that phase
    decodes through min(out, what is left of it), so its mean extra per output token is
    c·m/out·(1 − m/2P) with m = min(P, out): half the phase's prefill spread over its output
    (n·prefill/2·out) when out ≥ P, close to c when a short output decodes inside the phase
    (GPUStack's 128-in/4-out bursts of 1,000 requests: TPOT ≈ one budget of prefill, not a
    share of all 1,000 prompts). Equal lengths (``waves`` 1) go in such waves to the end; where
    lengths vary the N − n requests queued behind them are admitted one by one as slots free
    and carry the steady-state share ``steady`` (b prompts per output length), as every request of a
    steady stream (``requests`` 0) does."""
    n = np.maximum(np.minimum(requests, batch), 1.0)
    phase = n * input_len / budget
    m = np.minimum(phase, output_len)
    front = per_prompt * budget / input_len * m / output_len * (1.0 - m / (2.0 * phase))
    queued = np.maximum(requests - n, 0.0) * (1.0 - waves)
    return np.where(requests > 0, (n * front + queued * steady) / (n + queued), steady)
