"""Planning views of API targets (``--dry-run``): tokenizer, ladder shape and price, nothing sent.

The ladder's shape comes from the probe report stored in the cache for the same endpoint and
conditioning (a target that was probed before); otherwise the estimate uses the widest,
unprobed range (``engine.estimate.UNKNOWN``) and counts the probe's own requests.
"""

from __future__ import annotations

from typing import Any

from .probe import cached_probe_report
from .tokenizers import TokenTable


def api_planning_view(
    name: str, base_url: str, model: str, table: TokenTable, price: Any, *, sampling: dict[str, Any], **options: Any
) -> Any:
    from blackbox_audit.engine import LadderShape
    from blackbox_audit.engine.estimate import UNKNOWN
    from blackbox_audit.planning import PlanningView

    shape, source, probed = UNKNOWN, "not probed yet: widest range", False
    report = cached_probe_report(
        options.get("cache"),
        base_url,
        model,
        table,
        options.get("api") or "auto",
        options.get("system"),
        options.get("user_template") or "{prefix}",
        tuple(sorted(sampling.items())),
    )
    if report is not None and report.semantics is not None:
        shape, source, probed = (
            LadderShape.from_semantics(report.semantics),
            "from the cached probe of this target",
            True,
        )
    return PlanningView(
        name=name,
        model=model,
        tokenize=table.encode,
        api=True,
        shape=shape,
        shape_source=source,
        price=price,
        tokenizer_name=table.name,
        probed=probed,
    )
