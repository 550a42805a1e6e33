"""The unified scoring layer (SPEC §2): every membership score, oriented higher = member.

Scores declare the records they need per text (``requests``: ``Plain``, ``Full``,
``Conditional``, ``Reference``); ``compute_scores`` checks capabilities before any work,
fetches each distinct record once in batched calls and returns a ``ScoreTable``.
``plan_requests`` lists the same requests without a target (API dry-run cost estimates).
Spec strings carry parameters: ``min_k:k=0.1``, ``max_k:k1=0.05:k2=0.3``. The only sign
conversions of membership scores happen in this package (see ``builtin``).

Add a score: subclass ``Score`` and ``register_score(MyScore())``.
"""

from . import builtin, censored, greedy_match, ngram_coverage, pac, recall, samia  # noqa: F401 - register the built-in scores and the rest
from .builtin import k_count, min_k_pp_tokens, modified_entropy_tokens, polarized_distance
from .compute import (
    FetchCall,
    RequestPlan,
    ScoreTable,
    check_capabilities,
    compute_scores,
    parse_specs,
    plan_requests,
    servable_scores,
)
from .registry import REQUIRED, SCORES, Score, ScoreSpec, get_score, parse_spec, register_score
from .requests import Conditional, Full, Plain, Reference, Request, Samples

__all__ = [
    "SCORES",
    "REQUIRED",
    "Score",
    "ScoreSpec",
    "ScoreTable",
    "RequestPlan",
    "FetchCall",
    "Request",
    "Plain",
    "Full",
    "Conditional",
    "Reference",
    "Samples",
    "compute_scores",
    "plan_requests",
    "parse_spec",
    "parse_specs",
    "check_capabilities",
    "servable_scores",
    "get_score",
    "register_score",
    "k_count",
    "polarized_distance",
    "min_k_pp_tokens",
    "modified_entropy_tokens",
]
