"""MLA attention cost: latent KV bytes, the affine decode form, prefill monotonicity."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import mla as A
from simulator.errors import LlmsimError
from simulator.profiles import load_hardware
from simulator.profiles.hardware import RooflineParams

GPUS = {n: load_hardware(n) for n in ("h100-sxm", "h200", "b200")}

params = st.builds(RooflineParams, eta_compute=st.floats(0.05, 1.0), eta_memory=st.floats(0.05, 1.0),
                   sharpness=st.floats(1.0, 64.0), fixed_us=st.floats(0.0, 100.0),
                   per_seq_us=st.floats(0.0, 5.0), m_half=st.floats(0.0, 100.0),
                   token_traffic=st.floats(0.0, 5.0))
shapes = st.builds(A.MlaShape, num_heads=st.sampled_from([1, 8, 16, 32, 64, 128]),
                   kv_lora_rank=st.sampled_from([256, 512]), qk_rope_head_dim=st.sampled_from([32, 64]),
                   q_lora_rank=st.sampled_from([0, 1536]))


@given(shapes, st.sampled_from([1.0, 2.0]))
def test_latent_kv_bytes_per_token(shape, kvb):
    assert A.latent_kv_bytes_per_token(shape, kvb) == (shape.kv_lora_rank + shape.qk_rope_head_dim) * kvb
    # DeepSeek-V3 in bf16: 576 values, 1152 bytes per token per layer, whatever the TP shard.
    assert A.latent_kv_bytes_per_token(A.MlaShape(num_heads=16), 2.0) == 1152


@given(shapes, params, params, st.sampled_from(list(GPUS)), st.integers(1, 512),
       st.integers(0, 10**7), st.integers(0, 10**7), st.sampled_from([1.0, 2.0]), st.sampled_from(["bf16", "fp8_block"]))
@settings(max_examples=150, deadline=None)
def test_decode_exactly_affine_in_total_context(shape, attn, proj, gpu_name, batch, s1, s2, kvb, lin):
    gpu = GPUS[gpu_name]
    rate = A.mla_decode_per_context(shape, gpu, attn, kvb)
    t = A.mla_decode_time(batch, s1, shape, gpu, attn, kvb)
    assert t == pytest.approx(rate * s1 + A.mla_decode_per_seq(attn) * batch + A.mla_decode_fixed(attn), rel=1e-12)
    # adding context adds exactly rate per token, for the kernel and for the whole module
    assert A.mla_decode_time(batch, s1 + s2, shape, gpu, attn, kvb) - t == pytest.approx(rate * s2, rel=1e-9, abs=1e-15)
    m1 = A.mla_module_decode_time(batch, s1, shape, gpu, attn, proj, kvb, lin)
    m2 = A.mla_module_decode_time(batch, s1 + s2, shape, gpu, attn, proj, kvb, lin)
    assert m2 - m1 == pytest.approx(rate * s2, rel=1e-9, abs=1e-15)
    assert A.mla_decode_time(0, 0, shape, gpu, attn, kvb) == 0


@given(shapes, params, st.sampled_from(list(GPUS)))
@settings(max_examples=60, deadline=None)
def test_prefill_monotone_in_new_and_cached_tokens(shape, p, gpu_name):
    gpu = GPUS[gpu_name]
    new = np.array([1, 2, 16, 128, 1024, 8192], dtype=float)
    t = A.mla_prefill_time(new, 0.0, shape, gpu, p)
    assert np.all(np.diff(t) >= 0)
    t_cached = A.mla_prefill_time(new, 4096.0, shape, gpu, p)
    assert np.all(t_cached >= t)
    mod = A.mla_module_prefill_time(new, 0.0, shape, gpu, p, p)
    assert np.all(np.diff(mod) >= 0) and np.all(mod > t)


@given(st.sampled_from([1, 8, 128]), params, params, st.sampled_from(list(GPUS)), st.integers(1, 16384),
       st.integers(1, 8), st.sampled_from(["bf16", "fp8_block"]))
@settings(max_examples=80, deadline=None)
def test_token_traffic_is_per_token_and_head_independent(heads, attn, proj, gpu_name, new, seqs, lin):
    """``token_traffic`` adds exactly its hidden rows per new token at η_m —
    on the prefill kernel's parameters to prefill only, on a format's
    projection parameters to both phases — the same for 1 or 128 heads per
    GPU; 0 prices as before."""
    gpu, shape = GPUS[gpu_name], A.MlaShape(num_heads=heads)
    row = 2.0 * 2.0 * shape.hidden_size / gpu.hbm_bandwidth
    no_a, no_p = (q.model_copy(update=dict(token_traffic=0.0)) for q in (attn, proj))
    m = seqs * new
    extra = (A.mla_module_prefill_time(new, 0.0, shape, gpu, attn, proj, 2.0, lin, sequences=seqs)
             - A.mla_module_prefill_time(new, 0.0, shape, gpu, no_a, no_p, 2.0, lin, sequences=seqs))
    want = m * row * (attn.token_traffic / attn.eta_memory + proj.token_traffic / proj.eta_memory)
    assert extra == pytest.approx(want, rel=1e-9, abs=1e-15)
    dec = (A.mla_module_decode_time(seqs, seqs * 1000.0, shape, gpu, attn, proj, 2.0, lin)
           - A.mla_module_decode_time(seqs, seqs * 1000.0, shape, gpu, attn, no_p, 2.0, lin))
    assert dec == pytest.approx(seqs * row * proj.token_traffic / proj.eta_memory, rel=1e-9, abs=1e-15)


def test_decode_reads_the_latent_once_for_all_heads():
    """Absorbed decode is memory-bound on the latent: more heads per GPU add
    FLOPs, not KV bytes, so at a memory-bound η the rate does not change."""
    gpu, p = GPUS["h100-sxm"], RooflineParams(eta_compute=1.0, eta_memory=1.0)
    r8 = A.mla_decode_per_context(A.MlaShape(num_heads=8), gpu, p, 2.0)
    r16 = A.mla_decode_per_context(A.MlaShape(num_heads=16), gpu, p, 2.0)
    assert r8 == r16 == pytest.approx(576 * 2.0 / gpu.hbm_bandwidth)


def test_bad_shape_refused():
    with pytest.raises(LlmsimError, match="positive"):
        A.MlaShape(num_heads=0)
