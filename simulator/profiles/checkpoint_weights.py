"""Which weights a serving stack can serve a checkpoint in.

A stack reads a checkpoint's ``quantization_config`` and builds its layers
for that format; it does not turn one checkpoint into another, with two
exceptions a backend profile states: vLLM and SGLang quantise a 16-bit
checkpoint to fp8 as they load it (``online_fp8``), and SGLang may upcast
MXFP4 experts to bf16 (``upcasts_checkpoints``). A pool naming other weights than its checkpoint holds would be priced
as a model no server runs, so it is refused; where llmsim does not know the
checkpoint's format (a hand-written profile naming none), the pool's
weights say what the checkpoint is.

Sources: vLLM 0.19.1 ``ModelConfig._verify_quantization`` (a ``--quantization``
other than the checkpoint's raises "does not match"), ``get_quant_config``
(ModelOpt NVFP4, AWQ and GPTQ read their config files from the checkpoint,
"Cannot find the config file" without them; ``Fp8Config`` and ``Mxfp4Config``
need none, and only Fp8Config quantises at load: ``is_checkpoint_fp8_serialized``
false; ``Mxfp4MoEMethod.create_weights`` makes packed 4-bit parameters a
16-bit checkpoint cannot fill). SGLang 0.5.19 ``ModelConfig._verify_quantization``
(the same refusal; its online ``nvfp4_online`` and ``modelopt_fp4`` over fp8
requantise the routed experts alone, and ``quark_mxfp4`` runs on AMD gfx95
only, MoE and linear layers at W4A4: neither is a format llmsim prices).
TensorRT-LLM's PyTorch backend runs pre-quantised ModelOpt exports only
(docs/source/features/quantization.md).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Optional

from ..errors import LlmsimError
from .backend import BackendProfile, backend_names, load_backend
from .model import ModelProfile

_SIXTEEN_BIT = ("bf16", "fp16")
_MEASURED: ContextVar[bool] = ContextVar("measured_checkpoint", default=False)


@contextmanager
def measured_checkpoints() -> Iterator[None]:
    """Within it, a pool's weights are what its checkpoint held, not a choice to check: a measured
    row's replay. The row ran, so its server loaded weights in the row's format; AIConfigurator
    records NVIDIA's NVFP4 export of DeepSeek-R1 under deepseek-ai/DeepSeek-R1 with quant mode
    nvfp4, the model id naming the architecture and the mode the checkpoint."""
    token = _MEASURED.set(True)
    try:
        yield
    finally:
        _MEASURED.reset(token)


def check_checkpoint_weights(model: ModelProfile, weight_dtype: str, backend: Optional[str] = None,
                             stack: str = "") -> None:
    """Refuse ``weight_dtype`` where ``backend`` (None: every stack llmsim models) cannot serve
    ``model``'s checkpoint in it; ``stack`` names the backend and release in the message."""
    held = model.checkpoint_weights
    if _MEASURED.get() or held is None or held == weight_dtype or (held in _SIXTEEN_BIT and weight_dtype in _SIXTEEN_BIT):
        return
    online = _some_stack(backend, lambda p: p.online_fp8)
    if held in _SIXTEEN_BIT and weight_dtype == "fp8" and online:
        return
    if weight_dtype in _SIXTEEN_BIT and _some_stack(backend, lambda p: held in p.upcasts_checkpoints):
        return
    who, s = (stack or backend, "s") if backend else (f"the stacks ({', '.join(backend_names())})", "")
    if weight_dtype in _SIXTEEN_BIT:
        need = f"{who} load{s} the {held} checkpoint in its own format and do{'es' if s else ''} not dequantise " \
               f"it to {weight_dtype}"
        other = "the 16-bit checkpoint (its config.json)"
    else:
        need = f"{who} serve{s} {weight_dtype} weights only from a checkpoint already quantised to {weight_dtype}"
        if held not in _SIXTEEN_BIT:
            need += f", not by requantising one in {held}"
        elif online:
            need += " (quantising 16-bit weights as " + ("it loads" if s else "they load") + " to fp8 alone)"
        else:
            need += " (it quantises nothing as it loads)"
        other = f"the {weight_dtype} checkpoint (its config.json, with its quantization_config)"
    raise LlmsimError(f"{model.name}'s checkpoint holds {_named(held)} weights; {need}: serve its "
                      f"{_named(held)} weights, or describe {other}", key_path="engine.weight_dtype")


def _some_stack(backend: Optional[str], does: Callable[[BackendProfile], bool]) -> bool:
    """Whether ``backend`` does it; without one, whether any stack llmsim models does."""
    return any(does(load_backend(b)) for b in ([backend] if backend else backend_names()))


def _named(dtype: str) -> str:
    return "16-bit" if dtype in _SIXTEEN_BIT else dtype
