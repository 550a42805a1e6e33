"""The order test (``contamination --heldout order``) measured: false-flag rate and power, with SEs.

Parts (``--only``, comma-separated):

- ``null-tiny``: a tiny from-scratch model trained (file order, ``--duplicates``) on one GSM8K block,
  then tested on ``--blocks`` random blocks disjoint from it: orders it never saw, so every flag is a
  false flag. The rate is reported with its binomial SE.
- ``canary``: file-order canaries (``--base``, ``--dups``, ``--seeds``) tested on their own block:
  the flag rate per duplication count (power), with its SE. ``--canary-format qa`` trains on
  ``Question: ... Answer: ...`` blocks instead of the jsonl lines; ``--format`` is the serialisation
  tested, so the four pairings measure each serialisation's power and what one misses of the other.
- ``clean``: the unmodified ``--clean-target`` (default ``smollm2``) on ``--blocks`` random GSM8K
  blocks; a flagged block is re-checked with its items re-ordered by a fresh seed (an order no model
  has seen: a true null by construction), as issue 40 asks. ``--clean-order shuffled`` draws the blocks
  from GSM8K's lines in a seeded order instead, so that every flag is false by construction (the
  unmodified model may have seen the published file); ``--block-slice`` splits a run across processes.
- ``api``: the default ``contamination`` run (no ``--heldout``: the order test, statistic chosen by
  access) through the emulator's ``--profiles`` (``vllm``: prompt logprobs, the full statistic;
  ``openai-chat``: the successor with top-20 reads; ``anthropic``: greedy continuations) at
  gpt-4o-mini's list prices, on the canaries (``--dups`` first entry, ``--seeds``) and on the clean
  base (``--blocks``): flag rate with its SE, requests and USD per item.
- ``authors``: the per-shard statistics of Oren et al.'s ``compute_sharded_comparison_test.py``
  (reimplemented from their source in ``authors_shard_logprob``: items tokenized one by one, token
  lists concatenated, the sum of log-softmax over tokens[1:]) against ours on one canary, same shards
  and shuffles: the largest absolute difference in nats.

``--statistic window`` reads the window statistic (``order_window``: each item's first ``--successor-tokens``
tokens after every item before it, in each bought order); ``--successor-read censored`` keeps what a
top-20 endpoint would return; ``--chat chatml`` reads the local target under the chat conditioning of the
emulator's ``openai-chat`` profile, so a framing is measured white-box before it is bought (``--chat-system``,
``--chat-user-template``, ``--chat-prefill``: the product's framings; ``--chat-turns``: earlier turns that the
product does not offer, ``bench/chat_framings.py``).

Every line printed and every JSON row (``--out``) carries the revision (``git rev-parse --short HEAD``)
and the exact command. ``--help`` imports no torch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import announce  # noqa: E402


def revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def rate(flags: list[bool]) -> tuple[float, float]:
    """Share flagged and its binomial standard error."""
    import math

    n = len(flags)
    p = sum(flags) / n if n else float("nan")
    return p, math.sqrt(p * (1 - p) / n) if n else float("nan")


def design(args: argparse.Namespace, offset: int, seed: int, statistic: str = "full") -> Any:
    from blackbox_audit.methods.contamination.order import OrderDesign
    from blackbox_audit.methods.contamination.order_run import DEFAULT_PERMUTATIONS, DEFAULT_SHARD_ITEMS

    return OrderDesign(
        shard_items=args.shard_items or DEFAULT_SHARD_ITEMS[statistic],
        permutations=args.permutations or DEFAULT_PERMUTATIONS[statistic],
        order_format=args.format,
        offset=offset,
        items=args.items,
        seed=seed,
    )


def statistics(args: argparse.Namespace) -> list[str]:
    return ["full", "successor"] if args.statistic == "both" else [args.statistic]


def test_block(target: Any, bench: Any, args: argparse.Namespace, offset: int, seed: int) -> dict[str, Any]:
    """One block read with each ``--statistic``; ``flag_exact``/``flag_t`` (and the p-values) are the
    first statistic's, each statistic's own under its name, with the forward time it took."""
    from blackbox_audit.methods.contamination.order import layout
    from blackbox_audit.methods.contamination.order_run import read_shards
    from blackbox_audit.methods.contamination.order_successor import read_successor, successor_layout
    from blackbox_audit.methods.contamination.order_window import read_window, window_layout

    row: dict[str, Any] = {"offset": offset, "seed": seed}
    for stat in statistics(args):
        t0 = time.process_time()
        chosen = design(args, offset, seed, stat)  # the defaults resolved: the row says what was read
        if stat == "full":
            stats, _ = read_shards(target, layout(bench, chosen), "error")
        elif stat == "window":
            lay = layout(bench, chosen, texts=False)
            stats, _ = read_window(target, window_layout(lay, args.successor_read, args.successor_tokens))
        else:
            lay = layout(bench, chosen, texts=False)
            stats, _ = read_successor(target, successor_layout(lay, args.successor_read, args.successor_tokens))
        row[stat] = {
            "design": chosen.to_json(),
            "p_exact": stats.p_exact,
            "p_t": stats.p_t,
            "p_sum": stats.p_sum,
            "mean_diff": float(stats.diffs.mean()),
            "flag_exact": bool(stats.p_exact <= args.alpha),
            "flag_t": bool(stats.p_t <= args.alpha),
            "flag_sum": bool(stats.p_sum <= args.alpha),
            "diffs": stats.diffs.tolist(),
            "cpu_s": time.process_time() - t0,
            "fewer_shuffles": fewer_shuffles(stats, args),
            "shards": [[float(c), [float(x) for x in q]] for c, q in zip(stats.canonical, stats.permuted, strict=True)],
        }
    first = row[statistics(args)[0]]
    row.update({k: first[k] for k in ("p_exact", "p_t", "mean_diff", "flag_exact", "flag_t", "diffs")})
    return row


def fewer_shuffles(stats: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The same reads tested with only each shard's first ``k`` shuffles (``--fewer-shuffles``): the shuffles
    are independent seeded draws, so their first ``k`` are a ``k``-shuffle design read for ``(1 + k) / (1 + m)``
    of the reads. Per ``k``: the exact rank-sum and the sum-permutation p-values and their flags."""
    from blackbox_audit.methods.contamination.order import OrderStats

    out: dict[str, Any] = {}
    for k in args.fewer_shuffles:
        if k >= min(len(q) for q in stats.permuted):
            continue
        sub = OrderStats(stats.canonical, [q[:k] for q in stats.permuted])
        out[str(k)] = {
            "p_exact": sub.p_exact,
            "p_sum": sub.p_sum,
            "flag_exact": bool(sub.p_exact <= args.alpha),
            "flag_sum": bool(sub.p_sum <= args.alpha),
            "read_share": (1 + k) / (1 + min(len(q) for q in stats.permuted)),
        }
    return out


def flag_rates(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[tuple[str, str, float, float, float]]:
    """(statistic, test, rate, SE, mean CPU-s per block) for each statistic read and each p-value."""
    out = []
    for stat in statistics(args):
        cpu = sum(r[stat]["cpu_s"] for r in rows) / max(1, len(rows))
        for key in ("flag_exact", "flag_t", "flag_sum"):
            p, se = rate([r[stat][key] for r in rows])
            out.append((stat, key, p, se, cpu))
    return out


def emit_rates(emit: Any, rows: list[dict[str, Any]], args: argparse.Namespace, **fields: Any) -> None:
    """One JSON row per statistic and p-value (``flag_rates``), with ``fields`` naming the part and case."""
    for stat, key, p, se, cpu in flag_rates(rows, args):
        emit(
            {**fields, "statistic": stat, "test": key, "rate": p, "se": se, "n": len(rows), "cpu_s": cpu, "rows": rows}
        )


def build(
    base: str, seed: int, dups: int, members: int, cache: str, file_format: str = "jsonl", chat_tune: int = 0
) -> Any:
    """A file-order canary (cached in ``cache``); ``chat_tune``: then instruction-tuned on that many chat
    conversations (``canary build --chat-tune``), as a deployed chat model is."""
    from blackbox_audit.sim.canary import CanaryOptions, build_canary

    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base=base,
        seed=seed,
        file_order=True,
        duplicates=dups,
        file_format=file_format,
        n_members=members,
        n_nonmembers=20,
        n_calibration=0,
        chat_tune=chat_tune,
    )
    return build_canary(opts, cache_dir=cache, progress=False)


def load(spec: str, chat: str | None = None, framing: dict[str, str] | None = None, turns: str | None = None) -> Any:
    """A local target; ``chat``: read it under a chat template's conditioning (``--chat``), each position
    after a user turn holding the text so far, as a chat API reads it; ``framing``: that turn's
    ``system``/``user_template``/``prefill`` (``--chat-system`` ...; prefill: the text so far is the
    assistant's reply, continued); ``turns``: earlier turns ahead of it (``--chat-turns``, chat_framings.py)."""
    from blackbox_audit.adapters.registry import load_target

    if not chat:
        return load_target(spec)
    target = load_target(spec, chat=chat, **(framing or {}))
    if turns:
        from bench.chat_framings import with_turns

        target = with_turns(target, turns)
    return target


def framing(args: argparse.Namespace) -> dict[str, str]:
    """The chat turn's shape from ``--chat-system``/``--chat-user-template``/``--chat-prefill``."""
    given = {"system": args.chat_system, "user_template": args.chat_user_template, "prefill": args.chat_prefill}
    out = {k: v for k, v in given.items() if v is not None}
    if (out or args.chat_turns) and not args.chat:
        raise SystemExit(
            "--chat-system/--chat-user-template/--chat-prefill/--chat-turns shape a chat turn: add --chat chatml"
        )
    return out


def free_offsets(n: int, items: int, avoid: range, k: int, seed: int) -> list[int]:
    """``k`` random block offsets whose blocks miss ``avoid`` (seeded)."""
    import numpy as np

    ok = [o for o in range(0, n - items + 1) if o + items <= avoid.start or o >= avoid.stop]
    rng = np.random.default_rng([seed, 99])
    return [int(o) for o in rng.choice(ok, size=min(k, len(ok)), replace=False)]


def part_null_tiny(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    canary = build("tiny", args.null_seed, 4, 100, args.cache)
    fo = canary.card["file_order"]
    target = load(canary.target_spec)
    rows = []
    for k, off in enumerate(
        free_offsets(len(bench), args.items, range(fo["offset"], fo["offset"] + 100), args.blocks, 0)
    ):
        rows.append(test_block(target, bench, args, off, k))
    emit_rates(emit, rows, args, part="null-tiny")


def part_canary(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    for dups in args.dups:
        rows = []
        for seed in args.seeds:
            canary = build(args.base, seed, dups, args.members, args.cache, args.canary_format, args.chat_tune)
            off = canary.card["file_order"]["offset"]
            target = load(canary.target_spec, args.chat, framing(args), args.chat_turns)
            rows.append(test_block(target, bench, args, off + args.block_start, seed))
            ps = "; ".join(
                f"{st}: p_exact={rows[-1][st]['p_exact']:.3g} p_t={rows[-1][st]['p_t']:.3g} "
                f"p_sum={rows[-1][st]['p_sum']:.3g}"
                + "".join(
                    f" | {k} shuffles: p_exact={f['p_exact']:.3g} p_sum={f['p_sum']:.3g}"
                    for k, f in rows[-1][st]["fewer_shuffles"].items()
                )
                for st in statistics(args)
            )
            print(f"  {args.base} dups={dups} seed={seed}: {ps}", flush=True)
        emit_rates(
            emit,
            rows,
            args,
            part="canary",
            base=args.base,
            dups=dups,
            canary_format=args.canary_format,
            chat_tune=args.chat_tune,
        )


def shuffled_file(bench: Any, seed: int, folder: Path) -> Any:
    """GSM8K's jsonl lines in an order drawn by ``seed``: a file no model was trained on in this order, so
    every flag on it is a false flag by construction (``--clean-order shuffled``)."""
    import numpy as np

    from blackbox_audit.benchmarks import load_qa_file

    lines = Path(bench.path).read_text(encoding="utf-8").splitlines()
    perm = np.random.default_rng([seed, 4242]).permutation(len(lines))
    path = folder / f"gsm8k-shuffled-{seed}.jsonl"
    path.write_text("".join(lines[i] + "\n" for i in perm), encoding="utf-8")
    return load_qa_file(path)


def part_clean(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    import tempfile

    target = load(args.clean_target, args.chat, framing(args), args.chat_turns)
    if args.benchmark == "mmlu":  # the file is sorted by subject: permuted within subjects (strata)
        from blackbox_audit.benchmarks import load_mmlu

        bench = load_mmlu()
    tmp = tempfile.TemporaryDirectory()
    if args.clean_order == "shuffled":
        if args.benchmark != "gsm8k":
            raise SystemExit("--clean-order shuffled writes GSM8K's jsonl lines only")
        bench = shuffled_file(bench, args.clean_order_seed, Path(tmp.name))
    rows = []
    offsets = list(enumerate(free_offsets(len(bench), args.items, range(0), args.blocks, 1)))
    start, _, stop = (args.block_slice or ":").partition(":")
    for k, off in offsets[int(start or 0) : int(stop) if stop else None]:
        row = test_block(target, bench, args, off, k)
        if row["flag_exact"] and (args.benchmark != "gsm8k" or args.clean_order == "shuffled"):
            row["recheck"] = (
                "not run: already a seeded order no model saw"
                if args.clean_order == "shuffled"
                else "not run: the re-ordered file is written from GSM8K's jsonl lines only"
            )
        elif row["flag_exact"]:  # re-check on an order no model has seen: the items shuffled by a fresh seed
            import numpy as np

            from blackbox_audit.benchmarks import load_qa_file

            lines = Path(bench.path).read_text(encoding="utf-8").splitlines()
            perm = np.random.default_rng([k, 12345]).permutation(args.items) + off
            with tempfile.TemporaryDirectory() as recheck_dir:  # not ``tmp``: that one is cleaned up below
                path = Path(recheck_dir) / "reordered.jsonl"
                path.write_text("".join(lines[i] + "\n" for i in perm), encoding="utf-8")
                row["recheck"] = test_block(target, load_qa_file(path), args, 0, k)
        rows.append(row)
        first = row[statistics(args)[0]]
        print(
            f"  {args.clean_target} {bench.name} block {off}: p_exact={row['p_exact']:.3g} p_sum={first['p_sum']:.3g}",
            flush=True,
        )
    tmp.cleanup()
    emit_rates(
        emit, rows, args, part="clean", target=args.clean_target, benchmark=bench.name, clean_order=args.clean_order
    )


def authors_shard_logprob(model: Any, tokenizer: Any, items: list[str]) -> float:
    """Oren et al.'s ``compute_logprob_of_token_sequence`` on ``flatten([t.encode(ex) for ex in shard])``
    (one window: our shards fit the context), reimplemented from their source for the CPU."""
    import torch

    tokens = [t for ex in items for t in tokenizer.encode(ex)]
    inputs, targets = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    with torch.no_grad():
        logps = torch.log_softmax(model(inputs.unsqueeze(0)).logits[0].float(), dim=-1)
    return float(logps.gather(-1, targets.unsqueeze(-1)).sum())


def authors_function(repo: str | None) -> Any:
    """Oren et al.'s own ``compute_logprob_of_token_sequence`` from a checkout of
    ``tatsu-lab/test_set_contamination`` (``--authors-repo``), run on the CPU: the module imports GPUtil
    and fire at the top for its multi-GPU driver, which this function does not use, so both are
    stubbed. Without a checkout: the reimplementation above."""
    if repo is None:
        return None
    import importlib.util
    import types

    for name in ("GPUtil", "fire"):
        sys.modules.setdefault(name, types.ModuleType(name))
    spec = importlib.util.spec_from_file_location("oren_sharded", Path(repo) / "compute_sharded_comparison_test.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.compute_logprob_of_token_sequence


def part_authors(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_audit.methods.contamination.order import layout, serialise, shard_permutations

    canary = build(args.base, args.seeds[0], args.dups[0], args.members, args.cache)
    off = canary.card["file_order"]["offset"]
    lay = layout(bench, design(args, off, 0))
    args.statistic = "full"  # the authors' statistic
    ours = test_block(load(canary.target_spec), bench, args, off, 0)
    theirs = authors_function(args.authors_repo)
    model = AutoModelForCausalLM.from_pretrained(canary.model_dir).eval()
    tok = AutoTokenizer.from_pretrained(canary.model_dir)
    units = serialise(bench, "jsonl")
    diffs, start = [], off
    for s, ids in enumerate(lay.item_ids):
        shard = units[start : start + len(ids)]
        start += len(ids)
        perms = shard_permutations(len(shard), lay.design.permutations, 0, s)
        if theirs is None:
            canon = authors_shard_logprob(model, tok, shard)
            mean = sum(authors_shard_logprob(model, tok, [shard[j] for j in p]) for p in perms) / len(perms)
        else:  # their main(): flatten([t.encode(ex) for ex in shard]), the file's lines as read by readlines()
            encoded = [tok.encode(ex) for ex in shard]
            canon = theirs([t for ex in encoded for t in ex], model, device="cpu")
            mean = sum(theirs([t for j in p for t in encoded[j]], model, device="cpu") for p in perms) / len(perms)
        diffs.append(canon - mean)
    gap = max(abs(a - b) for a, b in zip(diffs, ours["diffs"], strict=True))
    how = "their compute_logprob_of_token_sequence" if theirs is not None else "reimplementation of their source"
    emit(
        {
            "part": "authors",
            "base": args.base,
            "authors_code": how,
            "max_abs_diff_nats": gap,
            "p_t_ours": ours["p_t"],
            "p_exact_ours": ours["p_exact"],
            "ours": ours["diffs"],
            "authors": diffs,
        }
    )


#: emulator profile -> (target spec form, what ``auto`` reads there)
API_PROFILES = {"vllm": "compat", "openai-chat": "compat", "anthropic": "anthropic"}


def api_block(
    backend: Any, tokenizer: str, profile: str, bench_path: Path, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """One ``contamination`` run (the default: no --heldout, so the order test with ``auto`` choices)
    through the emulator's ``profile`` at gpt-4o-mini's list prices; its p-value, requests and cost."""
    import os

    from blackbox_audit.cli import main as cli_main
    from blackbox_audit.engine.pricing import PricingTable
    from blackbox_audit.sim.emulator import run_emulator

    price = PricingTable.load(None).get("gpt-4o-mini")
    model = "claude-emu" if profile == "anthropic" else None
    os.environ.setdefault("ANTHROPIC_API_KEY", "emulator")
    os.environ.setdefault("OPENAI_API_KEY", "emulator")
    with run_emulator(backend, profile, model=model) as emu:
        spec = f"anthropic:{emu.base_url}#{emu.model}" if profile == "anthropic" else emu.target_spec
        prices = tmp / "prices.json"
        entry = {"prompt": price.prompt, "cached_prompt": price.cached_prompt, "completion": price.completion}
        prices.write_text(json.dumps({"models": {emu.model: entry}}))
        out = tmp / f"out-{profile}"
        argv = ["contamination", "--benchmark", str(bench_path), "--target", spec, "--tokenizer", tokenizer]
        argv += ["--pricing", str(prices), "--cache-dir", str(tmp / f"cache-{profile}"), "--out", str(out)]
        argv += ["--order-successor-tokens", str(args.successor_tokens)]
        if args.statistic in ("full", "successor", "window"):  # else (both): the access chooses (auto)
            argv += ["--order-statistic", args.statistic]
        if args.permutations:
            argv += ["--order-permutations", str(args.permutations)]
        if cli_main(argv) != 0:
            raise RuntimeError(f"contamination through {profile} failed")
        verdict = json.loads((out / "verdict.json").read_text())
        run = json.loads((out / "run.json").read_text())
    usage = run.get("usage") or {}
    items = sum(json.loads(line)["n_items"] for line in (out / "scores.jsonl").read_text().splitlines())
    return {
        "profile": profile,
        "statistic": run["contamination"]["choices"].get("order_statistic", {}).get("chosen"),
        "p_exact": verdict["p_value"],
        "flag_exact": verdict["decision"] == "contaminated",
        "requests": usage.get("requests_sent"),
        "cost_usd": usage.get("cost_usd"),
        "items": items,
        "usd_per_item": (usage.get("cost_usd") or 0.0) / max(1, items),
    }


def part_api(args: argparse.Namespace, bench: Any, emit: Any) -> None:
    """Each ``--profiles`` entry on the file-order canaries (``--dups``, ``--seeds``) and on the clean
    base over ``--blocks`` random blocks: flag rate, requests and USD per item at gpt-4o-mini's prices."""
    import tempfile

    lines = Path(bench.path).read_text(encoding="utf-8").splitlines()

    def block_file(tmp: Path, off: int) -> Path:
        path = tmp / "block.jsonl"
        path.write_text("".join(line + "\n" for line in lines[off : off + args.items]), encoding="utf-8")
        return path

    cases = []
    for seed in args.seeds:
        canary = build(args.base, seed, args.dups[0], args.members, args.cache, chat_tune=args.chat_tune)
        off = canary.card["file_order"]["offset"] + args.block_start
        cases.append(("canary", seed, canary.target_spec, str(canary.model_dir), off))
    for k, off in enumerate(free_offsets(len(bench), args.items, range(0), args.blocks, 1)):
        cases.append(("clean", k, args.clean_target, args.clean_target, off))
    for profile in args.profiles:
        rows: dict[str, list[dict[str, Any]]] = {"canary": [], "clean": []}
        for kind, seed, spec, tokenizer, off in cases:
            backend = load(spec)
            with tempfile.TemporaryDirectory() as tmp:
                row = api_block(backend, tokenizer, profile, block_file(Path(tmp), off), args, Path(tmp))
            row.update(kind=kind, seed=seed, offset=off)
            rows[kind].append(row)
            print(f"  {profile} {kind} seed={seed} block {off}: {row}", flush=True)
            backend.close()
        for kind, got in rows.items():
            if not got:
                continue
            p, se = rate([r["flag_exact"] for r in got])
            emit(
                {
                    "part": "api",
                    "profile": profile,
                    "kind": kind,
                    "dups": args.dups[0] if kind == "canary" else None,
                    "statistic": got[0]["statistic"],
                    "test": "flag_exact",
                    "rate": p,
                    "se": se,
                    "n": len(got),
                    "usd_per_item": sum(r["usd_per_item"] for r in got) / len(got),
                    "requests_per_item": sum((r["requests"] or 0) / max(1, r["items"]) for r in got) / len(got),
                    "rows": got,
                }
            )


def summarise(path: str) -> None:
    """A markdown table of the JSON rows in ``path`` (``--summarise``): one line per part, statistic and
    test, with its flags, SE, cost and the command and revision that produced it."""
    print("| part | case | statistic | p-value | flagged | rate ± SE | cost per block or item | command @ revision |")
    print("|---|---|---|---|---|---|---|---|")
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["part"] == "authors":
            print(
                f"| authors | {r['base']} canary, {r['authors_code']} | full | t-test {r['p_t_ours']:.3g} | - | "
                f"max abs per-shard diff {r['max_abs_diff_nats']:.2g} nats | - | `{r['command']}` @ {r['revision']} |"
            )
            continue
        flagged = round(r["rate"] * r["n"])
        case = {
            "canary": f"{r.get('base')} file-order canary, {r.get('dups')} pass(es), trained on "
            f"{r.get('canary_format', 'jsonl')}, read as {r['settings']['format']}",
            "clean": f"unmodified {r.get('target')}, random {r.get('benchmark', 'gsm8k')} blocks",
            "null-tiny": "tiny model trained on another block",
            "api": f"{r.get('profile')} profile, {r.get('kind')}" + (f", {r['dups']} passes" if r.get("dups") else ""),
        }[r["part"]]
        cost = f"{r['cpu_s']:.0f} CPU-s" if "cpu_s" in r else ""
        if r["part"] == "api":
            cost = f"${r['usd_per_item']:.5f}/item, {r['requests_per_item']:.1f} requests/item"
        test = {"flag_exact": "exact", "flag_t": "t-test", "flag_sum": "sum-permutation"}[r["test"]]
        print(
            f"| {r['part']} | {case}, {r['settings']['items']} items | {r.get('statistic')} | {test} | "
            f"{flagged}/{r['n']} | {r['rate']:.2f} ± {r['se']:.2f} | {cost} | `{r['command']}` @ {r['revision']} |"
        )


PARTS = {
    "null-tiny": part_null_tiny,
    "canary": part_canary,
    "clean": part_clean,
    "authors": part_authors,
    "api": part_api,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="null-tiny", help=f"parts, comma-separated: {', '.join(PARTS)}")
    p.add_argument("--base", default="smollm2", choices=("tiny", "smollm2"), help="canary base (canary, authors)")
    p.add_argument("--dups", type=int, nargs="+", default=[1, 2, 4], help="duplication counts (canary)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="canary seeds")
    p.add_argument("--members", type=int, default=100, help="items in a canary's block (default 100)")
    p.add_argument("--items", type=int, default=100, help="items tested per block (default 100)")
    p.add_argument("--block-start", type=int, default=0, help="canary: test from this item of the block")
    p.add_argument("--blocks", type=int, default=100, help="random blocks (null-tiny, clean)")
    p.add_argument("--null-seed", type=int, default=0, help="null-tiny: the seed of the tiny model's own block")
    p.add_argument("--shard-items", type=int, help="items per shard (default: the check's, by statistic)")
    p.add_argument("--permutations", type=int, help="shuffles per shard (default: the check's, by statistic)")
    p.add_argument(
        "--statistic", default="both", choices=("full", "successor", "window", "both"), help="order statistic(s) read"
    )
    p.add_argument(
        "--chat",
        choices=("chatml", "template"),
        help="canary, clean: read the local target under chat conditioning (chatml: the rendering of the emulator's "
        "openai-chat profile; template: the model's own), as a chat API conditions each position",
    )
    p.add_argument("--chat-system", help="canary, clean with --chat: a system turn")
    p.add_argument(
        "--chat-user-template", help="canary, clean with --chat: the user turn around the text so far ({prefix})"
    )
    p.add_argument(
        "--chat-prefill",
        metavar="INSTRUCTION",
        help="canary, clean with --chat: the user turn holds INSTRUCTION and the text so far is the assistant's reply, "
        "continued (an assistant prefill, as Anthropic and Gemini allow)",
    )
    p.add_argument(
        "--chat-turns",
        choices=("shots", "history"),
        help="canary, clean with --chat chatml: earlier turns ahead of the read (bench/chat_framings.py: worked "
        "continuation examples, or the text as the assistant's earlier reply), framings the product does not offer",
    )
    p.add_argument("--successor-read", default="exact", choices=("exact", "censored", "greedy"))
    p.add_argument(
        "--successor-tokens", type=int, default=4, help="successor, window: tokens of each item read (default 4)"
    )
    p.add_argument("--benchmark", default="gsm8k", choices=("gsm8k", "mmlu"), help="clean: the benchmark tested")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument(
        "--authors-repo", help="authors: a checkout of tatsu-lab/test_set_contamination (else the reimplementation)"
    )
    p.add_argument(
        "--profiles",
        nargs="+",
        default=list(API_PROFILES),
        help="api: emulator profiles (vllm, openai-chat, anthropic)",
    )
    p.add_argument("--format", default="jsonl", choices=("jsonl", "qa"), help="serialisation tested")
    p.add_argument(
        "--canary-format", default="jsonl", choices=("jsonl", "qa"), help="canary: the serialisation trained on"
    )
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument(
        "--fewer-shuffles",
        type=int,
        nargs="*",
        default=[2, 3, 4],
        help="also test each block on only the first K shuffles of each shard, read off the same reads (default 2 3 4)",
    )
    p.add_argument(
        "--chat-tune", type=int, default=0, help="canary: instruction-tune each canary on N chat conversations (0: raw)"
    )
    p.add_argument("--clean-target", default="smollm2")
    p.add_argument(
        "--clean-order",
        default="file",
        choices=("file", "shuffled"),
        help="clean: blocks of the benchmark file as published (file), or of GSM8K's lines in a seeded order no "
        "model was trained on (shuffled: every flag is false by construction)",
    )
    p.add_argument("--clean-order-seed", type=int, default=0, help="clean --clean-order shuffled: the order's seed")
    p.add_argument(
        "--block-slice", help="clean: test only these of the --blocks random blocks (START:STOP), to split a run"
    )
    p.add_argument("--cache", default=None, help="canary cache folder")
    p.add_argument("--out", help="append JSON rows here")
    p.add_argument("--summarise", metavar="JSONL", help="print a markdown table of the rows in JSONL and stop")
    args = p.parse_args(argv)
    announce(argv)
    if args.summarise:
        summarise(args.summarise)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    from blackbox_audit.benchmarks import load_gsm8k

    bench = load_gsm8k()
    rev, cmd = revision(), "python bench/order_test_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def emit(row: dict[str, Any]) -> None:
        row = {
            **row,
            "revision": rev,
            "command": cmd,
            "settings": {
                "items": args.items,
                "shard_items": args.shard_items,
                "permutations": args.permutations,
                "statistic": args.statistic,
                "successor_read": args.successor_read,
                "successor_tokens": args.successor_tokens,
                "chat": args.chat,
                "chat_framing": {**framing(args), **({"turns": args.chat_turns} if args.chat_turns else {})},
                "format": args.format,
                "alpha": args.alpha,
            },
        }
        head = {k: v for k, v in row.items() if k not in ("rows", "ours", "authors", "command", "settings")}
        print(json.dumps(head))
        if args.out:
            with Path(args.out).open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    for part in args.only.split(","):
        t0 = time.perf_counter()
        PARTS[part](args, bench, emit)
        print(f"# {part}: {time.perf_counter() - t0:.0f} s wall, revision {rev}, command: {cmd}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
