"""benchmarks/moe_stack_kernels.py: each stack's MoE kernel over vLLM's, per token band, on
small made-up kernel tables (no shared data)."""
from __future__ import annotations

import pandas as pd
import pytest

from helpers_bench import load_benchmark

bench = load_benchmark("moe_stack_kernels")

VLLM_TRITON = "vllm_unquantizedfusedmoe_triton_tritonexperts"
TOKENS = (1, 64, 128, 1024, 2048, 16384)
LAYOUTS = ((8, 1), (1, 8))   # (moe_tp, moe_ep): one tp row, one ep row
SHAPES = ((4096, 1536, 128, 8), (2048, 768, 128, 8))


def rows(framework: str, source: str, shapes=SHAPES, ms=lambda tokens: 0.01 * tokens + 0.02,
         layouts=LAYOUTS, gpu: str = "h200", fmt: str = "bf16") -> pd.DataFrame:
    """Kernel rows as ``read`` returns them: one per shape, layout and token count."""
    out = [dict(gpu=gpu, framework=framework, kernel_source=source, format=fmt, moe_dtype=fmt, hidden_size=h,
                moe_intermediate_size=i, num_experts=e, topk=k, moe_tp=tp, moe_ep=ep, num_tokens=t,
                side="ep" if ep > 1 else "tp", latency_ms=ms(t))
           for h, i, e, k in shapes for tp, ep in layouts for t in TOKENS]
    return pd.DataFrame(out)


def table(*parts: pd.DataFrame) -> pd.DataFrame:
    return bench.summary(bench.ratios(pd.concat(parts, ignore_index=True))).set_index(["stack", "side"])


def band(name: str) -> str:
    return next(bench._band_label(*b) for b in bench.BANDS if b[0] == name)


def test_a_stack_twice_as_slow_at_prefill_reads_2_there_and_1_elsewhere():
    base = lambda t: 0.01 * t + 0.02   # noqa: E731
    slow = rows("sglang", "sglang_fused_moe_triton", ms=lambda t: base(t) * (2.0 if t >= 2048 else 1.0))
    out = table(rows("vllm", VLLM_TRITON, ms=base), slow)
    for side in ("tp", "ep"):
        r = out.loc[("sglang", side)]
        assert (r[band("decode")], r[band("middle")], r[band("prefill")]) == pytest.approx((1.0, 1.0, 2.0))
        assert (r["kernel"], r["vLLM kernel"], r["shapes"]) == ("sglang_fused_moe_triton", "triton", 2)


def test_only_the_same_shape_layout_and_token_count_pair():
    odd = (7168, 2048, 384, 8)
    stack = pd.concat([rows("trtllm", "moe_torch_flow_cutlass", ms=lambda t: 1.0),
                       rows("trtllm", "moe_torch_flow_cutlass", shapes=(odd,), ms=lambda t: 50.0),  # vLLM lacks it
                       rows("trtllm", "moe_torch_flow_cutlass", layouts=((4, 1),), ms=lambda t: 50.0)])
    out = table(rows("vllm", VLLM_TRITON, ms=lambda t: 0.5), stack)
    r = out.loc[("trtllm", "tp")]
    assert r["shapes"] == 2
    assert [r[band(b)] for b in ("decode", "middle", "prefill")] == pytest.approx([2.0, 2.0, 2.0])
    # another GPU's or format's vLLM rows pair with nothing
    out = table(rows("vllm", VLLM_TRITON, gpu="h100-sxm"), rows("vllm", VLLM_TRITON, fmt="fp8"),
                rows("trtllm", "moe_torch_flow_cutlass"))
    assert out.empty


def test_each_side_takes_the_kernel_most_shapes_ran():
    third = (6144, 2560, 160, 8)
    # tp: kernel A ran three shapes, B one (ten times slower); ep: B ran two, A one
    stack = pd.concat([rows("sglang", "A", shapes=(*SHAPES, third), layouts=((8, 1),)),
                       rows("sglang", "B", shapes=SHAPES[:1], layouts=((8, 1),), ms=lambda t: 10.0 * t),
                       rows("sglang", "A", shapes=SHAPES[:1], layouts=((1, 8),), ms=lambda t: 10.0 * t),
                       rows("sglang", "B", shapes=(SHAPES[1], third), layouts=((1, 8),))])
    out = table(rows("vllm", VLLM_TRITON, shapes=(*SHAPES, third)), stack)
    tp, ep = out.loc[("sglang", "tp")], out.loc[("sglang", "ep")]
    assert (tp["kernel"], tp["shapes"], ep["kernel"], ep["shapes"]) == ("A", 3, "B", 2)
    assert [tp[band("decode")], ep[band("prefill")]] == pytest.approx([1.0, 1.0])


def test_vllm_takes_the_family_llmsim_fits_on_each_side():
    # Hopper block-FP8: Triton without expert parallelism, FlashInfer's CUTLASS kernel with it
    triton, cutlass = "vllm_fp8moe_triton_tritonexperts", "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"
    vllm = pd.concat([rows("vllm", triton, layouts=((8, 1),), fmt="fp8_block"),
                      rows("vllm", cutlass, layouts=((1, 8),), fmt="fp8_block"),
                      rows("vllm", triton, shapes=SHAPES[:1], layouts=((1, 8),), ms=lambda t: 99.0,
                           fmt="fp8_block")])
    out = table(vllm, rows("trtllm", "moe_torch_flow_cutlass", fmt="fp8_block"))
    assert (out.loc[("trtllm", "tp"), "vLLM kernel"], out.loc[("trtllm", "ep"), "vLLM kernel"]) == \
        ("triton", "flashinfer_cutlass")
    assert out.loc[("trtllm", "ep"), band("decode")] == pytest.approx(1.0)


def _write_tables(folder, df: pd.DataFrame) -> None:
    (folder / "kernels").mkdir()
    cols = ["gpu", "framework", "framework_version", "op_name", "kernel_source", "moe_dtype", "num_tokens",
            "hidden_size", "moe_intermediate_size", "num_experts", "topk", "moe_tp", "moe_ep", "distribution",
            "latency_ms", "src"]
    df = df.assign(op_name="moe", src="x")[cols]
    for name, part in zip(bench.FILES, (df[df.framework == "vllm"], df[df.framework != "vllm"])):
        part.to_csv(folder / "kernels" / name, index=False)


def test_read_keeps_what_a_default_deployment_runs_and_the_page_block_is_rewritten(tmp_path, capsys):
    def raw(framework, version, source, dist="balanced", shape=SHAPES[0]):
        return rows(framework, source, shapes=(shape,)).assign(
            gpu="h200_sxm", moe_dtype="bfloat16", framework_version=version, distribution=dist)
    df = pd.concat([raw("vllm", "0.24.0", VLLM_TRITON), raw("vllm", "0.19.0", VLLM_TRITON),
                    raw("vllm", "0.24.0", VLLM_TRITON, dist="power_law_1.2"),
                    raw("vllm", "0.24.0", VLLM_TRITON, shape=(7168, 2048, 256, 8)),   # group-limited router
                    raw("trtllm", "1.3.0rc20", "moe_torch_flow_cutlass"),
                    raw("trtllm", "1.3.0rc20", "moe_torch_flow_min_latency"),
                    raw("trtllm", "1.3.0rc20", "moe_torch_flow_cutlass", shape=(7168, 2048, 256, 8))])
    _write_tables(tmp_path, df)
    got = bench.read(tmp_path)
    assert set(got["gpu"]) == {"h200"} and set(got["format"]) == {"bf16"} and set(got["side"]) == {"tp", "ep"}
    assert sorted(got.groupby("framework").size().items()) == [("trtllm", 12), ("vllm", 12)]
    page = tmp_path / "page.md"
    page.write_text(f"# P\n\n{bench.BEGIN}\nold\n{bench.END}\n\nafter\n")
    assert bench.main(["--data", str(tmp_path), "--markdown", str(page)]) == 0
    text = page.read_text()
    assert "old" not in text and "**trtllm**" in text and text.endswith("after\n")
    # The section states the command it was run with: this page and this data, not the documented ones.
    assert f" by `python benchmarks/moe_stack_kernels.py --data {tmp_path} --markdown {page}` (" in text


def test_without_the_shared_data_it_says_so_and_exits_0(tmp_path, capsys):
    assert bench.main(["--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("moe_stack_kernels: skipped:") and "\n" not in out
