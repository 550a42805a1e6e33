"""Power per dollar of the contamination check's score plans, on GSM8K canaries behind a chat API.

A canary trained on GSM8K test items (``blackbox_audit.sim.canary``, corpus ``benchmark:gsm8k``)
is served by the provider emulator under the ``openai-chat`` profile (chat conditioning, top-20
logprobs, integer logit biases: every answer token outside the top 20 is bisected) and priced as
``--price-as`` (default gpt-4o-mini) through ``--pricing``. Two canaries:

- ``tiny`` (fast): a 2-layer GPT trained from scratch on 200 GSM8K items. The benchmark is those
  200 items (fully contaminated), the held-out side 200 never-trained items;
- ``smollm2``: SmolLM2-135M's top layers fine-tuned on 64 items. Each order's benchmark is the
  64 members and 64 of the 192 never-trained items (a true rate of 50%), the held-out side the
  other 128.

**Scoring once, simulating the runs.** At temperature 0 every item's score and cost under a plan
are deterministic. So the script reads once, per item and answer position, what the emulator
answers there: the backend's own next-token distribution after the chat-rendered context (the true
token's logprob, the top-20 list, the billed prompt tokens; ``truth_pass``, kept in ``--work``).
Every plan's per-item score and USD follow from it: a top-n plan applies the registered score to
the record its API read builds (``cheap_rows``: one request per kept position); full recovery
(``loss``, ``loss@lastM``...) scores the exact loss, one top-20 read per kept position plus the
bisection requests per miss measured on ``--loss-real`` items recovered for real through the emulator
(``full_recovery_rows``); a sampled ``loss`` plan (``loss@random8``) bisects with less learned per text,
so its requests per miss are measured on ``--calib-real`` items of its own, other than the checked
ones (full recovery's when they show fewer than ``MIN_MISSES`` misses). Both are checked in the
same run against items scored through the emulator (``--check-real`` per plan): USD modelled /
billed, requests modelled / sent, largest score difference. The runs are then simulated from the
per-item numbers: ``--orders`` seeded buying orders (benchmark and held-out items shuffled and
interleaved as the check does), and per order and budget the items bought in that order until the
budget is spent. Per plan the script prints:

- requests and USD per item (mean), the share of answer positions that needed bisection, and the
  per-item AUC (members vs never-trained items);
- **fixed-sample**: the smallest budget (on a geometric grid) at which the one rank test on
  the items bought flags the benchmark in >= 80% of orders (the check before sequential stopping);
- **sequential**: the e-process of ``methods.contamination.sequential`` with the check's default
  futility rule, fed in each order; a run flags at budget B when its wealth crosses 1/alpha
  before B is spent (its path does not depend on B), so the budget flagging >= 80% of orders is
  the 80th percentile of the spend at the crossing; also the median spend when it stops;
- the ratio of the current default plan's fixed-sample budget (``loss``, every position
  recovered) to each plan's sequential budget, side by side in this one run;
- the sequential budget with ``--batch`` (``at_batch_price``; ``BATCH_CHUNK`` items per call, so a
  run that settles inside a chunk pays for all of it): with the rounds batched (the default, every
  request at the batch share of the price, one batch per round) and with ``--batch-rounds first``
  (each position's first request at the batch share, the bisection rounds direct);
- ``--check-batch`` items scored through the emulator in one ``--batch`` call under the default's
  plan: billed USD against the modelled batch price, requests, batches bought (one per round); and
  that plan's ``--batch`` B80 at 16, 32 and 64 items per call;
- **the default itself**: the plan ``--score auto`` chooses, read from the product's own dry-run at
  ``--default-budgets`` budgets (``dry_run_choices``), under the shipped rule (worst case over the
  calibration canaries) and the rule before it (each plan's lowest AUC), with and without
  ``--batch``; its budget for 80% of orders, its ratio to full recovery and its share of the best
  plan's power per dollar.

**Oracle pilot** (``--oracle-pilot K,...``): the best a pilot that learns the plan on the target could
do. It reads the first K items of each side once, recovering the union of the candidate plans'
positions (every sampled ``loss`` plan, or only the two best), leaves them out of the test, then tests
the rest with the best sampled plan as if it had chosen it without error. Its B80 against the best
plan's bounds the share of the best plan's power per dollar any such pilot of K items can reach.

**Clean model.** The plans are also scored on items nobody trained on (tiny: 400 of the
canary's never-trained items, a canary trained on other items; smollm2: unmodified SmolLM2
on the same 256 items); each of ``--redraws`` redraws splits them at random into a benchmark and a
held-out side and runs the sequential test (futility on) over all of them: the flag rate, with
its standard error, must stay <= alpha + 2 SE. The redraws share one pool of items, so they are
not fully independent draws.

``--write-calibration`` writes the per-plan AUCs, miss shares and costs measured here into
``blackbox_audit/methods/contamination/plan_calibration.json`` (what the dry-run's plan choice reads), with
the canary, profile, command and git revision.

**Chat-trained SmolLM2 canary.** Read through the chat API, the SmolLM2 canary's members show
nothing (SmolLM2-Instruct answers a user turn in its chat manner whatever it memorised as plain
text: per-item loss AUC 0.37, unmodified SmolLM2 0.39 on the same items), so no plan can flag
it. ``--chat-trained-epochs N`` audits instead SmolLM2 fine-tuned on the same members in the
form the emulator reads them (``bench/chat_canary.py``); the items, sides and clean model stay
the same.

Run: ``.venv/bin/python bench/power_per_dollar.py --canary tiny`` (the white-box pass over 600 items
is the slow part: about 20 minutes on one shared core, done once; the rest takes a few minutes).
``--canary smollm2`` runs the same on the SmolLM2 canary: its white-box pass (every answer
position's chat context, packed by shared prefix: ``adapters/hf_packing.py``) takes about 4 s per
item and model on one core, 15 minutes for the 256 items of each model.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import (
    announce,
    auc_of,
    direct_model_requests,
    emulator,
    get_canary,
    load_backend,
    open_workspace,
    stamped,
)

#: plans compared by default: the pre-issue default (every answer position recovered), and the cheap ones
DEFAULT_PLANS = (
    "loss,loss@random16,loss@random8,loss@random4,loss@last16,loss@last8,loss@last4,"
    "loss_cens,min_k_cens,log_rank,top_k_hits,top1_gap"
)
#: the plans written to the shipped calibration (each dry-run prices every one: a few, one per family)
CALIBRATION_PLANS = "loss,loss@last4,loss@last8,loss@last16,loss@random4,loss@random8,log_rank,loss_cens,top1_gap"
PRICE_MODEL = "emu-openai-chat"
#: the tiny canary's epochs: at the canary's default 5 (65 steps on 200 items) it barely memorises them
#: (loss AUC 0.56 on 200 members vs 120 never-trained items, 2.6% of answer tokens in the top 20)
TINY_EPOCHS = 20
#: requests in flight (the positions of one item are sent concurrently)
CONCURRENCY = 16
#: backend spec -> base URL of an emulator already serving it (``--emulator SPEC=URL``)
EMULATOR_URLS: dict[str, str] = {}


@dataclass
class Item:
    id: str
    prompt: str
    output: str
    member: bool


def gsm_items(rows: list[dict[str, Any]], member: bool) -> list[Item]:
    """Canary rows (``gsm8k-<index>``) as GSM8K items, split into question and answer."""
    from blackbox_audit.benchmarks import load_gsm8k

    gsm = load_gsm8k()
    out = []
    for r in rows:
        i = int(str(r["id"]).rsplit("-", 1)[1])
        if gsm.texts[i] != r["text"]:
            raise SystemExit(f"canary row {r['id']} is not GSM8K item {i} as formatted now: rebuild the canary")
        out.append(Item(f"gsm8k-{i}", gsm.prompts[i], gsm.outputs[i], member))
    return out


def canary_setup(name: str, cache_dir: str | None, epochs: int | None):
    """(canary options, members, never-trained items, backend spec, clean backend spec or None, tokenizer)."""
    from dataclasses import replace

    from blackbox_audit.sim.canary import CanaryOptions, default_train_config

    if name == "tiny":
        train = replace(default_train_config("tiny"), epochs=epochs or TINY_EPOCHS)
        opts = CanaryOptions(
            corpus="benchmark:gsm8k",
            base="tiny",
            n_members=200,
            n_nonmembers=200,
            n_calibration=400,
            n_shifted=0,
            train=train,
        )
    else:
        train = default_train_config("smollm2")
        if epochs:
            train = replace(train, epochs=epochs)
        opts = CanaryOptions(
            corpus="benchmark:gsm8k",
            base="smollm2",
            n_members=64,
            n_nonmembers=64,
            n_calibration=128,
            n_shifted=0,
            train=train,
        )
    t0 = time.perf_counter()
    canary = get_canary(opts, cache_dir=cache_dir)
    print(
        f"canary {name}: {canary.path} ({time.perf_counter() - t0:.0f} s; {canary.card['sizes']}, epochs "
        f"{canary.card.get('epochs')}, final train loss {canary.card.get('final_train_loss'):.3f})"
    )
    members = gsm_items(canary.members, True)
    never = gsm_items(canary.nonmembers + canary.calibration, False)
    if name == "tiny":
        return opts, canary, members, never, canary.target_spec, None, str(canary.model_dir)
    return opts, canary, members, never, canary.target_spec, "smollm2", "smollm2"


# ----------------------------------------------------------------------------- scoring once per plan
class Scorer:
    """Scores items under a plan through an emulated API target, one item at a time, and keeps a
    per-item table (score, USD, requests, positions, bisected positions) in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.rows))
        tmp.replace(self.path)

    def score(self, target: Any, items: list[Item], plan: Any, label: str) -> dict[str, dict[str, Any]]:
        from tqdm.auto import tqdm

        from blackbox_audit.methods.contamination.purchase import engine_spend
        from blackbox_audit.scores.output import compute_output_scores

        todo = [it for it in items if f"{plan.key}|{it.id}" not in self.rows]
        kw = {} if plan.positions in (None, "all") else {"positions": plan.positions}
        t0 = time.perf_counter()
        for it in tqdm(todo, desc=f"{label} {plan.key}", unit="item", mininterval=30):
            before = engine_spend(target)
            hits0 = target.engine.stats.cache_hits
            use0 = target.usage()
            table = compute_output_scores(target, [it.prompt], [it.output], [plan.score], progress=False, **kw)
            after = engine_spend(target)
            use1 = target.usage()
            if target.engine.stats.cache_hits != hits0:
                raise SystemExit(
                    f"answers for {it.id} came from the request cache, so its cost cannot be measured: delete "
                    f"{self.path.parent / 'requests'} (the per-item table {self.path.name} is what a re-run re-uses)"
                )
            pos = {
                k2: use1["positions_by_strategy"].get(k2, 0) - use0["positions_by_strategy"].get(k2, 0)
                for k2 in use1["positions_by_strategy"]
            }
            self.rows[f"{plan.key}|{it.id}"] = {
                "score": float(table[plan.score][0]),
                "usd": after[0] - before[0],
                "requests": after[1] - before[1],
                "positions": int(sum(pos.values())),
                "bisected": int(pos.get("bisection", 0)),
            }
            self.save()  # every item: a stopped run re-uses it (its answers are in the request cache)
        if todo:
            print(f"  scored {len(todo)} items under {plan.key} in {time.perf_counter() - t0:.0f} s")
        return {it.id: self.rows[f"{plan.key}|{it.id}"] for it in items}


def serve_and_score(
    spec: str, tokenizer: str, items: list[Item], plans: list[Any], scorer: Scorer, work: Path, label: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every plan's per-item rows for ``items`` on the model ``spec`` behind the openai-chat emulator."""
    need = [p for p in plans if any(f"{p.key}|{it.id}" not in scorer.rows for it in items)]
    if need:
        pricing = work / "pricing.json"

        def score_on(target_spec: str) -> None:
            for plan in need:  # a request cache per plan: plans share their top-20 reads, each must pay for its own
                cache = work / "requests" if plan.key == "loss" else work / f"requests-{plan.key.replace('@', '-')}"
                ws = open_workspace(cache, pricing=str(pricing), concurrency=CONCURRENCY)
                try:
                    scorer.score(ws.load_target(target_spec, tokenizer=tokenizer), items, plan, label)
                finally:
                    ws.close()

        url = EMULATOR_URLS.get(spec)
        if url:  # served by `blackbox-audit emulate` in another process (two cores instead of one)
            score_on(f"compat:{url}#{PRICE_MODEL}")
        else:
            with emulator(spec, "openai-chat", model=PRICE_MODEL) as emu:
                score_on(emu.target_spec)
    return {p.key: {it.id: scorer.rows[f"{p.key}|{it.id}"] for it in items} for p in plans}


# ----------------------------------------------------------------------------- white-box truth
TOP_N = 20


def chat_contexts(backend: Any, tokenizer: str):
    """``item -> (contexts, answer ids)``: the backend token ids the ``openai-chat`` emulator conditions
    each answer position on (the adapter's own chat wrapping of question + answer so far)."""
    from blackbox_audit.adapters import load_target
    from blackbox_audit.sim.emulator.backend import ModelView
    from blackbox_audit.sim.emulator.chat import chat_prompt_ids

    view = ModelView(backend)
    with emulator(view, "openai-chat", model=PRICE_MODEL) as emu:  # to read the adapter's own conditioning
        api = load_target(emu.target_spec, tokenizer=tokenizer, cache=None)
        cond, table = api.cond, api.table
        api.close()

    def contexts_of(it: Item) -> tuple[list[list[int]], list[int]]:
        pre, ids = table.encode(it.prompt), table.encode(it.output)
        ctxs = [chat_prompt_ids(view.tokenize, cond.messages(table.decode(pre + ids[:j]))) for j in range(len(ids))]
        return ctxs, ids

    return contexts_of


def truth_pass(spec: str, tokenizer: str, items: list[Item], path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Per item and answer position, what the openai-chat emulator answers there, from the backend
    itself: the true token's clean logprob, the top-20 list (descending) and the billed prompt
    tokens of a request at that position (the chat-rendered context). Kept in ``path`` (npz)."""

    rows: dict[str, dict[str, np.ndarray]] = {}
    if path.is_file():
        with np.load(path) as z:
            for k in z.files:
                i, _, f = k.rpartition("/")
                rows.setdefault(i, {})[f] = z[k]
    todo = [it for it in items if it.id not in rows]
    if not todo:
        return rows
    backend = load_backend(spec)
    contexts_of = chat_contexts(backend, tokenizer)

    def save() -> None:
        flat = {f"{i}/{f}": v for i, r in rows.items() for f, v in r.items()}
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **flat)
        tmp.replace(path)

    t0 = time.perf_counter()
    for k, it in enumerate(todo):
        ctxs, ids = contexts_of(it)
        lp, top = [], []
        # one call per item: its contexts share all but their last tokens and run packed (adapters/hf_packing.py)
        mat = np.asarray(backend.next_token_logprobs(ctxs), dtype=np.float64)
        for row, t in zip(mat, ids, strict=True):
            lp.append(float(row[t]))
            top.append(-np.sort(-np.partition(row, -TOP_N)[-TOP_N:]))
        rows[it.id] = {
            "lp": np.asarray(lp),
            "top": np.asarray(top, dtype=np.float64).reshape(len(lp), TOP_N),
            "n_ctx": np.asarray([len(c) for c in ctxs], dtype=np.int64),
        }
        if k % 20 == 19 or k == len(todo) - 1:
            save()
            print(f"  truth: {k + 1}/{len(todo)} items, {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def _hit(t: dict[str, np.ndarray]) -> np.ndarray:
    """Positions whose true token is in the top-20 list (answered by the one unbiased read)."""
    return t["lp"] >= t["top"][:, -1]


def recovery_cost(t: dict[str, np.ndarray], keep: np.ndarray, b: float, price) -> tuple[np.ndarray, float]:
    """Requests per kept position (one top-20 read, plus ``b`` bisection requests where the true token
    is outside the top 20) and their USD, each billed at its context's prompt tokens + 1 completion."""
    reqs = 1.0 + np.where(_hit(t)[keep], 0.0, b)
    return reqs, float(np.sum(reqs * (t["n_ctx"][keep] * price.prompt + price.completion)) / 1e6)


#: misses a plan's own items must show before their bisection requests per miss replace full recovery's
MIN_MISSES = 20


def full_recovery_rows(
    truth, items: list[Item], real: dict[str, dict[str, Any]], price, plan: Any = None, fallback: float | None = None
) -> tuple[dict, dict]:
    """The ``loss`` plan's per-item rows from the white-box truth: its score is the exact loss (what
    recovery converges to, within 0.01 nats per position), its cost one top-20 read per position
    plus ``b`` bisection requests per position outside the top 20, each billed at its context's
    prompt tokens + 1 completion token; ``b`` is measured on the items scored for real (``real``),
    and the modelled cost is checked against their billed cost. ``fallback``: the ``b`` to use when
    those items show fewer than ``MIN_MISSES`` positions outside the top 20 (too few to measure it)."""
    done = [it for it in items if it.id in real]
    if not done:
        raise SystemExit("no item was scored for real under loss: run with --loss-real >= 1")
    bis = sum(real[it.id]["bisected"] for it in done)
    extra = sum(real[it.id]["requests"] - real[it.id]["positions"] for it in done)
    b = extra / bis if bis else 0.0
    if fallback is not None and bis < MIN_MISSES:
        b = fallback

    from blackbox_audit.reads import parse_positions

    sample = None if plan is None else parse_positions(plan.positions)

    def row(it: Item) -> dict[str, Any]:
        t = truth[it.id]
        keep = np.arange(len(t["lp"])) if sample is None else sample.select(len(t["lp"]), it.output)
        reqs, usd = recovery_cost(t, keep, b, price)
        hit = _hit(t)[keep]
        return {
            "score": float(np.mean(t["lp"][keep])),
            "usd": usd,
            "requests": float(reqs.sum()),
            "positions": len(reqs),
            "bisected": int((~hit).sum()),
            "modelled": True,
        }

    rows = {it.id: row(it) for it in items}
    return rows, _check(rows, real, done, bisection_requests_per_miss=b, misses=bis)


def _check(rows, real, done, **extra) -> dict[str, Any]:
    """Modelled against real (through the emulator) on the items ``done``."""
    return {
        "items": len(done),
        **extra,
        "usd_modelled_over_billed": sum(rows[it.id]["usd"] for it in done) / sum(real[it.id]["usd"] for it in done),
        "requests_modelled_over_sent": sum(rows[it.id]["requests"] for it in done)
        / sum(real[it.id]["requests"] for it in done),
        "max_abs_score_diff": max(abs(rows[it.id]["score"] - real[it.id]["score"]) for it in done),
    }


def cheap_rows(truth, items: list[Item], plan: Any, price) -> dict[str, dict[str, Any]]:
    """A top-n plan's per-item rows from the white-box truth: the registered score applied to the
    record the API read builds (the kept positions, each with its top-20 list: exact inside, censored
    outside), one request per kept position, billed at its context's prompt tokens + 1 completion."""
    from blackbox_audit.reads import parse_positions
    from blackbox_audit.scores.censored import censor
    from blackbox_audit.scores.registry import get_score
    from blackbox_audit.types import Status, Strategy, TokenLogprobs

    score = get_score(plan.score)
    params = dict(score.defaults)
    sample = parse_positions(plan.positions if plan.positions not in (None, "all") else None)
    out = {}
    for it in items:
        t = truth[it.id]
        n = len(t["lp"])
        keep = np.arange(n) if sample is None else sample.select(n, it.output)
        rec = TokenLogprobs(
            text=it.output,
            token_ids=np.zeros(len(keep), dtype=np.int64),
            tokens=[""] * len(keep),
            logprobs=t["lp"][keep],
            status=[Status.EXACT] * len(keep),
            error_bound=np.zeros(len(keep)),
            strategy=[Strategy.TOP_N] * len(keep),
            top_logprobs=t["top"][keep],
        )
        view = censor(rec, int(params.get("n", TOP_N)))
        out[it.id] = {
            "score": score.reduce(view, params) if len(view) else float("nan"),
            "usd": float(np.sum(t["n_ctx"][keep] * price.prompt + price.completion) / 1e6),
            "requests": float(len(keep)),
            "positions": int(len(keep)),
            "bisected": 0,
            "miss": int((~view.in_top).sum()),
            "modelled": True,
        }
    return out


# ----------------------------------------------------------------------------- simulation
def orders_for(canary: str, members: list[Item], never: list[Item], n_orders: int, seed: int):
    """Per order: (benchmark ids, held-out ids) in buying order, interleaved (side, id) list."""
    from blackbox_audit.methods.contamination import interleave

    out = []
    for o in range(n_orders):
        rng = np.random.default_rng([seed, 77, o])
        if canary == "tiny":  # the 200 members against the canary's 200 non-members, each shuffled
            bench = [members[i].id for i in rng.permutation(len(members))]
            held = [never[i].id for i in rng.permutation(len(members))]
        else:
            perm = rng.permutation(len(never))
            n_m = len(members)
            bench_ids = [m.id for m in members] + [never[i].id for i in perm[:n_m]]
            held_ids = [never[i].id for i in perm[n_m:]]
            bench = [bench_ids[i] for i in rng.permutation(len(bench_ids))]
            held = [held_ids[i] for i in rng.permutation(len(held_ids))]
        order = [(s, (bench, held)[s][i]) for s, i in interleave(len(bench), len(held))]
        out.append(order)
    return out


def fixed_budget(orders, rows, alpha: float, grid: np.ndarray, target: float = 0.8) -> tuple[float, dict[float, float]]:
    """Smallest budget on ``grid`` at which the fixed-sample rank test on the items bought flags
    >= ``target`` of orders (inf if none), by bisection on the grid (the flag rate grows with the
    budget); and the flag rates evaluated."""
    from scipy.stats import mannwhitneyu

    prepared = []
    for order in orders:
        cost = np.cumsum([rows[i]["usd"] for _, i in order])
        side = np.asarray([s for s, _ in order])
        score = np.asarray([rows[i]["score"] for _, i in order])
        prepared.append((cost, side, score))

    def rate(b: float) -> float:
        flags = 0
        for cost, side, score in prepared:
            n = int(np.searchsorted(cost, b + 1e-12, side="right"))
            xs, ys = score[:n][side[:n] == 0], score[:n][side[:n] == 1]
            if len(xs) >= 5 and len(ys) >= 5:
                flags += mannwhitneyu(xs, ys, alternative="greater").pvalue < alpha
        return flags / len(prepared)

    seen: dict[float, float] = {}
    lo, hi = 0, len(grid) - 1
    seen[float(grid[hi])] = rate(float(grid[hi]))
    if seen[float(grid[hi])] < target:
        return math.inf, seen
    while lo < hi:
        mid = (lo + hi) // 2
        seen[float(grid[mid])] = rate(float(grid[mid]))
        if seen[float(grid[mid])] >= target:
            hi = mid
        else:
            lo = mid + 1
    return float(grid[hi]), seen


def sequential_spend(orders, rows, design, chunk: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per order: the spend when the e-process crossed (inf if it never did) and when it stopped.
    ``chunk``: items bought per call (``--batch`` buys ``purchase.BATCH_CHUNK``), so a run that settles
    inside a chunk has paid for all of it."""
    from blackbox_audit.methods.contamination.sequential import SequentialRankTest

    cross, stop = [], []
    for order in orders:
        test = SequentialRankTest(design)
        cost = np.cumsum([rows[i]["usd"] for _, i in order])
        n = len(order)
        for s, i in order:
            if test.add(s, rows[i]["score"]) != "continue":
                break
        bought = len(test.values)
        spent = float(cost[min(n, -(-bought // chunk) * chunk) - 1]) if bought else 0.0
        cross.append(spent if test.state == "contaminated" else math.inf)
        stop.append(spent)
    return np.asarray(cross), np.asarray(stop)


def union_read_usd(truth, items: list[Item], plans: list[Any], price, b: float) -> dict[str, float]:
    """Per item, the USD of one read that recovers every position any of ``plans`` keeps: what a pilot
    pays to score each of them from one read (full recovery's cost model on the union of
    their positions, ``b`` bisection requests per miss: ``recovery_cost``)."""
    from blackbox_audit.reads import parse_positions

    samples = [parse_positions(pl.positions) for pl in plans]
    out = {}
    for it in items:
        t = truth[it.id]
        n = len(t["lp"])
        keep = np.unique(np.concatenate([np.asarray(s.select(n, it.output), dtype=np.int64) for s in samples]))
        out[it.id] = recovery_cost(t, keep, b, price)[1]
    return out


def oracle_pilot_spend(orders, rows, pilot_usd: dict[str, float], k: int, design) -> np.ndarray:
    """Per order: the spend at which a run crosses when it first reads the first ``k`` items of each side
    at ``pilot_usd`` (left out of the test), then tests the rest with ``rows``' plan: the plan an oracle
    pilot would choose, so no pilot of ``k`` items per side and that read can do better."""
    pilots, rests = [], []
    for order in orders:
        firsts = [[i for s, i in order if s == side][:k] for side in (0, 1)]
        left_out = set(firsts[0]) | set(firsts[1])
        pilots.append(sum(pilot_usd[i] for i in left_out))
        rests.append([(s, i) for s, i in order if i not in left_out])
    cross, _ = sequential_spend(rests, rows, design)
    return cross + np.asarray(pilots)


def at_batch_price(rows: dict[str, dict[str, Any]], share: float, *, rounds: bool = True) -> dict[str, dict[str, Any]]:
    """Per-item rows re-priced for ``--batch``. ``rounds`` (the default, ``--batch-rounds all``): every
    request in a provider batch at ``share`` of the price, one batch per round of the searches
    (``engine.batch_rounds``; the one text a run recovers direct first is left out: one item per run).
    Without: each position's first request in the batch, the bisection rounds after it direct at the list
    price; every request of one position resends the same context, so each is taken to cost the same."""
    out = {}
    for i, v in rows.items():
        batched = 1.0 if rounds else (v["positions"] / v["requests"] if v["requests"] else 0.0)
        out[i] = {**v, "usd": v["usd"] * (1.0 - (1.0 - share) * batched)}
    return out


def batch_check(
    spec: str, tokenizer: str, first: Item, items: list[Item], plan: Any, work: Path, rows, share: float
) -> dict:
    """``items`` scored under ``plan`` through the emulator in one call with ``--batch`` (rounds batched), as
    the check buys one chunk after its first call: billed USD against the modelled rows at the batch price,
    requests against the modelled ones, batches bought (one per round), and the largest score difference.
    ``first`` is scored before, in a call of its own and not measured: a run's first text is recovered
    direct, once per run, to teach the searches where to aim."""
    from blackbox_audit.scores.output import compute_output_scores

    kw = {} if plan.positions in (None, "all") else {"positions": plan.positions}
    with tempfile.TemporaryDirectory() as tmp, emulator(spec, "openai-chat", model=PRICE_MODEL) as emu:
        ws = open_workspace(tmp, pricing=str(work / "pricing.json"), concurrency=CONCURRENCY, batch=True)
        try:
            target = ws.load_target(emu.target_spec, tokenizer=tokenizer)
            compute_output_scores(target, [first.prompt], [first.output], [plan.score], progress=False, **kw)
            usd0 = target.engine.stats.cost_usd  # after the probe and the first text: neither is this call's
            sent0 = direct_model_requests(emu)
            batches0 = len(target.usage()["batches"])
            table = compute_output_scores(
                target, [it.prompt for it in items], [it.output for it in items], [plan.score], progress=False, **kw
            )
            usage = target.usage()
            billed = target.engine.stats.cost_usd - usd0
            direct = direct_model_requests(emu) - sent0
        finally:
            ws.close()
    call = usage["batches"][batches0:]
    batched = sum(b["requests"] for b in call)
    modelled = at_batch_price({it.id: rows[it.id] for it in items}, share)
    return {
        "plan": plan.key,
        "items": len(items),
        "rounds": usage["batch_rounds"][-1],
        "usd_modelled_over_billed": sum(modelled[it.id]["usd"] for it in items) / billed if billed else math.nan,
        "requests_modelled_over_sent": sum(rows[it.id]["requests"] for it in items) / (batched + direct),
        "batches": len(call),
        "batched_requests": batched,
        "direct_requests": direct,
        "max_abs_score_diff": float(
            max(abs(float(s) - rows[it.id]["score"]) for s, it in zip(table[plan.score], items, strict=True))
        ),
    }


def clean_flags(pool_ids: list[str], rows, n_side: int, redraws: int, design, seed: int) -> tuple[float, float, float]:
    """Flag rate (and SE) of the sequential test over redraws of a clean pool; median items bought."""
    from blackbox_audit.methods.contamination import interleave
    from blackbox_audit.methods.contamination.sequential import SequentialRankTest

    flags, bought = 0, []
    for r in range(redraws):
        rng = np.random.default_rng([seed, 99, r])
        perm = [pool_ids[i] for i in rng.permutation(len(pool_ids))]
        bench, held = perm[:n_side], perm[n_side : 2 * n_side]
        test = SequentialRankTest(design)
        n = 0
        for s, i in interleave(len(bench), len(held)):
            n += 1
            if test.add(s, rows[(bench, held)[s][i]]["score"]) != "continue":
                break
        flags += test.state == "contaminated"
        bought.append(n)
    rate = flags / redraws
    se = math.sqrt(max(rate * (1 - rate), design.alpha * (1 - design.alpha)) / redraws)
    return rate, se, float(np.median(bought))


def dry_run_choices(
    spec: str, tokenizer: str, bench: list[Item], held: list[Item], budgets: np.ndarray, work: Path, batch: bool
) -> dict[str, list[str]]:
    """The plan ``--score auto`` chooses at each budget, read from the product's own dry-run (the Python
    API's ``plan()``, nothing sent) on these sides: ``worst_case`` is the shipped rule (the plan nearest
    the best on every calibration canary), ``lowest_auc`` the rule before it (each plan's lowest AUC over
    the canaries, the first canary's costs), both chosen among the same priced rows."""
    import blackbox_audit as ba
    from blackbox_audit.benchmarks import GSM8K_FILE, _read_jsonl, package_data
    from blackbox_audit.methods.contamination.score_plans import choose

    raw = _read_jsonl(package_data(GSM8K_FILE))
    files = []
    for name, items in (("bench", bench), ("held", held)):
        path = work / f"dry-run-{name}.jsonl"
        path.write_text("".join(json.dumps(raw[int(it.id.rsplit("-", 1)[1])]) + "\n" for it in items))
        files.append(str(path))
    out: dict[str, list[str]] = {"worst_case": [], "lowest_auc": []}
    with emulator(spec, "openai-chat", model=PRICE_MODEL) as emu:
        for budget in budgets:
            opts = {"cache_dir": work / "dry-run-cache", "pricing": str(work / "pricing.json"), "batch": batch}
            with ba.Session(progress=False, budget_usd=float(budget), **opts) as session:
                target = ba.target(emu.target_spec, tokenizer=tokenizer)
                planned = session.audit("contamination", target=target, benchmark=files[0], heldout=files[1]).plan()
            choice = next(iter(planned.priced.values())).choice
            out["worst_case"].append(choice.chosen.plan.key)
            rows = [replace(r, by_canary=(), worst_ratio=None) for r in choice.rows]
            out["lowest_auc"].append(
                choose(rows, budget_usd=float(budget), calibration=choice.calibration).chosen.plan.key
            )
    return out


def budget80(cross: np.ndarray) -> float:
    """The budget at which >= 80% of orders have flagged (their wealth crossed), inf if fewer ever do."""
    return float(np.quantile(cross, 0.8)) if np.isfinite(cross).mean() >= 0.8 else math.inf


def default_budget80(choices: list[str], budgets: np.ndarray, cross: dict[str, np.ndarray]) -> tuple[float, str]:
    """The smallest budget at which the plan the dry-run chooses there flags >= 80% of orders (sequential
    test: a run flags at budget B when its wealth crossed before B was spent), and that plan. Between two
    grid budgets with the same choice the choice is taken to hold, so the answer is that plan's own B80
    where it falls inside such a stretch."""
    for k, (budget, key) in enumerate(zip(budgets, choices, strict=True)):
        own = budget80(cross[key]) if key in cross else math.inf
        if not math.isfinite(own):
            continue
        start = float(budgets[k - 1]) if k and choices[k - 1] == key else float(budget)
        if max(start, own) <= budget + 1e-12:
            return max(start, own), key
    return math.inf, ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--canary", choices=("tiny", "smollm2"), default="tiny")
    p.add_argument("--plans", default=DEFAULT_PLANS, help="comma-separated plan keys (score or score@positions)")
    p.add_argument("--clean-plans", help="plans run on the clean model (default: every plan)")
    p.add_argument("--orders", type=int, default=200, help="seeded buying orders (default 200)")
    p.add_argument("--redraws", type=int, default=50, help="clean-model redraws (>= 20; default 50)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--epochs", type=int, help=f"canary epochs (default: tiny {TINY_EPOCHS}, smollm2 its default)")
    p.add_argument("--price-as", default="gpt-4o-mini")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", help="canary cache (default $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    p.add_argument(
        "--work", help="per-item tables and the request cache (default: a folder per canary in the temp dir)"
    )
    p.add_argument(
        "--write-calibration",
        action="store_true",
        help="write methods/contamination/plan_calibration.json (tiny: the first canary; smollm2: joins it, "
        "each plan's lowest AUC "
        "counts)",
    )
    p.add_argument("--calibration-plans", default=CALIBRATION_PLANS, help="the plans written to the calibration")
    p.add_argument(
        "--loss-real",
        type=int,
        default=6,
        help="items recovered through the emulator under loss (the rest from white-box truth, module doc); "
        "a number >= the items audited recovers all of them (slow: ~7 requests per answer token)",
    )
    p.add_argument(
        "--check-real",
        type=int,
        default=4,
        help="items scored for real through the emulator under each top-n plan, to check its modelled rows",
    )
    p.add_argument(
        "--calib-real",
        type=int,
        default=12,
        help="items scored for real under each sampled loss plan to measure its own bisection requests per miss "
        "(0: use full recovery's)",
    )
    p.add_argument(
        "--check-batch",
        type=int,
        default=32,
        help="items scored through the emulator in one --batch call (rounds batched; 32 = one call of the check) "
        "under the plan the default chooses with --batch, after one item scored first, to check the modelled "
        "batch price (0: skip)",
    )
    p.add_argument(
        "--chat-trained-epochs",
        type=int,
        default=0,
        help="smollm2 only: audit SmolLM2 fine-tuned for N epochs on the members in the chat form the emulator reads "
        "(bench/chat_canary.py) instead of the plain-text canary, whose members a chat API does not show; 0 = off",
    )
    p.add_argument("--chat-lr", type=float, default=3e-4, help="learning rate of --chat-trained-epochs (3e-4)")
    p.add_argument(
        "--oracle-pilot",
        default="",
        help="comma-separated pilot sizes K (items per side): the B80 of a run whose pilot reads K items per side "
        "with one read of the union of the sampled loss plans' positions, left out of the test, and then tests "
        "the rest with the best of them, chosen as an oracle would (a bound on any such pilot; empty: skip)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--default-budgets",
        type=int,
        default=16,
        help="budgets on which the dry-run's own --score auto choice is read, for the default's B80 (0: skip)",
    )
    p.add_argument(
        "--emulator",
        action="append",
        default=[],
        metavar="SPEC=URL",
        help="score SPEC (hf:DIR of the canary, or smollm2) on an emulator already serving it at URL "
        f"(`blackbox-audit emulate --backend SPEC --model {PRICE_MODEL}`): a second process, a second core",
    )
    a = p.parse_args(argv)
    for pair in a.emulator:
        spec_, _, url_ = pair.partition("=")
        EMULATOR_URLS[spec_] = url_.rstrip("/")
    if a.redraws < 20:
        p.error("--redraws must be at least 20")
    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.engine import PricingTable
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
    from blackbox_audit.methods.contamination.purchase import BATCH_CHUNK
    from blackbox_audit.methods.contamination.score_plans import ScorePlan

    command = announce(argv)
    plans = [ScorePlan.from_key(k) for k in a.plans.split(",")]
    if plans[0].key != "loss":
        plans.insert(0, ScorePlan("loss"))
    clean_keys = a.clean_plans.split(",") if a.clean_plans else [pl.key for pl in plans]
    work = Path(a.work or Path(tempfile.gettempdir()) / f"power_per_dollar-{a.canary}")
    work.mkdir(parents=True, exist_ok=True)
    price = PricingTable.load().get(a.price_as)
    if price is None:
        raise SystemExit(f"no bundled price for {a.price_as}")
    (work / "pricing.json").write_text(
        json.dumps(
            {
                "models": {
                    PRICE_MODEL: {
                        "prompt": price.prompt,
                        "cached_prompt": price.cached_prompt,
                        "completion": price.completion,
                        **({} if price.batch is None else {"batch": price.batch}),
                    }
                }
            }
        )
    )
    opts, canary, members, never, spec, clean_spec, tokenizer = canary_setup(a.canary, a.cache_dir, a.epochs)
    key = opts.key()
    if a.chat_trained_epochs:
        if a.canary != "smollm2":
            p.error("--chat-trained-epochs needs --canary smollm2")
        from bench.chat_canary import build_chat_canary

        spec, card = build_chat_canary(
            canary,
            members,
            chat_contexts(load_backend("smollm2"), tokenizer),
            cache_dir=canary.path.parent.parent,
            epochs=a.chat_trained_epochs,
            lr=a.chat_lr,
            seed=a.seed,
        )
        key = f"{key}-chat-{Path(spec.removeprefix('hf:')).parent.name}"
        losses = [round(x, 3) for x in card["train_loss_per_epoch"]]
        print(f"chat-trained canary: {spec} (train loss per epoch {losses})")
    scorer = Scorer(work / f"items-{key}.json")
    if a.canary == "tiny":
        audited = members + never[: len(members)]  # the benchmark and the held-out side (the canary's non-members)
        clean_pool = never[: 2 * len(members)]  # 400 never-trained items, redrawn into two sides of 200
    else:
        audited = members + never
        clean_pool = members + never
    extra = [it for it in clean_pool if it.id not in {x.id for x in audited}]
    truth = truth_pass(spec, tokenizer, audited + extra, work / f"truth-{key}.npz")
    pool = audited + extra
    # full recovery: modelled from the truth, its cost model checked on items recovered for real
    pick = [audited[i] for i in np.random.default_rng([a.seed, 5]).permutation(len(audited))]
    real = [it for it in audited if f"loss|{it.id}" in scorer.rows]
    real += [it for it in pick if it not in real][: max(0, a.loss_real - len(real))]
    real_loss = serve_and_score(spec, tokenizer, real, [ScorePlan("loss")], scorer, work, "canary")["loss"]
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    checks: dict[str, dict[str, Any]] = {}
    # a sampled loss plan bisects its few positions per text with less learned than full recovery does:
    # its requests per miss are measured on its own --calib-real items (not the check's)
    calib = pick[a.check_real : a.check_real + a.calib_real]
    b_of: dict[str, tuple[float, int, int]] = {}  # plan -> (bisection requests per miss, items, misses there)
    for pl in plans:
        if pl.score == "loss":
            own, fallback = real_loss, None
            if pl.key != "loss" and a.calib_real > 0:
                own = serve_and_score(spec, tokenizer, calib, [pl], scorer, work, "calibrate")[pl.key]
                fallback = b_of["loss"][0]
            rows[pl.key], chk = full_recovery_rows(truth, pool, own, price, pl, fallback)
            checks[pl.key] = chk
            b_of[pl.key] = (chk["bisection_requests_per_miss"], chk["items"], chk["misses"])
        else:
            rows[pl.key] = cheap_rows(truth, pool, pl, price)
    # the top-n plans' modelled scores and costs checked on a few items scored for real
    sample = pick[: a.check_real]
    for pl in plans:
        if pl.key != "loss" and a.check_real > 0:
            got = serve_and_score(spec, tokenizer, sample, [pl], scorer, work, "check")[pl.key]
            b, n_b, misses = b_of.get(pl.key, (None, 0, 0))
            extra_b = (
                {} if b is None else {"bisection_requests_per_miss": b, "measured_on_items": n_b, "misses": misses}
            )
            checks[pl.key] = _check(rows[pl.key], got, sample, **extra_b)
    for k_, c in checks.items():
        print(
            f"modelled vs through the emulator, {k_}: {c['items']} items; USD modelled/billed "
            f"{c['usd_modelled_over_billed']:.3f}, requests modelled/sent {c['requests_modelled_over_sent']:.3f}, "
            f"max |score difference| {c['max_abs_score_diff']:.4f}"
            + (
                f"; {c['bisection_requests_per_miss']:.2f} bisection requests per position outside the top 20 "
                + (
                    f"(measured on {c['measured_on_items']} other items, {c['misses']} misses)"
                    if c["misses"] >= MIN_MISSES
                    else f"(full recovery's: {c['measured_on_items']} other items showed only {c['misses']} misses)"
                )
                if "measured_on_items" in c
                else f"; {c['bisection_requests_per_miss']:.2f} bisection requests per position outside the top 20"
                if "bisection_requests_per_miss" in c
                else ""
            )
        )
    loss_check = checks
    clean_plans = [pl for pl in plans if pl.key in clean_keys]
    clean_rows = None
    if clean_spec is not None and clean_plans:
        clean_truth = truth_pass(clean_spec, tokenizer, clean_pool, work / "truth-unmodified-smollm2.npz")
        clean_rows = {
            pl.key: cheap_rows(clean_truth, clean_pool, pl, price)
            if pl.score != "loss"
            else full_recovery_rows(clean_truth, clean_pool, real_loss, price, pl)[0]
            for pl in clean_plans
        }

    design = Contamination(ContaminationConfig(alpha=a.alpha, score="loss")).design()
    orders = orders_for(a.canary, members, never, a.orders, a.seed)
    sides = "200 members (rate 100%)" if a.canary == "tiny" else "64 members + 64 never-trained (rate 50%)"
    held_n = "200" if a.canary == "tiny" else "128"
    print(
        f"{a.canary}: benchmark {sides}, held-out {held_n} never-trained; {a.orders} seeded orders; alpha {a.alpha:g}; "
        f"priced as {a.price_as}; sequential test: {design.to_json()['test'].split(':')[0]}, futility AUC "
        f"{design.futility_auc:.2f} (beta {design.futility_beta:g})"
    )
    table = []
    crossings: dict[str, np.ndarray] = {}
    batch_crossings: dict[str, np.ndarray] = {}
    for pl in plans:
        r = rows[pl.key]
        ids = [it.id for it in audited]
        usd = np.mean([r[i]["usd"] for i in ids])
        req = np.mean([r[i]["requests"] for i in ids])
        pos = sum(r[i]["positions"] for i in ids)
        miss = sum(r[i].get("miss", r[i]["bisected"]) for i in ids) / pos if pos else 0.0
        item_auc = auc_of([r[m.id]["score"] for m in members], [r[it.id]["score"] for it in audited if not it.member])
        total = sum(r[i]["usd"] for _, i in orders[0])
        grid = np.geomspace(max(usd / 4, 1e-7), total, 80)
        b_fixed, _ = fixed_budget(orders, r, a.alpha, grid)
        cross, stop = sequential_spend(orders, r, design)
        crossings[pl.key] = cross
        b_seq = budget80(cross)
        if price.batch is not None:
            cross_b, _ = sequential_spend(orders, at_batch_price(r, price.batch), design, chunk=BATCH_CHUNK)
            batch_crossings[pl.key] = cross_b
            b_seq_batch = budget80(cross_b)
            first_b, _ = sequential_spend(
                orders, at_batch_price(r, price.batch, rounds=False), design, chunk=BATCH_CHUNK
            )
            b_seq_first = budget80(first_b)
        else:
            b_seq_batch = b_seq_first = math.inf
        table.append(
            {
                "plan": pl.key,
                "requests_per_item": float(req),
                "usd_per_item": float(usd),
                "miss_share": miss,
                "item_auc": item_auc,
                "budget80_fixed": b_fixed,
                "budget80_sequential": b_seq,
                "budget80_sequential_batch": b_seq_batch,
                "budget80_sequential_batch_first": b_seq_first,
                "flagged_sequential": float(np.isfinite(cross).mean()),
                "median_spend_sequential": float(np.median(stop)),
                "spend_all_items": total,
            }
        )
    base = table[0]["budget80_fixed"]
    print(
        f"{'plan':<24} {'req/item':>9} {'USD/item':>10} {'bisected':>8} {'AUC':>6} {'B80 fixed':>10} "
        f"{'B80 seq':>10} {'B80 batch':>10} {'B80 b.1st':>10} {'seq flags':>9} {'median stop $':>13} {'ratio':>7}"
    )
    for t in table:
        ratio = base / t["budget80_sequential"] if math.isfinite(t["budget80_sequential"]) else 0.0
        t["ratio_vs_default_fixed"] = ratio
        print(
            f"{t['plan']:<24} {t['requests_per_item']:>9.1f} {t['usd_per_item']:>10.5f} {t['miss_share']:>8.1%} "
            f"{t['item_auc']:>6.3f} {_usd(t['budget80_fixed']):>10} {_usd(t['budget80_sequential']):>10} "
            f"{_usd(t['budget80_sequential_batch']):>10} {_usd(t['budget80_sequential_batch_first']):>10} "
            f"{t['flagged_sequential']:>9.0%} {_usd(t['median_spend_sequential']):>13} {ratio:>7.1f}x"
        )
    print(
        "B80: the budget at which the benchmark is flagged in >= 80% of orders (fixed: one rank test on the items "
        "bought; seq: the sequential test with stopping and futility on; batch: the same with --batch, every "
        f"request at {price.batch} of the price, one batch per round; b.1st: --batch-rounds first, each position's "
        f"first request at {price.batch} of the price, bisection direct; both {BATCH_CHUNK} items per call); "
        "ratio: loss fixed-sample B80 / plan sequential B80; every USD figure excludes the one-off probe"
    )
    defaults = {}
    if a.default_budgets:
        usd_all = [t["spend_all_items"] for t in table]
        budgets = np.geomspace(min(t["usd_per_item"] for t in table) * 4, max(usd_all), a.default_budgets)
        first = orders[0]
        bench_ids = [i for s_, i in first if s_ == 0]
        held_ids = [i for s_, i in first if s_ == 1]
        by_id = {it.id: it for it in audited + extra}
        sides = ([by_id[i] for i in bench_ids], [by_id[i] for i in held_ids])
        chosen = {
            f"{rule}{' --batch' if batch else ''}": keys
            for batch in ((False, True) if price.batch is not None else (False,))
            for rule, keys in dry_run_choices(spec, tokenizer, *sides, budgets, work, batch).items()
        }
        for rule, keys in chosen.items():
            batch = rule.endswith("--batch")
            field = "budget80_sequential_batch" if batch else "budget80_sequential"
            best = min(t[field] for t in table)
            b80, key = default_budget80(keys, budgets, batch_crossings if batch else crossings)
            ratio = base / b80 if math.isfinite(b80) else 0.0
            defaults[rule] = {
                "budget80_sequential": b80,
                "plan_at_budget80": key,
                "ratio_vs_default_fixed": ratio,
                "best_plan_budget80_over_this": best / b80 if math.isfinite(b80) else 0.0,
                "plans_chosen": sorted(set(keys)),
            }
            print(
                f"default --score auto, rule {rule}: B80 seq {_usd(b80)} (plan chosen there: {key or '-'}); "
                f"loss fixed-sample B80 / this {ratio:.1f}x; best plan's B80 / this "
                f"{defaults[rule]['best_plan_budget80_over_this']:.2f}; "
                f"plans chosen on the grid: {', '.join(sorted(set(keys)))}"
            )
        print(
            f"  (the dry-run's choice at each of {a.default_budgets} budgets from {_usd(budgets[0])} to "
            f"{_usd(budgets[-1])}, on the first order's sides; its budget includes the one-off probe, the B80s above "
            "do not)"
        )
    from blackbox_audit.engine.batch_rounds import MIN_BATCH

    batch_checked = None
    plan_key = (defaults.get("worst_case --batch") or {}).get("plan_at_budget80")
    by_chunk = {}
    if plan_key and price.batch is not None:  # what the items per --batch call cost the default's plan
        for chunk in sorted({16, BATCH_CHUNK, 64}):
            cross_c, _ = sequential_spend(orders, at_batch_price(rows[plan_key], price.batch), design, chunk=chunk)
            by_chunk[chunk] = budget80(cross_c)
        print(
            f"--batch B80 of {plan_key} by items per call: "
            + ", ".join(f"{c}{' (the check)' if c == BATCH_CHUNK else ''}: {_usd(b)}" for c, b in by_chunk.items())
        )
    if a.check_batch > 0 and price.batch is not None and plan_key:
        pl = next(p_ for p_ in plans if p_.key == plan_key)
        start = a.check_real + a.calib_real  # items neither checked nor calibrated on
        check_items = pick[start + 1 : start + 1 + a.check_batch]
        batch_checked = batch_check(spec, tokenizer, pick[start], check_items, pl, work, rows[pl.key], price.batch)
        c = batch_checked
        r = c["rounds"]
        b80 = defaults["worst_case --batch"]["budget80_sequential"]
        c["budget80_corrected"] = b80 / c["usd_modelled_over_billed"]
        print(
            f"modelled vs through the emulator with --batch (rounds batched), {c['plan']}: {c['items']} items in one "
            f"call after a first call of one item; USD modelled/billed {c['usd_modelled_over_billed']:.3f}, requests "
            f"modelled/sent {c['requests_modelled_over_sent']:.3f}; {r['rounds']} rounds: {c['batches']} batches "
            f"holding {c['batched_requests']} requests, {r['direct_rounds']} rounds of fewer than {MIN_BATCH} "
            f"requests sent direct ({c['direct_requests']} requests); max |score difference| "
            f"{c['max_abs_score_diff']:.4f}; the default's --batch B80 scaled by billed/modelled: "
            f"{_usd(c['budget80_corrected'])}, loss fixed-sample B80 / this {base / c['budget80_corrected']:.1f}x"
        )
    oracle = []
    if a.oracle_pilot:
        sampled = [pl for pl in plans if pl.score == "loss" and pl.positions not in (None, "all")]
        by_key = {t["plan"]: t for t in table}
        best_all = min(t["budget80_sequential"] for t in table)
        best = min(sampled, key=lambda pl: by_key[pl.key]["budget80_sequential"])
        runner_up = min(
            (pl for pl in sampled if pl.key != best.key), key=lambda pl: by_key[pl.key]["budget80_sequential"]
        )
        b = b_of["loss"][0]
        for label, reads in (
            (f"every sampled loss plan ({len(sampled)})", sampled),
            (f"the two best, {best.key} and {runner_up.key}", [best, runner_up]),
        ):
            usd = union_read_usd(truth, audited, reads, price, b)
            per_item = float(np.mean([usd[it.id] for it in audited]))
            for k in (int(x) for x in a.oracle_pilot.split(",")):
                b80 = budget80(oracle_pilot_spend(orders, rows[best.key], usd, k, design))
                share = best_all / b80 if math.isfinite(b80) else 0.0
                oracle.append(
                    {"read": label, "k": k, "usd_per_item": per_item, "budget80": b80, "best_over_this": share}
                )
                print(
                    f"oracle pilot, {k} items per side read once for {label} (${per_item:.5f} an item), then "
                    f"{best.key} on the rest: B80 {_usd(b80)}; best plan's B80 / this {share:.2f}"
                )
    clean = []
    for pl in clean_plans:
        src = rows[pl.key] if clean_rows is None else clean_rows[pl.key]
        pool = [it.id for it in clean_pool]
        n_side = 200 if a.canary == "tiny" else 128
        rate, se, med = clean_flags(pool, src, n_side, a.redraws, design, a.seed)
        ok = "yes" if rate <= a.alpha + 2 * se else "NO"
        model = "canary, never-trained items" if a.canary == "tiny" else "unmodified SmolLM2"
        print(
            f"clean ({model}), {pl.key}: flagged {rate:.3f} ± {se:.3f} (SE) of {a.redraws} redraws of {n_side} + "
            f"{n_side} from {len(pool)} items, sequential with futility; <= alpha + 2 SE: {ok}; median items bought "
            f"{med:.0f}"
        )
        clean.append({"plan": pl.key, "flag_rate": rate, "se": se, "median_items": med, "redraws": a.redraws})
    out = work / f"summary-{a.canary}.json"
    out.write_text(
        json.dumps(
            stamped(
                {
                    "plans": table,
                    "default": defaults,
                    "clean": clean,
                    "loss_check": loss_check,
                    "batch_check": batch_checked,
                    "batch_budget80_by_items_per_call": by_chunk,
                    "oracle_pilot": oracle,
                },
                argv,
            ),
            indent=2,
        )
    )
    print(f"summary: {out}")
    if a.write_calibration:
        write_calibration(table, a, canary, command, key.partition("-chat-")[2])
    return 0


def _usd(x: float) -> str:
    return "never" if not math.isfinite(x) else f"${x:.4f}"


def portable_command(command: str) -> str:
    """``command`` with its scratch folders as placeholders: the shipped calibration file names no
    folder of the machine that wrote it (``--cache-dir CACHE_DIR``, ``--work WORK_DIR``)."""
    import re

    for flag, name in (("--cache-dir", "CACHE_DIR"), ("--work", "WORK_DIR")):
        command = re.sub(rf"{flag}(?:=|\s+)\S+", f"{flag} {name}", command)
    return command


def write_calibration(
    table: list[dict[str, Any]], a: argparse.Namespace, canary: Any, command: str, chat_key: str = ""
) -> None:
    import datetime

    from blackbox_audit.methods.contamination.score_plans import CALIBRATION_FILE
    from blackbox_audit.results.provenance import git_revision

    data = {
        "_comment": "per-item AUC (members vs never-trained items) and cost of each contamination score plan, "
        "measured by bench/power_per_dollar.py; read by methods/contamination/score_plans.py",
        "source": {
            "canary": f"GSM8K {a.canary} canary ({canary.card['sizes']}, epochs {canary.card.get('epochs')}, "
            f"build {canary.card.get('build_id')})" + (f", chat-trained {chat_key}" if chat_key else ""),
            "profile": "openai-chat",
            "price_as": a.price_as,
            "command": portable_command(command),
            "git_revision": {k: v for k, v in (git_revision() or {}).items() if k != "source"},
            "date": datetime.date.today().isoformat(),
        },
        "plans": {
            t["plan"]: {
                "item_auc": round(t["item_auc"], 4),
                "miss_share": round(t["miss_share"], 4),
                "requests_per_item": round(t["requests_per_item"], 2),
                "usd_per_item": round(t["usd_per_item"], 7),
            }
            for t in table
            if t["plan"] in a.calibration_plans.split(",")
        },
    }
    old = json.loads(CALIBRATION_FILE.read_text(encoding="utf-8")) if CALIBRATION_FILE.is_file() else {}
    if a.canary == "tiny" and a.epochs in (None, TINY_EPOCHS):  # the first canary (its costs place the
        data["more"] = old.get("more", [])  # dry-run's ranges); the others are kept
    else:  # another canary (SmolLM2, a tiny one of other epochs) joins the first, replacing its own entry
        more = [m for m in old.get("more", []) if m.get("source", {}).get("canary") != data["source"]["canary"]]
        entry = {"source": data["source"], "plans": data["plans"]}
        data = {**old, "more": [*more, entry]}
    CALIBRATION_FILE.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"calibration written: {CALIBRATION_FILE}")


if __name__ == "__main__":
    sys.exit(main())
