"""White-box scoring speed on a GPU: a randomly initialised ~1B-parameter Llama through ``HFTarget``.

Issue 41, scope 7. Speed does not depend on the weights, so the model is a seeded random
``LlamaForCausalLM`` with TinyLlama-1.1B's shape (2048 wide, 22 layers, 32 heads, 4 KV heads,
32,000-token vocabulary): nothing is downloaded and only the repository travels. Texts are
WikiMIA-64 fixture paragraphs (``fixtures/wikimia64_slice.jsonl``, shipped in the wheel) joined and cut to ``--tokens``
tokens each, tokenized by a small BPE trained on them (ids below the model's vocabulary; the LM
head is still 32,000 wide).

Each row scores the same texts with ``HFTarget.token_logprobs`` (the path every white-box score
takes) after one warm-up call, and reports:

- ``tok_s``: scored tokens per second (wall time, the device synchronised);
- ``tflop_s``: the forward's matrix work per second: 2 x (the non-embedding weights + the LM head)
  per token, plus attention's two products over the causal context;
- ``share_of_bf16_peak``: ``tflop_s`` over the bf16 matrix peak measured here first (a square
  bf16 product, ``--peak-size``), so rows in fp32 read as what the default leaves on the table.

Rows: ``defaults`` (``HFTarget`` as a user gets it: ``dtype="auto"``, the default ``batch_size``),
then bf16 at each ``--bf16-batches`` size. Each bf16 row also reports how far its logprobs are from
the defaults' (max and mean absolute difference per token): what the speed costs in numbers.

On the device machine (Python 3.12 there has torch and transformers; this package, built from the
committed tree, and the dependencies its import needs travel as wheels in ``.whl/``, made here by
``bash bench/gpu_whitebox_wheels.sh``; name ``.whl`` in the run's ``carry``)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target "$HOME/site" .whl/*.whl && export PYTHONPATH="$HOME/site" || exit
    mkdir -p "$HOME/b" && cp -r bench "$HOME/b/" && PYTHONUNBUFFERED=1 \\
        python3 "$HOME/b/bench/gpu_whitebox.py" --revision REV --json $OUT/gpu_whitebox.json

The copy of ``bench/`` outside the checkout is so that the installed package is the one imported:
the checkout's source folder has no ``blackbox_audit/adapters`` (an editable install maps it).

Here, on the CPU, the same code on a tiny model (a check of the script, not a figure)::

    .venv/bin/python bench/gpu_whitebox.py --size tiny --device cpu --texts 16 --tokens 64 --bf16-batches 8
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce, command  # noqa: E402

#: model shapes: ``1b`` is TinyLlama-1.1B's; ``tiny`` only checks the script on a CPU
SIZES: dict[str, dict[str, int]] = {
    "1b": {
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 2048,
    },
}


def fixture_texts() -> list[str]:
    """The WikiMIA-64 slice the package ships (``blackbox_audit.fixtures``: in the wheel too)."""
    from importlib.resources import files

    text = (files("blackbox_audit.fixtures") / "wikimia64_slice.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["input"] for line in text.splitlines() if line.strip()]


def build(size: str, device: str, max_tokens: int, seed: int) -> tuple[Any, Any]:
    """(model, tokenizer): a seeded random Llama of ``size`` created on ``device`` in fp32 (what
    ``from_pretrained`` gives the adapter's ``dtype="auto"``) and a BPE trained on the fixture."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from blackbox_audit.training import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(fixture_texts(), vocab_size=1024)
    config = LlamaConfig(
        **SIZES[size],
        max_position_embeddings=max(2048, max_tokens),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.eval(), tokenizer


def make_texts(tokenizer: Any, n: int, tokens: int) -> list[str]:
    """``n`` texts of ``tokens`` tokens each (before decoding back to text): the fixture's paragraphs
    joined, repeated as needed, cut into ``n`` windows at even steps so texts differ."""
    once = [i for p in fixture_texts() for i in tokenizer(p + " ")["input_ids"]]
    ids = once * (1 + (n * tokens) // max(1, len(once)))
    out: list[str] = []
    step = max(1, (len(ids) - tokens) // max(1, n))
    for i in range(n):
        window = ids[i * step : i * step + tokens]
        out.append(tokenizer.decode(window))
    return out


def matmul_peak(device: str, size: int) -> float:
    """bf16 TFLOP/s of one ``size`` x ``size`` product on ``device`` (best of a few timed loops)."""
    import torch

    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    best = 0.0
    for _ in range(3):
        for _ in range(2):
            a @ b
        sync(device)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.5:
            a @ b
            reps += 1
        sync(device)
        best = max(best, 2 * size**3 * reps / (time.perf_counter() - t0) / 1e12)
    return best


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def flops_per_text(model: Any, n_tokens: int) -> float:
    """Matrix FLOPs of one forward over a text of ``n_tokens`` tokens (module doc)."""
    cfg = model.config
    d, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    weights = model.num_parameters(exclude_embeddings=True) - model.get_output_embeddings().weight.numel()
    per_token = 2 * (weights + d * vocab)
    context = n_tokens * (n_tokens + 1) / 2  # keys each query attends to, summed (causal)
    return n_tokens * per_token + layers * 2 * 2 * d * context


def time_run(target: Any, texts: list[str], device: str) -> tuple[float, list[Any]]:
    target.token_logprobs(texts[: max(1, target.batch_size)], progress=False)  # warm-up: kernels, allocator
    sync(device)
    t0 = time.perf_counter()
    records = target.token_logprobs(texts, progress=False)
    sync(device)
    return time.perf_counter() - t0, records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="1b", help="model shape (default 1b)")
    ap.add_argument("--device", default="auto", help="auto (cuda when there is one), cuda or cpu")
    ap.add_argument("--texts", type=int, default=512, help="texts scored per row (default 512)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per text (default 256)")
    ap.add_argument("--bf16-batches", default="8,32,128", help="batch sizes of the bf16 rows (default 8,32,128)")
    ap.add_argument("--peak-size", type=int, default=8192, help="side of the bf16 product timed for the peak")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--revision", help="the git revision to stamp (the device's copy has no .git)")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    args = ap.parse_args(argv)
    if args.revision:
        print(f"$ {command(argv)}\nrevision {args.revision}", flush=True)
        rev = args.revision
    else:
        announce(argv)
        from bench.common import revision

        rev = revision()

    import torch
    import transformers

    from blackbox_audit.adapters.hf import HFTarget, _resolve_device

    device = _resolve_device(args.device)
    model, tokenizer = build(args.size, device, args.tokens, args.seed)
    texts = make_texts(tokenizer, args.texts, args.tokens)
    lengths = [len(tokenizer(t)["input_ids"]) for t in texts]
    peak = matmul_peak(device, args.peak_size if device != "cpu" else min(args.peak_size, 1024))
    params = model.num_parameters()
    print(
        f"device {device} ({torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}); "
        f"model {args.size}: {params / 1e9:.3f} B parameters; {len(texts)} texts of {np.mean(lengths):.0f} tokens; "
        f"bf16 matrix peak {peak:.1f} TFLOP/s",
        flush=True,
    )
    flops = sum(flops_per_text(model, n) for n in lengths)
    rows: list[dict[str, Any]] = []
    reference = None
    runs: list[tuple[str, dict[str, Any]]] = [("defaults", {})]
    runs += [(f"bf16 batch {b}", {"dtype": "bfloat16", "batch_size": int(b)}) for b in args.bf16_batches.split(",")]
    for name, kw in runs:
        target = HFTarget(model, tokenizer, name=f"random-llama-{args.size}", device=device, progress=False, **kw)
        seconds, records = time_run(target, texts, device)
        scored = sum(len(r.logprobs) for r in records)
        lp = np.concatenate([r.logprobs for r in records])
        row: dict[str, Any] = {
            "run": name,
            "dtype": str(target.dtype).replace("torch.", ""),
            "batch_size": target.batch_size,
            # the adapter also caps a forward's logits (``MAX_LOGIT_ELEMENTS``): on a wide vocabulary
            # that, not batch_size, can bound the texts per forward
            "texts_per_forward": max(len(b) for b in target._batches(lengths)),
            "seconds": round(seconds, 4),
            "tok_s": round(scored / seconds, 1),
            "tflop_s": round(flops / seconds / 1e12, 3),
            "share_of_bf16_peak": round(flops / seconds / 1e12 / peak, 4),
        }
        if reference is None:
            reference = lp
        else:
            diff = np.abs(lp - reference)
            row |= {"max_abs_diff_vs_defaults": float(diff.max()), "mean_abs_diff_vs_defaults": float(diff.mean())}
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        "command": command(argv),
        "revision": rev,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": {"size": args.size, **SIZES[args.size], "parameters": params},
        "texts": len(texts),
        "tokens_per_text": float(np.mean(lengths)),
        "bf16_peak_tflop_s": round(peak, 2),
        "forward_tflop": round(flops / 1e12, 4),
        "rows": rows,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
