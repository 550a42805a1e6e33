"""Why ``greedy_match`` works where sampled continuations do not (issue 28): the canary's top-1 rate.

On the SmolLM2 canary of ``bench/textonly_canary.py`` (same seed, same draw of members and
non-members), each text is read white-box under the ``anthropic`` profile's prefill (the ChatML
user turn ``adapters.anthropic_api.USER_TEMPLATE``, then the text as the open assistant turn), and
for every position the bench records whether the true next token is the model's argmax. Prints
the AUC (members vs non-members) of

- the top-1 rate over all positions, and over word starts only (tokens that begin with a space:
  where ``greedy_match`` cuts);
- the mean log-probability under the same conditioning (the logprob score's view);
- the top-1 rate at ``K`` word starts drawn at random per text, for ``K`` in ``--cuts`` (mean and
  standard deviation over ``--draws`` draws): what ``greedy_match:cuts=K`` can reach at best.

Run from the repository root: ``OMP_NUM_THREADS=1 .venv/bin/python bench/textonly_top1.py
--cache-dir C`` (about a minute on one core once the canary is built).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, auc, get_canary
from bench.textonly_canary import draw_texts  # the same draw of texts as the text-only bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="canary seed")
    p.add_argument("--draw-seed", type=int, default=0, help="which members/non-members are drawn")
    p.add_argument("--members", type=int, default=60)
    p.add_argument("--nonmembers", type=int, default=60)
    p.add_argument("--cuts", default="4,8,16,32,64")
    p.add_argument("--draws", type=int, default=20)
    p.add_argument("--cache-dir")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    announce(argv)

    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.adapters.anthropic_api import USER_TEMPLATE
    from blackbox_audit.adapters.chat_templates import chatml_text
    from blackbox_audit.adapters.hf import load_hf

    canary = get_canary(base="smollm2", seed=a.seed, cache_dir=a.cache_dir)
    mem, non = draw_texts(canary, a.members, a.nonmembers, a.draw_seed)
    target = load_hf(str(canary.path / "model"), device="cpu", progress=False)
    tok, model = target.tokenizer, target.model
    head = chatml_text([{"role": "user", "content": USER_TEMPLATE}])
    n_head = len(tok(head, add_special_tokens=False)["input_ids"])
    rows = []
    for r, y in [(r, 1) for r in mem] + [(r, 0) for r in non]:
        ids = tok(head + r["text"], add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = model(torch.tensor([ids])).logits[0, n_head - 1 : -1].float()
        true = torch.tensor(ids[n_head:])
        hit = (logits.argmax(-1) == true).numpy()
        lp = torch.log_softmax(logits, -1)[torch.arange(len(true)), true].numpy()
        starts = np.array([tok.convert_ids_to_tokens(int(t)).startswith("Ġ") for t in true])
        rows.append((y, hit, starts, lp))
    y = np.array([r[0] for r in rows])
    print(f"canary {canary.path}; {len(mem)} members + {len(non)} non-members, anthropic prefill conditioning")
    for name, vals in (
        ("top-1 rate, all positions", [h.mean() for _, h, _, _ in rows]),
        ("top-1 rate, word starts", [h[s].mean() for _, h, s, _ in rows]),
        ("mean log-probability", [lp.mean() for *_, lp in rows]),
    ):
        v = np.asarray(vals)
        print(f"{name:<28} AUC {auc(v, y):.3f}   members {v[y == 1].mean():.3f}   "
              f"non-members {v[y == 0].mean():.3f}")  # fmt: skip
    for k in (int(x) for x in a.cuts.split(",")):
        aucs = []
        for d in range(a.draws):
            g = np.random.default_rng([a.draw_seed, d])
            vals = []
            for _, hit, starts, _ in rows:
                pos = np.flatnonzero(starts)
                pos = pos[pos >= 4]  # the first 4 tokens (about greedy_match's min_prefix_words of 4 words)
                pick = g.choice(pos, size=min(k, len(pos)), replace=False) if len(pos) else pos
                vals.append(hit[pick].mean() if len(pick) else 0.0)
            aucs.append(auc(vals, y))
        print(
            f"top-1 rate at {k:>3} random word starts: AUC {np.mean(aucs):.3f} "
            f"(SD {np.std(aucs):.3f} over {a.draws} draws)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
