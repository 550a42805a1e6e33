"""EM-MIA (SPEC §3; Kim et al., "Detecting training data of LLMs via expectation maximization").

Label-free: the algorithm never sees labels; they are used only by ``iteration_metrics`` to
report AUC per iteration. Every membership score here is oriented higher = member.

1. ``recall_matrix``: ``R[p, x] = ReCaLL_p(x) = LL(x | p) / LL(x)`` for every prefix ``p`` of a
   pool (a seeded subset of the test texts, default all) and every text ``x``; each prefix is a
   single test text (paper §3). Computed once, through the target (and its cache); the
   iterations reuse it without new model calls. Conventions follow the authors' code
   (``gyuwankim/em-mia``; ``docs/CONFORMANCE.md`` has the table and the measured effects):
   - **self-pairs kept** (``self_pairs=True``): ``R[p, p]`` is scored like any other entry
     (``run.py`` ``ReCaLL-all`` scores every text against every prefix, itself included; the
     paper §6.2.1 discusses the resulting ``LL(p|p) ~ 0``). ``self_pairs=False`` leaves the
     diagonal NaN, skipped by every statistic (this project's behaviour before issue 11);
   - **the text's first token is not scored given the prefix** (``first_token=False``): the
     authors' ``modeling_utils.infer`` scores ``u_2..u_L`` for both ``LL(x|p)`` and ``LL(x)``,
     unlike ReCaLL's own code (``blackbox_audit.scores.recall``), which scores ``u_1..u_L``
     given the prefix;
   - the prefix is the text itself, tokenized on its own and followed by the text's ids
     (``sep=space``; multi-text prefixes — Rand — are joined with one space as in ``run.py``).
     ``sep=paragraph`` ends each prefix with a blank line (before issue 11).
2. ``em_mia``: from an initial score ``f0`` iterate (default 10 rounds)
   - prefix score ``r(p) = AUC({R[p, x]}_x, labels 1[f(x) > median f])`` (paper §4, S = AUC;
     ``emmia.py``: ``calc_auc(x, y > np.median(y))``);
   - membership update ``neg-prefix``: ``f(x) = -r(x)`` (paper default and ``emmia.py``
     ``NegPref``: a non-member makes a discriminative prefix, so a high prefix score means
     non-member — this minus is the sign conversion, in this one place). It needs every text in
     the pool. ``topk-recall``: ``f(x) = mean over the top-k prefixes by r of R[p, x]`` — the
     paper concatenates the top-k texts into one prefix (``emmia.py`` does so only for its
     label-using ``TopPref`` oracle), which would need new model calls every iteration; we use
     the ensemble average of single-prefix ReCaLL (the paper's footnote 1) so the matrix is
     reused. With self-pairs kept, a text that is itself a top prefix has its self-pair among
     its k terms, as the texts inside a concatenated TopPref prefix do. It works with a pool
     smaller than the data (App. C's subset).
3. Label-free baselines (paper §6.2.1; ``emmia.py`` ``Avg``): ``Avg(x) = mean_p R[p, x]``
   (higher = member as is); ``AvgP(p) = mean_x R[p, x]`` is a *prefix* statistic used as the
   membership score of ``p``, oriented as the authors do (``avgp_scores``); ``Rand``: ReCaLL
   with one prefix of ``shots`` random test texts (``rand_scores``), every text scored against
   it — the shots themselves included
   when ``self_pairs`` (as the authors do; paper §6.2.1 notes they then look like non-members),
   else a shot gets a prefix of the other shots.

When the premise fails: neg-prefix needs member texts to be *poor* prefixes and non-members
good ones. On the tiny canary (a 2-layer GPT trained from scratch, 80 texts) both kinds were
equally discriminative (oracle prefix AUC 0.764 for members, 0.757 for non-members; measured
before issue 11 without self-pairs), so neg-prefix fell from its initialiser's 0.79 AUC to
~0.59, while topk-recall kept ~0.80 and the plain ``Avg`` baseline reached 0.855. Check ``avg``
and ``topk-recall`` when neg-prefix looks worse than its initialiser.

Cost: ``|pool| x |D|`` conditional scorings with self-pairs (``|pool| x (|D| - 1)`` without;
``plan_calls`` lists them without a target, for dry-runs). White-box,
``HFTarget.conditional_logprobs`` encodes each prefix once and scores all texts against its
key/value cache in batches.

Modules, one job each: ``em_recall_matrix`` (step 1, the only model calls), ``em_iterations`` and
``em_premise`` (step 2 and ``auto``'s gate), ``em_baselines`` (step 3); this one runs them end to end
(``run_em_mia``) and is the method (``EMMIA``), re-exporting every part.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import (
    AuditInputs,
    Method,
    MethodConfig,
    Needs,
    Preparation,
    check_positive,
    register_method,
)
from blackbox_audit.methods.em_baselines import (
    AVGP_SIGN,
    avg_scores,
    avgp_scores,
    rand_calls,
    rand_prefix_texts,
    rand_scores,
)
from blackbox_audit.methods.em_iterations import (
    DEFAULT_TOPK,
    UPDATES,
    EMResult,
    em_mia,
    iteration_metrics,
    prefix_scores,
    resolve_update,
    topk_recall,
)
from blackbox_audit.methods.em_premise import PREMISE_Z, PremiseCheck, premise_check
from blackbox_audit.methods.em_recall_matrix import (
    EM_SEP,
    FIRST_TOKEN,
    POOL_CAP,
    SELF_PAIRS,
    RecallMatrix,
    fill_records,
    matrix_scorings,
    means_target,
    plan_calls,
    pool_indices,
    recall_matrix,
)
from blackbox_audit.planning import CostPlan
from blackbox_audit.results import MethodResult
from blackbox_audit.scores.recall import DEFAULT_SHOTS, check_sep

#: The method's parts, each in the module of its job, re-exported: this module is EM-MIA's one
#: door (the CLI, the benches and the tests reach every part as ``em_mia.NAME``).
__all__ = [
    "AVGP_SIGN",
    "BASELINES",
    "DEFAULT_TOPK",
    "EMMIA",
    "EM_SEP",
    "FIRST_TOKEN",
    "POOL_CAP",
    "PREMISE_Z",
    "SELF_PAIRS",
    "UPDATES",
    "EMMIAConfig",
    "EMResult",
    "EMRun",
    "PremiseCheck",
    "RecallMatrix",
    "fill_records",
    "means_target",
    "avg_scores",
    "avgp_scores",
    "default_init",
    "em_mia",
    "iteration_metrics",
    "matrix_scorings",
    "plan_calls",
    "pool_indices",
    "prefix_scores",
    "premise_check",
    "rand_calls",
    "rand_prefix_texts",
    "rand_scores",
    "recall_matrix",
    "resolve_update",
    "run_em_mia",
    "topk_recall",
]


# ---- one call for the whole method (what ``blackbox-audit em-mia`` runs)

BASELINES = ("avg", "avgp", "rand")


@dataclass
class EMRun:
    """Everything a run produced: ``columns`` maps ``em_mia``, the initial score's field and each
    baseline to per-text scores (all higher = member); ``result`` has every iteration."""

    result: EMResult
    matrix: RecallMatrix
    columns: dict[str, np.ndarray]
    init_field: str


def default_init(target: Any) -> str:
    """Min-K%++ where the target gives the full distribution (white-box), else loss (SPEC §3)."""
    return "min_k_pp" if target.capabilities.full_distribution else "loss"


def run_em_mia(
    target: Any,
    texts: Sequence[str],
    *,
    init: str = "auto",
    iterations: int = 10,
    pool_size: int | None = POOL_CAP,
    pool_seed: int = 0,
    update: str = "auto",
    topk: int = DEFAULT_TOPK,
    baselines: Sequence[str] = BASELINES,
    rand_shots: int = DEFAULT_SHOTS,
    self_pairs: bool = SELF_PAIRS,
    first_token: bool = FIRST_TOKEN,
    sep: str = EM_SEP,
    ids: Sequence[str] | None = None,
    progress: bool = True,
) -> EMRun:
    """EM-MIA end to end on ``target`` (no labels): initial score, ReCaLL matrix, iterations, baselines.

    ``init``: a score spec computed through ``compute_scores`` (``min_k_pp``, ``loss``, ...), a
    baseline name (``avg``, ``avgp``, ``rand``) or ``auto`` (``default_init``). ``pool_size``: the
    number of texts used as prefixes (seeded subset by ``pool_seed``; default ``POOL_CAP``, all
    texts where there are no more; None = all). Defaults
    follow the paper (§6.3): 10 iterations, AUC prefix scores, neg-prefix update on a full pool;
    ``self_pairs``/``first_token``/``sep`` the authors' code (module doc), shared by the ReCaLL
    matrix and the Rand baseline.
    """
    from blackbox_audit.scores import compute_scores

    texts = list(texts)
    baselines = list(dict.fromkeys(baselines))
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise UserError(f"unknown baseline(s) {', '.join(bad)}", f"use any of {','.join(BASELINES)}")
    init = default_init(target) if init == "auto" else init
    pool = pool_indices(len(texts), pool_size, seed=pool_seed)
    if init == "avgp" and len(pool) < len(texts):
        raise UserError("init avgp scores only texts in the prefix pool", "use init avg or pool_size=None (all)")
    if update == "neg-prefix" and len(pool) < len(texts):  # before the matrix is paid for, not after
        raise UserError(
            f"the neg-prefix update scores only texts in the prefix pool ({len(pool)} of {len(texts)})",
            "use --update topk-recall (or auto), or pass --prefix-pool all",
        )
    init_field, init_values = init, None
    if init not in BASELINES:
        table = compute_scores(target, texts, init, ids=ids, progress=progress)
        init_field = next(iter(table))
        init_values = table[init_field]
    conventions = {"self_pairs": self_pairs, "first_token": first_token, "sep": sep}
    matrix = recall_matrix(target, texts, pool, progress=progress, **conventions)
    base: dict[str, np.ndarray] = {}
    for name in dict.fromkeys([*baselines, *([init] if init in BASELINES else [])]):
        if name == "avg":
            base[name] = avg_scores(matrix)
        elif name == "avgp":
            base[name] = avgp_scores(matrix)
        else:
            base[name] = rand_scores(target, texts, pool, matrix.ll, shots=rand_shots, seed=pool_seed, **conventions)
    if init_values is None:
        init_values = base[init]
    result = em_mia(matrix, init_values, iterations=iterations, update=update, topk=topk)
    result.params.update(conventions)
    columns = {"em_mia": result.final, init_field: init_values, **base}
    return EMRun(result=result, matrix=matrix, columns=columns, init_field=init_field)


# ---- as a method (docs/CONTRACTS.md)


@dataclass(frozen=True)
class EMMIAConfig(MethodConfig):
    """EM-MIA options (defaults follow the paper, §6.3).

    ``init``: a score spec (``min_k_pp``, ``loss``, ...), a baseline (``avg``, ``avgp``, ``rand``)
    or ``auto`` (Min-K%++ on white-box targets, else loss); ``prefix_pool``: how many texts serve
    as prefixes (seeded subset by ``pool_seed``; default ``POOL_CAP`` = 200, None = all; cost ~
    pool x texts; neg-prefix needs all); ``update``:
    ``neg-prefix``, ``topk-recall`` or ``auto``; ``baselines``: label-free columns to add.
    ``self_pairs``/``first_token``/``sep``: the ReCaLL-matrix conventions (module docstring;
    defaults = the authors' code, docs/CONFORMANCE.md has the measured alternatives).
    """

    init: str = "auto"
    iterations: int = 10
    prefix_pool: int | Literal["all"] | None = POOL_CAP
    pool_seed: int = 0
    update: Literal["auto", "neg-prefix", "topk-recall"] = "auto"
    topk: int = DEFAULT_TOPK
    baselines: tuple[str, ...] = BASELINES
    rand_shots: int = DEFAULT_SHOTS
    self_pairs: bool = SELF_PAIRS
    first_token: bool = FIRST_TOKEN
    sep: str = EM_SEP

    @property
    def pool_size(self) -> int | None:
        """The prefix-pool size for ``pool_indices``: None = every text (``"all"`` or None)."""
        return None if self.prefix_pool in (None, "all") else int(self.prefix_pool)

    def validate(self) -> None:
        from blackbox_audit.scores import parse_specs

        check_sep(self.sep)
        check_positive(self.iterations, "iterations")
        check_positive(self.topk, "topk")
        check_positive(self.rand_shots, "rand_shots")
        if self.pool_size is not None:
            check_positive(self.pool_size, "prefix_pool")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise UserError(f"unknown baseline(s) {', '.join(bad)}", f"use any of {','.join(BASELINES)} or none")
        if self.init not in ("auto", *BASELINES):
            parse_specs(self.init)  # a typo fails before the model is loaded


@register_method
class EMMIA(Method):
    """EM-MIA over a ReCaLL matrix (``run_em_mia``). Result columns: ``em_mia``, the initial score
    and the baselines (all higher = member); extra ``prefix_scores.jsonl`` (final prefix score per
    pool text); metrics (with labels) add ``per_iteration`` AUC and ``final``."""

    name = "em_mia"
    title = "label-free membership inference by expectation maximisation (EM-MIA)"
    config_class = EMMIAConfig
    outputs = {"prefix_scores.jsonl": "final prefix score r(p) of every pool text (id, prefix_score)"}

    def needs(self) -> Needs:
        return Needs(capabilities=("conditional",))

    def prepare(self, inputs: AuditInputs, preparation: Preparation) -> EMMIA:
        """``init = "auto"`` resolved from what is known of the target (``default_init``: Min-K%++ where
        it gives the full distribution, else loss): the loaded target, else its kind's capabilities
        (``adapters.registry``), so the dry-run prices the initial score the run computes."""
        if self.config.init != "auto" or self.resolved_init is not None:
            return self
        known = preparation.target if preparation.target is not None else inputs.target
        if known is None and preparation.target_spec is not None:
            from types import SimpleNamespace

            from blackbox_audit.adapters import target_kind

            known = SimpleNamespace(capabilities=target_kind(preparation.target_spec).capabilities)
        if known is None:
            return self
        init = default_init(known)
        method = copy.copy(self)  # the config keeps "auto" (run.json echoes it; its "init" records the choice)
        method.resolved_init = init
        method.choices = {
            **self.choices,
            "init": {
                "chosen": init,
                "rule": "Min-K%++ where the target gives the full distribution (white-box), else loss",
            },
        }
        return method

    #: what ``prepare`` resolved ``init = "auto"`` to (None: not prepared, or init named)
    resolved_init: str | None = None

    def _init(self, target: Any) -> str:
        if self.config.init != "auto":
            return self.config.init
        if self.resolved_init is not None:
            return self.resolved_init
        return "loss" if target is None else default_init(target)

    def plan(self, inputs: AuditInputs, pool_size: int | None = None) -> CostPlan:
        """The calls of a run with ``pool_size`` prefixes (default: the configured pool)."""
        from blackbox_audit.scores import plan_requests

        cfg = self.config
        texts = inputs.texts
        init = self._init(inputs.target)
        pool = pool_indices(len(texts), pool_size or cfg.pool_size, seed=cfg.pool_seed)
        calls = [] if init in BASELINES else list(plan_requests(texts, init).calls)
        calls += plan_calls(texts, pool, self_pairs=cfg.self_pairs, sep=cfg.sep)
        if "rand" in cfg.baselines or init == "rand":
            calls += rand_calls(
                texts, pool, shots=cfg.rand_shots, seed=cfg.pool_seed, self_pairs=cfg.self_pairs, sep=cfg.sep
            )
        return CostPlan(calls=calls)

    def check(self, inputs: AuditInputs) -> None:
        super().check(inputs)
        cfg = self.config
        if self._init(inputs.target) == "avgp" and cfg.pool_size is not None and cfg.pool_size < len(inputs.texts):
            raise UserError(
                f"init avgp scores only texts in the prefix pool ({cfg.pool_size} of {len(inputs.texts)})",
                "use init avg, or pass --prefix-pool all (prefix_pool = 'all')",
            )
        if cfg.update == "neg-prefix" and cfg.pool_size is not None and cfg.pool_size < len(inputs.texts):
            raise UserError(
                f"the neg-prefix update scores only texts in the prefix pool ({cfg.pool_size} of {len(inputs.texts)})",
                "use --update topk-recall (or auto), or pass --prefix-pool all (prefix_pool = 'all')",
            )

    def run(self, inputs: AuditInputs) -> MethodResult:
        from blackbox_audit.metrics import evaluation_metrics

        self.check(inputs)
        cfg = self.config
        run_ = run_em_mia(
            inputs.target,
            inputs.texts,
            init=self._init(inputs.target),
            iterations=cfg.iterations,
            pool_size=cfg.pool_size,
            pool_seed=cfg.pool_seed,
            update=cfg.update,
            topk=cfg.topk,
            baselines=cfg.baselines,
            rand_shots=cfg.rand_shots,
            self_pairs=cfg.self_pairs,
            first_token=cfg.first_token,
            sep=cfg.sep,
            ids=inputs.ids,
            progress=inputs.progress,
        )
        result, pool, ids = run_.result, run_.matrix.pool, inputs.ids
        final_r = result.prefix[-1] if result.prefix else prefix_scores(run_.matrix, result.final)
        premise = [c.to_json() for c in result.premise]
        out = self.new_result(
            inputs,
            scores=dict(run_.columns),
            extras={
                "prefix_scores.jsonl": [
                    {"id": ids[int(p)], "prefix_score": float(final_r[k])} for k, p in enumerate(pool)
                ]
            },
            provenance={
                "init": run_.init_field,
                "update": result.update,
                "requested_update": cfg.update,
                "iterations_run": len(result.scores) - 1,
                "stopped": result.stopped,
                "premise": premise,
                "pool_size": len(pool),
                "conditional_scorings": int(
                    sum(len(c.texts) for c in plan_calls(inputs.texts, pool, self_pairs=cfg.self_pairs, sep=cfg.sep))
                ),
            },
        )
        out.warnings += result.warnings
        first = result.premise[0]
        out.summary.append(
            f"premise check (non-members make the better prefixes; label-free): statistic {first.statistic:.3f} "
            f"vs threshold {first.threshold:.3f} on the initial score -> {'holds' if first.passed else 'fails'}; "
            f"update {result.update}, {len(result.scores) - 1} of {cfg.iterations} iterations run"
        )
        metrics = evaluation_metrics(run_.columns, inputs.labels)
        if metrics is not None:
            per_iter = iteration_metrics(result, inputs.labels)
            for m, c in zip(per_iter, result.premise, strict=False):
                m["premise_statistic"] = c.statistic
            out.metrics = {**metrics, "per_iteration": per_iter, "final": per_iter[-1], "premise": premise}
            nan = float("nan")
            out.summary += [
                f"iteration {m['iteration']:>2}: auc {m['auc']:.3f}  premise {m.get('premise_statistic', nan):.3f}"
                for m in per_iter
            ]
        return out
