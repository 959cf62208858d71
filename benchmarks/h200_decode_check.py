"""Llama-3.1-8B fp8 decode on H200: the cost model against SGLang's measured TPOT.

    python benchmarks/h200_decode_check.py          # fp8 KV
    python benchmarks/h200_decode_check.py bf16     # bf16 KV

For each TP, the lowest-concurrency row of ../shared/data/e2e/closed_loop_silicon.csv
(SGLang, H200, Llama-3.1-8B-Instruct, fp8 GEMMs): the decode step at batch C and
context ISL + OSL/2, and that step plus C/OSL prefills of ISL tokens per step
(each request prefills once per OSL decode steps; SGLang runs prefills as
their own batches), against the measured mean TPOT (docs/calibration-transfer.md);
the last figure is the same sum priced with SGLang's own kernels where the
H200 profile measured them apart (``kernels="sglang"``).
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import pandas as pd  # noqa: E402

from simulator import CostModel, load_hardware, load_model  # noqa: E402

kv = sys.argv[1] if len(sys.argv) > 1 else "fp8"
d = pd.read_csv(ROOT.parent / "shared" / "data" / "e2e" / "closed_loop_silicon.csv")
d = d[d.gpu.str.contains("H200")]
m = load_model('llama-3.1-8b'); g = load_hardware('h200')
for tp, rows in d.groupby('tp'):
    r = rows.sort_values('concurrency').iloc[0]
    C, isl, osl = int(r.concurrency), int(r.isl_mean), int(r.osl_mean)
    ctx = isl + osl / 2

    def priced(kernels=None):
        cm = CostModel(m, g, tp=int(tp), weight_dtype='fp8', kv_dtype=kv, kernels=kernels)
        step = cm.step_time(decode_batch=C, decode_context=C * ctx)
        # SGLang runs a new request's prefill as its own batch (no mixing): C/OSL prefills per decode step
        pf = sum(cm.step_time(prefill_chunks=[(min(8192, isl - s), s)]) for s in range(0, isl, 8192))
        return cm, step, pf, step + C / osl * pf

    cm, step, pf, est = priced()
    kern = step - cm.overhead_s
    print(f"TP{int(tp)} C={C} ISL={isl} OSL={osl}: measured TPOT {r.tpot_mean_ms:.1f} ms | decode step {step*1e3:.2f} ms "
          f"(kernels {kern*1e3:.2f} + overhead {cm.overhead_s*1e3:.1f}) | prefill {pf*1e3:.1f} ms | step + C/OSL·prefill {est*1e3:.1f} ms"
          f" | with SGLang's kernels {priced('sglang')[3]*1e3:.1f} ms")
