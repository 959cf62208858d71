"""Kernel launches of one forward pass run without a CUDA graph.

A stack replays decode batches as captured CUDA graphs, but runs an
iteration holding prompt tokens eagerly (TensorRT-LLM's PyTorch backend
always; SGLang always to 0.5.9 and from 0.5.10 above its piecewise graphs,
where its release captures them: :func:`simulator.memory.prefill_graph_tokens`;
vLLM above its largest piecewise graph, 512 tokens by default): its CPU walks the model in Python and launches every kernel one
by one. The GPU cannot run ahead of those launches, so such an iteration
lasts at least as long as the CPU takes to issue them, however little
work each kernel holds. That floor binds on short prefills of deep models
with many small kernels per layer (DeepSeek's MLA and routed experts at
1K-token prompts), which is why SGLang added piecewise graphs for
prefill, opt-in and then its default from 0.5.10 (sgl-project/sglang pull requests 11812 and 12996, DeepSeek-V3's
"forward cost" of a one-token prefill logged at 83 ms eager against 23 ms
captured in 12160); a long prefill's kernels outlast it.

The count is the block structure the stacks' decoder layers share (vLLM
``model_executor/models``, SGLang ``srt/models``, TensorRT-LLM
``_torch/models``), one launch per step of it, not a trace of any one
stack's kernels (fused paths launch fewer, which is why a stack whose
fusion differs from model to model gets no launch cost from the fit):

* attention (grouped-query): input RMSNorm, fused QKV GEMM, rotary,
  KV-cache write, attention, output GEMM (6);
* attention (MLA): input RMSNorm, fused q_a/kv_a GEMM, the two latent
  RMSNorms, q_b and kv_b GEMMs, rotary, the split and concatenation of the
  no-rope and rope parts (2), KV-cache write, attention, output GEMM (12);
* dense MLP: post-attention RMSNorm, gate/up GEMM, activation, down GEMM (4);
* routed experts: post-attention RMSNorm, router GEMM, top-k, token sort,
  two grouped GEMMs, activation, combine (8), and shared experts' gate/up,
  activation, down and add (4) where the model has them;
* each GEMM of a quantised format (fp8, int8, fp4): the activation's
  quantisation before it;
* tensor parallelism: the all-reduce after attention and after the MLP;
  expert parallelism: the dispatch and combine all-to-alls.

What one launch costs (Python, the framework's dispatch, the driver) is
the stack's ``eager_launch_us``, fitted on the shared data
(``benchmarks/first_token.py``); the count carries the model's depth and
structure, so the fitted cost transfers between models.
"""
from __future__ import annotations

from ..profiles.model import ModelProfile

GQA_ATTENTION, MLA_ATTENTION = 6, 12
DENSE_MLP, ROUTED_EXPERTS, SHARED_EXPERTS = 4, 8, 4
#: GEMMs per block (each quantised one launches its activation's quantisation first).
_GEMMS = {"gqa": 2, "mla": 4, "dense": 2, "moe": 2, "shared": 2}


def launches_per_forward(model: ModelProfile, tp: int, ep: int, quantised: bool) -> int:
    """Kernel launches of one eager forward pass over every layer (see the module docstring)."""
    q = 1 if quantised else 0
    attn = (MLA_ATTENTION + q * _GEMMS["mla"]) if model.is_mla else (GQA_ATTENTION + q * _GEMMS["gqa"])
    collectives = 2 if tp > 1 else 0
    dense = DENSE_MLP + q * _GEMMS["dense"]
    moe = ROUTED_EXPERTS + q * _GEMMS["moe"] + (2 if ep > 1 else 0)
    if model.shared_ffn:
        moe += SHARED_EXPERTS + q * _GEMMS["shared"]
    layers = model.num_hidden_layers
    return (layers * (attn + collectives) + model.num_dense_layers * dense + model.num_moe_layers * moe)
