"""The first dry-run's prompt tokens on a chat endpoint against what the run bills (SmolLM2's own
chat template behind the provider emulator's ``openai-chat`` profile).

Before any run has measured an endpoint's template tokens, the dry-run's high end bills up to
``planning.views.CHAT_TEMPLATE_TOKENS_MAX`` of them per request and its low end none; after a run,
both ends bill the measured count. The bench prices ``--scores`` (default ``loss_cens``: one top-n
read per position, so only the template is uncertain) on the first ``--texts`` GSM8K items (question and answer),
probed but not yet measured, runs the same scoring through the emulator, and prints the planned
range, the billed prompt tokens and the range a second dry-run prices from the measured count.

    .venv/bin/python bench/first_plan_template_tokens.py --texts 8
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=8, help="first N GSM8K items (default 8)")
    ap.add_argument("--scores", default="loss_cens", help="score specs, comma-separated (default loss_cens)")
    a = ap.parse_args()
    announce()
    import diskcache

    from blackbox_audit.adapters import load_target, planning_view
    from blackbox_audit.adapters.hf import load_smollm2
    from blackbox_audit.benchmarks import load_gsm8k
    from blackbox_audit.planning import CostPlan, price_plan
    from blackbox_audit.scores import compute_scores, plan_requests
    from blackbox_audit.sim.emulator import run_emulator

    texts = list(load_gsm8k().texts[: a.texts])  # whole items: question and answer
    names = [s for s in a.scores.split(",") if s]
    with (
        tempfile.TemporaryDirectory() as tmp,
        run_emulator(load_smollm2(device="cpu", progress=False), "openai-chat") as emu,
        diskcache.Cache(tmp) as cache,
    ):

        def planned() -> tuple[object, tuple[int, int]]:
            view = planning_view(emu.target_spec, tokenizer="smollm2", cache=cache)
            plan = CostPlan(calls=list(plan_requests(texts, names).calls))
            return view, price_plan(plan, view).estimate.prompt_tokens

        target = load_target(emu.target_spec, tokenizer="smollm2", cache=cache)  # probes; measures nothing yet
        try:
            first_view, first = planned()
            emu.reset()
            compute_scores(target, texts, names, progress=False)
            billed = emu.stats()
        finally:
            target.close()
        after_view, after = planned()
    print(
        json.dumps(
            {
                "texts": len(texts),
                "scores": names,
                "first_plan_prompt_tokens": first,
                "assumed_template_tokens_high_end": first_view.prompt_overhead_hi,
                "billed_prompt_tokens": billed["prompt_tokens"],
                "requests_sent": billed["requests"],
                "within_first_plan": first[0] <= billed["prompt_tokens"] <= first[1],
                "measured_template_tokens": after_view.prompt_overhead,
                "second_plan_prompt_tokens": after,
            }
        )
    )


if __name__ == "__main__":
    main()
