"""The verdict of the test against known non-members, read on the items the budget bought.

Four numbers (``check`` module doc): the dataset-level test (the fixed-sample rank test, or the
sequential e-process when the purchase stopped on it), the contamination rate's one-sided lower
confidence bound, PTDI's FDR-controlled list of flagged items, and PAC's thresholded rate beside
them; with the premise check (can a text-only classifier tell the sides apart?) and the power at the
sizes bought. Fewer than ``MIN_ITEMS`` items per side: ``inconclusive``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blackbox_audit.benchmarks import Benchmark
from blackbox_audit.blind import CONFOUNDED_AUC
from blackbox_audit.engine.errors import answers_note
from blackbox_audit.methods.base import AuditInputs
from blackbox_audit.methods.ptdi import fdp_and_power, select
from blackbox_audit.results import MethodResult, Verdict

from .power import format_power, power_statement
from .purchase import Purchase, item_size
from .sequential import SequentialRankTest
from .sides import SideScores
from .stats import ShareBound, member_share_lower_bound, pac_style_rate, rank_test

#: fewest items per side the statistics are computed on (below it the verdict is "inconclusive")
MIN_ITEMS = 5


def known_result(
    known: Any,
    inputs: AuditInputs,
    full_bench: Benchmark,
    sides: tuple[Benchmark, Benchmark],
    scored: tuple[SideScores, SideScores],
    purchase: Purchase,
    seq: SequentialRankTest | None,
    part: str,
) -> MethodResult:
    """The result of ``known`` (a ``known.KnownHeldout``) on the items bought: verdict, rows, summary."""
    from blackbox_audit.metrics import evaluation_metrics

    cfg = known.config
    bench, held = sides
    b, h = scored
    sizes = [
        item_size(src.prompts[i], src.outputs[i], part) for side, i in purchase.order for src in ((bench, held)[side],)
    ]
    bought = purchase.to_json(sizes)
    stopped = purchase.stopped
    labels = None if bench.labels is None else [bench.labels[i] for i in b.order]
    provenance: dict[str, Any] = {
        "contamination": {
            "benchmark": full_bench.describe(),
            "heldout": held.describe(),
            "part": part,
            "score": cfg.score,
            "positions": cfg.positions or "all",
            "budget": bought,
            "sequential": None if seq is None else seq.design.to_json(),
        }
    }
    about = known.describe_score(inputs)
    if about is not None:
        provenance["contamination"]["probe"] = about
    summary: list[str] = spend_lines(bought)
    warnings: list[str] = []
    if stopped:
        warnings.append(
            f"stopped at the budget cap after {len(b.order)} of {len(bench)} benchmark and {len(h.order)} of "
            f"{len(held)} held-out items ({stopped}); the verdict covers the items bought. Re-run with a larger "
            f"cap to extend it ({answers_note(inputs.target)})"
        )
    if len(b.order) < MIN_ITEMS or len(h.order) < MIN_ITEMS:
        verdict = Verdict(
            decision="inconclusive",
            statement=(
                f"only {len(b.order)} benchmark and {len(h.order)} held-out items were scored (at least "
                f"{MIN_ITEMS} each are needed): nothing can be concluded"
            ),
            alpha=cfg.alpha,
            details={"budget": bought},
        )
        return known.new_result(
            ids=b.ids,
            labels=labels,
            scores={cfg.score: b.values},
            fields={"n_tokens": b.n_tokens, "n_bounded": b.n_bounded},
            verdict=verdict,
            extras={"heldout.jsonl": _side_rows(h, cfg.score)},
            provenance=provenance,
            summary=summary,
            warnings=warnings,
        )
    bv, hv = b.values, h.values
    premise = heldout_premise(b, h, cfg.seed)
    if premise.get("confounded"):
        warnings.append(
            f"the held-out items differ from the benchmark by their text alone (blind classifier AUC "
            f"{premise['auc']:.3f} >= {CONFOUNDED_AUC}): the held-out side is not exchangeable with the "
            "benchmark's non-members, so the test, rate and list may measure that difference, not contamination"
        )
    test = rank_test(bv, hv, cfg.alpha)
    # a sequential stop chose its sample size from the data: only the e-process's p-value is valid
    # under that stopping, so the rate bound and the list read on the same items say so
    stopped_note = {"valid_under_stopping": False} if seq is not None and seq.state != "continue" else {}
    if stopped_note:
        warnings.append(
            "the purchase stopped once the verdict was settled: the p-value is the e-process's, valid under that "
            "stopping; the rate bound and the flagged list are read on the items bought, whose number the data "
            "chose, so their stated levels assume a fixed sample"
        )
    share = member_share_lower_bound(bv, hv, confidence=cfg.confidence, population=len(full_bench), lam=cfg.lam)
    rate_text = rate_statement(share)
    sel = select(bv, hv, cfg.alpha, lam=cfg.lam, method="subtraction")
    mask = sel.selected_mask()
    pac = pac_style_rate(bv, hv)
    power = power_statement(len(bv), len(hv), cfg.alpha)
    k = int(mask.sum())
    name = full_bench.name
    outcome = set_test_outcome(test, seq, cfg)
    statement = (
        f"{name} is {'' if outcome['flagged'] else 'not '}distinguishable from known non-members of the same "
        f"distribution ({outcome['test']} p = {outcome['p_value']:.3g}, level {cfg.alpha:g}){outcome['why']}; "
        f"contamination rate {rate_text}; {k} of {len(bv)} items flagged at FDR {cfg.alpha:g}"
    )
    verdict = Verdict(
        decision="contaminated" if outcome["flagged"] else "not detected",
        statement=statement,
        alpha=cfg.alpha,
        p_value=outcome["p_value"],
        estimate={
            "rate_lower_bound": share.lower,
            "rate_ci": [share.lower, share.upper],
            "rate_ci_sides": "one-sided: lower confidence bound, upper end 100%",
            "rate_estimate": share.estimate,
            "confidence": cfg.confidence,
            "n_flagged": k,
            "n_items": len(bv),
        },
        details={
            "dataset_test": outcome["details"],
            "rate": {**share.to_json(), **stopped_note},
            "flagged_list": {**sel.summary(), "rule": "PTDI subtraction + Benjamini-Hochberg", **stopped_note},
            "pac_style": pac,
            "power": power,
            "premise": premise,
            "budget": bought,
            "part": part,
            "score": cfg.score,
            "positions": cfg.positions or "all",
        },
    )
    summary += [
        f"scored {len(bv)} benchmark and {len(hv)} held-out items ({part}, score plan {known.effective_plan.key}; "
        f"AUC benchmark vs held-out {test.auc:.3f})",
        f"dataset-level test ({outcome['test']}): p = {outcome['p_value']:.3g} -> "
        f"{'FLAGGED' if outcome['flagged'] else 'not flagged'} at {cfg.alpha:g}{outcome['why']}",
        f"contamination rate: {rate_text}: members that score like non-members cannot be counted, so scores "
        f"bound the share only from below; PTDI's conservative point estimate {share.estimate:.1%}",
        f"flagged at FDR {cfg.alpha:g}: {k} items (flagged.jsonl)",
        f"premise: benchmark vs held-out by text alone, blind classifier AUC {premise['auc']:.3f} "
        f"({'CONFOUNDED' if premise.get('confounded') else 'about 0.5 is what exchangeable sets give'})",
        f"PAC-style thresholded rate (for comparison only): {pac['rate']:.1%}; WARNING: {pac['warning']}",
        format_power(power),
    ]
    line = known.score_line(bv, hv)
    if line is not None:
        summary.insert(1, line)
    flagged = [
        {
            "id": b.ids[j],
            cfg.score: float(bv[j]),
            "p_value": float(sel.p_values[j]),
            "scaled_p_value": float(sel.scaled_p_values[j]),
        }
        for j in np.lexsort((-bv, sel.p_values))  # most significant first, ties by score
        if mask[j]
    ]
    result = known.new_result(
        ids=b.ids,
        labels=labels,
        scores={cfg.score: bv},
        fields={
            "n_tokens": b.n_tokens,
            "n_bounded": b.n_bounded,
            "p_value": sel.p_values.tolist(),
            "scaled_p_value": sel.scaled_p_values.tolist(),
            "flagged": mask.tolist(),
        },
        verdict=verdict,
        extras={"flagged.jsonl": flagged, "heldout.jsonl": _side_rows(h, cfg.score)},
        provenance=provenance,
        summary=summary,
        warnings=warnings + [w["message"] for w in sel.extra.get("warnings", [])],
    )
    if labels is not None:
        y = np.asarray(labels)
        metrics: dict[str, Any] = evaluation_metrics({cfg.score: bv}, labels) or {}
        fdp, pw = fdp_and_power(mask, y)
        true_rate = float(y.mean())
        metrics["selection"] = {"fdp": float(fdp), "power": None if np.isnan(pw) else float(pw)}
        metrics["rate"] = {"true": true_rate, "covered": bool(share.lower <= true_rate)}
        result.metrics = metrics
        result.summary.append(
            f"labels (evaluation only): true rate {true_rate:.1%} "
            f"({'at or above' if metrics['rate']['covered'] else 'BELOW'} the lower bound), "
            f"flagged list FDP {float(fdp):.3f}"
        )
    return result


def rate_statement(share: ShareBound) -> str:
    """The rate as a person should quote it: a lower bound, never a two-sided interval."""
    scope = "" if share.population == share.n_benchmark else f" of all {share.population} benchmark items"
    return f"at least {share.lower:.1%}{scope} ({share.confidence:.0%} lower confidence bound; upper end 100%)"


def heldout_premise(b: SideScores, h: SideScores, seed: int) -> dict[str, Any]:
    """Can the benchmark be told from the held-out side *without the model*? (``blind.blind_baseline``)

    The set test and the rate assume the held-out items are exchangeable with the benchmark's
    non-members. A text-only classifier (benchmark = 1, held-out = 0, cross-validated) that
    separates them shows they are not: a flag could then be that difference (a generated,
    perturbed or later-written held-out set), not contamination. Exchangeable sets read ~0.5.
    """
    from blackbox_audit.blind import blind_baseline

    def texts(side: SideScores) -> list[str]:
        return [side.bench.texts[i] for i in side.order]

    if min(len(b.order), len(h.order)) < 2:
        return {"auc": None}
    out = blind_baseline(texts(b) + texts(h), [1] * len(b.order) + [0] * len(h.order), seed=seed)
    out.pop("scores", None)
    out["texts"] = "whole items (question and answer), whichever part was scored"
    out["labels"] = "benchmark = 1, held-out = 0 (which side an item is on, not membership)"
    return out


def _side_rows(side: SideScores, score: str) -> list[dict[str, Any]]:
    return [
        {"id": sid, "n_tokens": nt, "n_bounded": nb, score: v if math.isfinite(v) else None}
        for sid, nt, nb, v in zip(side.ids, side.n_tokens, side.n_bounded, side.score, strict=True)
    ]


def set_test_outcome(fixed: Any, seq: SequentialRankTest | None, cfg: Any) -> dict[str, Any]:
    """The dataset-level test's reading: the sequential e-process when the run stopped on it (its
    p-value is the one valid under that stopping), else the fixed-sample rank test."""
    if seq is None:
        return {
            "flagged": fixed.flagged,
            "p_value": fixed.p_value,
            "test": "one-sided rank test",
            "why": "",
            "details": fixed.to_json(),
        }
    why = ""
    if seq.state == "contaminated":
        why = f"; settled after {seq.stopped_at} items"
    elif seq.state == "futile":
        theta = seq.design.futility_auc
        why = (
            f"; stopped for futility after {seq.stopped_at} items: a benchmark-vs-held-out AUC >= {theta:.3f} (a "
            f"contamination rate >= {cfg.min_rate:.0%} if the score's per-item AUC is >= {cfg.item_auc:g}) is ruled "
            f"out at confidence {1 - cfg.futility_beta:.0%}"
        )
    details = {**seq.to_json(), "fixed_sample_rank_test": {**fixed.to_json(), "valid_under_stopping": False}}
    return {
        "flagged": seq.state == "contaminated",
        "p_value": seq.p_value,
        "test": "sequential rank e-process, anytime-valid",
        "why": why,
        "details": details,
    }


def spend_lines(bought: dict[str, Any]) -> list[str]:
    """What the purchase spent, and what finishing the planned items would have cost (API targets)."""
    nb, nh, pb, ph = (bought[k] for k in ("benchmark_items", "heldout_items", "benchmark_planned", "heldout_planned"))
    if "spent_usd" not in bought:
        return [f"bought {nb} of {pb} benchmark and {nh} of {ph} held-out items (local model: nothing billed)"]
    line = f"spent ${bought['spent_usd']:.4f} ({bought['requests']:,} requests) on {nb} + {nh} items"
    if bought.get("spent_on_unfinished_item_usd"):
        line += f" (${bought['spent_on_unfinished_item_usd']:.4f} of it on an item the budget stop left unfinished)"
    est = bought.get("finish_usd_estimate")
    if nb + nh < pb + ph:
        rest = "unknown" if est is None else f"about ${est:.4f} more"
        line += (
            f"; finishing all {pb} + {ph} items would have cost {rest} (the spend per item so far, scaled by the "
            "remaining items' lengths)"
        )
    return [line]
