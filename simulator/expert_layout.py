"""How a serving stack holds a MoE layer's MXFP4 experts on the GPU.

A checkpoint's MXFP4 expert stores each weight in 4 bits and one E8M0
scale per 32 weights along the reduction; the stack's quant method creates
its parameters at the shape its kernel wants and may re-lay them after
loading (vLLM's ``Mxfp4MoEMethod.create_weights`` rounds intermediate and
hidden up per backend, ``mxfp4_round_up_hidden_size_and_intermediate_size``
from 0.19; Marlin repacks in place; the Triton ``matmul_ogs`` kernels
swizzle weights and scales into padded tiles, and some releases keep the
loaded scales beside the swizzled ones). SGLang's quant method does the
same with the triton_kernels tree its sgl-kernel wheel pins, so its layout
moves with that pin rather than with SGLang's own code. What the GPU then
holds is what the stacks count as weights before sizing the KV pool, not
the checkpoint's size. gpt-oss's experts carry bf16 biases, which the quant
methods create at the padded width and the Triton and FlashInfer TRT-LLM
runners turn to fp32 after loading (SGLang's ``process_weights_after_loading``,
vLLM's ``convert_to_mxfp4_moe_kernel_format``).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Weights one MXFP4 scale covers along the reduction, and a weight's bytes.
MX_BLOCK = 32
VALUE_BYTES = 0.5
#: Bytes of an expert's bias value in the checkpoint (gpt-oss's are bf16).
CHECKPOINT_BIAS_BYTES = 2.0


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


class ExpertLayout(BaseModel):
    """One stack's layout of MXFP4 experts: the padding of the parameters it
    creates, the tiles its kernel's layout rounds each weight and scale
    matrix to (rows: a projection's outputs; columns: its reduction, in
    weights), and how many copies of the scales it keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kernel: str = Field(min_length=1, description="the stack's name for the MoE kernel that holds the experts "
                                                  "(vLLM's MARLIN, TRITON; SGLang's triton_kernel, "
                                                  "flashinfer_mxfp4)")
    intermediate_align: int = Field(default=1, ge=1, le=4096, description="the expert width each shard's "
                                                                          "parameters are created at a multiple of")
    hidden_align: int = Field(default=1, ge=1, le=4096, description="the hidden size the parameters are created "
                                                                    "at a multiple of")
    value_rows_align: int = Field(default=1, ge=1, le=4096, description="rows of each weight matrix in the "
                                                                        "kernel's layout, a multiple of this")
    value_cols_align: int = Field(default=1, ge=1, le=4096, description="reduction columns (weights) of each "
                                                                        "weight matrix in the kernel's layout, a "
                                                                        "multiple of this")
    scale_rows_align: int = Field(default=1, ge=1, le=4096, description="rows of each scale matrix in the "
                                                                        "kernel's layout, a multiple of this")
    scale_cols_align: int = Field(default=MX_BLOCK, ge=MX_BLOCK, le=4096, multiple_of=MX_BLOCK,
                                  description="reduction columns (weights) the scale matrices cover in the "
                                              "kernel's layout, a multiple of this")
    scale_copies: int = Field(default=1, ge=1, le=2, description="2: the loaded scales stay beside the kernel's "
                                                                 "re-laid copy")
    bias_bytes: float = Field(default=CHECKPOINT_BIAS_BYTES, ge=1, le=4,
                              description="bytes the stack holds each value of an expert's biases in, at the "
                                          "created (padded) width (ModelProfile.expert_bias_params): 2, the "
                                          "checkpoint's bf16 (vLLM's MARLIN); 4 where the runner turns them to "
                                          "fp32 after loading (SGLang's triton_kernel and flashinfer_mxfp4, "
                                          "vLLM's TRITON)")
    without_ep: bool = Field(default=False, description="the stack holds the experts so only without expert "
                                                        "parallelism (SGLang's triton_kernel runner, which gpt-oss's "
                                                        "override picks where ep_size is 1; above it the experts "
                                                        "are upcast to bf16, which llmsim does not model): a pool "
                                                        "with ep > 1 is refused")
    missing: str = Field(default="", max_length=400,
                         description="what the kernel needs that the stack's install does not bring, so the "
                                     "server does not start with these experts (vLLM 0.10.1 on compute capability 10.0 "
                                     "without its flashinfer extra: triton_kernels): a pool is refused, naming "
                                     "engine.backend_version")

    def _matrix(self, rows: int, cols: int) -> float:
        """Bytes of one weight matrix of ``rows`` outputs over ``cols`` (created) reduction weights."""
        values = _up(rows, self.value_rows_align) * _up(cols, self.value_cols_align) * VALUE_BYTES
        scales = _up(rows, self.scale_rows_align) * _up(cols, self.scale_cols_align) // MX_BLOCK
        return values + scales + (self.scale_copies - 1) * rows * cols // MX_BLOCK

    def stored_bytes(self, hidden: int, intermediate: int, gated: bool, biased: bool = False) -> float:
        """Bytes one expert shard of ``intermediate`` width takes on the GPU: gate and up
        projections (one matrix, ``2 x width`` rows when gated), then down, and where ``biased``
        a bias per row of each, created at the padded width as the weights are (SGLang's and
        vLLM's ``Mxfp4MoEMethod.create_weights``)."""
        width, h = _up(intermediate, self.intermediate_align), _up(hidden, self.hidden_align)
        rows = (2 if gated else 1) * width
        biases = (rows + h) * self.bias_bytes if biased else 0.0
        return self._matrix(rows, h) + self._matrix(h, width) + biases

    def storage_scale(self, hidden: int, intermediate: int, gated: bool, biased: bool = False) -> float:
        """The shard's bytes on the GPU against the checkpoint's (4-bit weights and their scales,
        and where ``biased`` their bf16 biases)."""
        rows = (2 if gated else 1) * intermediate
        checkpoint = (rows + intermediate) * hidden * (VALUE_BYTES + 1 / MX_BLOCK)
        if biased:
            checkpoint += (rows + hidden) * CHECKPOINT_BIAS_BYTES
        return self.stored_bytes(hidden, intermediate, gated, biased) / checkpoint
