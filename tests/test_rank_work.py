"""Each layer kind's work where it runs: a prompt's chunk on its dp rank, a sliding layer's window.

With attention data parallelism a request stays on one rank, so its prompt's chunk goes through
that rank's attention projections, dense MLPs, shared experts and router whole, and that rank's
GPUs send its routed copies; the step waits for the busiest rank (the MoE layers join the ranks
every layer). A sliding-window layer's query attends at most the window's keys, in a prompt as
in decode. The itemised step (``llmsim estimate step``) counts each layer kind in its own shape.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import scalar
from simulator.costmodel.rank_load import RankLoad
from simulator.costmodel.scalar import window_pairs
from simulator.costmodel.step import CostModel
from simulator.profiles import load_hardware
from simulator.profiles.model import load_model


@pytest.fixture(scope="module")
def wide_ep() -> CostModel:
    return CostModel(load_model("deepseek-v3"), load_hardware("h200"), tp=1, weight_dtype="fp8", dp=8, ep=8)


def test_the_busiest_rank_holds_whole_chunks_dealt_round_robin(wide_ep):
    assert wide_ep.busiest_rank([(8192, 0)], 16) == 8192 + 2           # one prompt: one rank, and 2 of 16 decodes
    assert wide_ep.busiest_rank([(1000, 0)] * 9, 0) == 2000             # rank 0 draws chunks 0 and 8
    assert wide_ep.busiest_rank([], 64) is None                          # decodes alone spread evenly
    assert CostModel(load_model("llama-3.1-8b"), load_hardware("h200")).busiest_rank([(8192, 0)], 4) is None


def test_the_busiest_rank_is_the_one_the_engine_placed_the_work_on(wide_ep):
    """Given where the engine placed each chunk and decode, the step prices the rank holding the
    most, not an even deal: four prompts on one rank cost more than one on each of four."""
    chunks = [(2048, 0)] * 4
    idle = [0] * 8
    piled = RankLoad([0, 0, 0, 0], idle)
    spread = RankLoad([0, 1, 2, 3], idle)
    assert wide_ep.busiest_rank(chunks, 0, piled) == 8192 and wide_ep.busiest_rank(chunks, 0, spread) == 2048
    assert wide_ep.step_time(chunks, load=piled) > wide_ep.step_time(chunks, load=spread) * 1.5
    assert wide_ep.step_time(chunks, load=spread) == pytest.approx(wide_ep.step_time(chunks))   # the even deal
    # decodes: the rank running 40 of 64 sets the step, and a stretch's coefficients price it alike
    uneven = RankLoad([], [40, 24] + [0] * 6)
    assert wide_ep.busiest_rank([], 64, uneven) == 40
    a, b = wide_ep.decode_coefficients(64, busiest=40)
    assert wide_ep.step_time((), 64, 64 * 3000.0, load=uneven) == pytest.approx(a + b * 64 * 3000.0, rel=1e-12)
    even_a, even_b = wide_ep.decode_coefficients(64)
    assert a + b * 64 * 3000.0 > even_a + even_b * 64 * 3000.0


def test_one_prompt_on_one_rank_costs_its_whole_chunk_in_the_rank_layers(wide_ep):
    one = wide_ep.step([(8192, 0)])
    spread = wide_ep.step([(1024, 0)] * 8)       # the same tokens and routed work, a chunk on every rank
    rank_side = wide_ep.linear_time(8192, 8192) - wide_ep.linear_time(8192, 1024)
    assert rank_side > 0.1                        # 61 layers of MLA projections and shared experts at 8× the rows
    assert one.linear_s - spread.linear_s == pytest.approx(rank_side, rel=1e-9)
    assert one.comm_s > spread.comm_s           # its rank's GPUs send every routed copy of the prompt


@settings(max_examples=200, deadline=None)
@given(new=st.integers(1, 3000), cached=st.integers(0, 3000), window=st.integers(1, 2000))
def test_window_pairs_count_each_querys_keys_within_the_window(new, cached, window):
    assert window_pairs(new, cached, window) == sum(min(p + 1, window) for p in range(cached, cached + new))


def test_a_sliding_layer_prefills_a_window_not_the_causal_triangle():
    cm = CostModel(load_model("gpt-oss-120b"), load_hardware("h200"), weight_dtype="mxfp4")
    ops, p = cm.ops, cm.cal.attention_prefill
    args = ([(8192, 0)], cm.heads, cm.kv_heads, cm.head_dim, cm.kv_bytes, cm.peak_attn * p.eta_compute,
            cm.hbm_bw * p.eta_memory, p.sharpness)
    # a window of 128 over an 8,192-token chunk: 1/32 of the causal triangle's pairs (its Q, K, V and
    # output still move whole, so the time falls less)
    assert scalar.prefill_attention(*args, 128) < 0.2 * scalar.prefill_attention(*args)
    flops, _ = ops.attention_flops_bytes([(8192, 0)], 0, 0.0)
    per_pair = 4.0 * cm.heads * cm.head_dim
    assert flops == pytest.approx(per_pair * (ops.n_full * 8192 * 8193 / 2 + ops.n_slide * window_pairs(8192, 0, 128)))


def test_the_itemised_step_reads_mlas_latent_not_per_head_keys():
    cm = CostModel(load_model("deepseek-v3"), load_hardware("h200"), tp=8, weight_dtype="fp8")
    s = cm.ops.mla
    base, ctx = cm.step(decode_batch=64), cm.step(decode_batch=64, decode_context=64 * 2000.0)
    latent = cm.layers * s.latent_dim * cm.kv_bytes * 64 * 2000.0
    assert ctx.bytes - base.bytes == pytest.approx(latent)


def test_a_rank_that_prefills_beside_ranks_that_decode_takes_the_longer_attention(wide_ep):
    """SGLang's attention-DP ranks pick their own batches: one rank prefills a chunk while the others
    decode. Each attends only its own sequences, so the step's attention is the slower rank's, not the
    prefilling rank's and a decoding rank's summed; on one rank holding both it is their sum."""
    chunks, ctx = [(2048, 0)], 56 * 3000.0
    apart = RankLoad([0], [0] + [8] * 7)
    together = RankLoad([1], [0] + [8] * 7)
    prefill = wide_ep.prefill_attention_time(chunks, apart)
    decode = wide_ep.decode_attention_time(56, ctx, 8)
    assert wide_ep.ops.rank_attention_time(chunks, 56, ctx, apart) == max(prefill, decode)
    assert wide_ep.ops.rank_attention_time(chunks, 56, ctx, together) == pytest.approx(prefill + decode)
    # (together, the prefilling rank also runs 8 more tokens through its layers)
    assert (wide_ep.step_time(chunks, 56, ctx, load=together) - wide_ep.step_time(chunks, 56, ctx, load=apart)
            >= min(prefill, decode) > 0.001)
