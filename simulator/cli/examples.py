"""A few commands per command, shown at the end of its ``--help`` and in the CLI reference.

A newcomer reads ``llmsim run --help`` before any page; an option table alone
does not say what a first command looks like. Each example runs as written
from a checkout (``scenarios/``, ``baselines/``, and the shared data at
``../shared``), and the suite runs every one at smoke size through the CLI
reference page, so an example cannot rot. A command whose example needs a
file of the user's (a sweep file, two runs to compare) shows it with a
capitalised placeholder.
"""
from __future__ import annotations

__all__ = ["EXAMPLES", "epilog"]

#: Command path (as typed after ``llmsim``) -> example command lines, each with a short comment.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("llmsim run scenarios/chatbot.yaml -o out/chatbot    # the answer, results.json and report.html",
            "llmsim run scenarios/chatbot.yaml --set pools.paid.autoscaling.max_replicas=8    # a what-if on one key",
            "llmsim run scenarios/chatbot.yaml --replicates 3    # the run-to-run spread over 3 seeds"),
    "plan": ("llmsim plan scenarios/dau-10m.yaml --vary pools.chat.replicas=8..32 --set slo.ttft_p99_ms=2000",
             "llmsim plan scenarios/dau-10m.yaml --vary pools.chat.replicas=8..32 --set slo.ttft_p99_ms=2000 "
             "--confidence 0.9    # with llmsim's error"),
    "sweep": ("llmsim sweep SWEEP.yaml -o sweep-out    # a base scenario and a grid: docs/planning.md",),
    "check": ("llmsim check scenarios/*.yaml --baseline baselines    # exit 1 on a missed SLO or a regression",),
    "compare": ("llmsim compare OLD_RUN NEW_RUN    # two run folders (or their results.json)",),
    "report": ("llmsim report RUN_FOLDER    # report.html again, from the folder's results",),
    "validate": ("llmsim validate ../shared/data/e2e/closed_loop_silicon.csv --max-concurrency 8",
                 "llmsim validate BENCH_RESULT.json --backend vllm --model llama-3.1-8b --gpu h100-sxm"),
    "calibrate": ("llmsim calibrate --dry-run    # the fit's report, no profile rewritten",),
    "estimate request": ("llmsim estimate request --gpu h100-sxm --model llama-3.1-70b --tp 4 --input 2000 "
                         "--output 300 --backend vllm",),
    "estimate step": ("llmsim estimate step --gpu h100-sxm --model llama-3.1-70b --tp 4 --decode-batch 64 "
                      "--decode-context 3000",),
    "profiles list": ("llmsim profiles list    # every built-in GPU, model and serving stack",),
    "profiles show": ("llmsim profiles show h100-sxm > my-gpu.yaml    # a profile to make your own GPU's",),
}


def epilog(command: str) -> str:
    """The ``--help`` epilog of ``command``: its examples, one a line (rich joins single newlines, so each
    is its own paragraph)."""
    return "Examples:\n\n" + "\n\n".join(EXAMPLES[command])
