"""The report's section for a ``compare`` result (``compare.json`` + ``positions.jsonl``): the
per-rung table of token deltas, the |delta| histogram, score agreement, and requests and cost per
side.

Separate from the page (``report_html``) because it reads one method's own summary file, with
tables of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from blackbox_audit.report_markup import _e, _figure, _num, _table
from blackbox_audit.results import MethodResult


def _compare(result: MethodResult) -> str:
    from blackbox_audit.report_plots import delta_figure

    summary = result.extras.get("compare.json")
    if not isinstance(summary, Mapping):
        return ""
    tokens = summary.get("tokens", {})
    out = [f"<h3>Per token: side {_e(tokens.get('rung_side', 'b'))}'s recovery rung</h3>"]
    rows = []
    for rung, r in tokens.get("by_rung", {}).items():
        rp = "–" if not r.get("requests") else f"{r['requests'] / r['positions']:.2f}"
        rows.append(
            [
                _e(rung),
                _num(r["positions"]),
                _num(r["max_abs_delta"]),
                _num(r["mean_abs_delta"]),
                _num(r["median_abs_delta"]),
                _num(r["mean_bound"]),
                _num(r["bounded_positions"]),
                _num(r["beyond_bound"]),
                rp,
            ]
        )
    rows.append(
        [
            "<strong>all</strong>",
            _num(tokens.get("positions")),
            _num(tokens.get("max_abs_delta")),
            _num(tokens.get("mean_abs_delta")),
            _num(tokens.get("median_abs_delta")),
            "",
            _num(tokens.get("bounded_positions")),
            f"<strong>{_num(tokens.get('beyond_bound'))}</strong>",
            "",
        ]
    )
    out.append(
        _table(
            [
                "rung",
                "positions",
                "max |Δ|",
                "mean |Δ|",
                "median |Δ|",
                "mean stated bound",
                "bounded",
                "beyond bound",
                "requests/pos",
            ],
            rows,
        )
    )
    out.append(
        '<p class="muted">Δ = lp_b − lp_a in nats; a position is beyond its bound when |Δ| exceeds both '
        "sides' stated "
        f"error bounds plus {_num(tokens.get('tolerance'))} nats. Texts not compared (tokenized differently): "
        f"{len(tokens.get('texts_skipped', []))}.</p>"
    )
    if summary.get("conditioning_note"):
        out.append(f'<p class="warn-text">{_e(summary["conditioning_note"])}</p>')
    positions = result.extras.get("positions.jsonl") or []
    if positions:
        out.append(
            _figure(delta_figure(positions, float(tokens.get("tolerance") or 0.0)), "per-token |Δ| by rung", "delta")
        )
    scores = summary.get("scores", {})
    if scores:
        out.append("<h3>Per score</h3>")
        out.append(
            _table(
                ["score", "Spearman ρ", "n", "AUC side a", "AUC side b"],
                [
                    [_e(k), _num(s.get("spearman")), _num(s.get("n")), _num(s.get("auc_a")), _num(s.get("auc_b"))]
                    for k, s in scores.items()
                ],
            )
        )
    sides = summary.get("sides", {})
    if sides:
        out.append("<h3>Requests and cost per side</h3>")
        rows = []
        for side, s in sides.items():
            run = s.get("this_run", {})
            price = s.get("price_as") or {}
            rows.append(
                [
                    f"{_e(side)}: {_e(s.get('target'))}",
                    _e(s.get("conditioning", {}).get("api")),
                    _num(s.get("positions")),
                    _num(s.get("requests")),
                    _num(s.get("requests_per_position")),
                    _num(run.get("requests_sent")),
                    _num(run.get("cache_hits")),
                    _num((run.get("prompt_tokens") or 0) + (run.get("completion_tokens") or 0)),
                    f"${run.get('cost_usd', 0):.4f}",
                    f"${price['usd']:.4f} ({_e(price['model'])})" if price else "–",
                ]
            )
        out.append(
            _table(
                [
                    "side",
                    "conditioning",
                    "positions",
                    "requests (recovery)",
                    "per position",
                    "sent this run",
                    "from cache",
                    "billed tokens",
                    "cost this run",
                    "at published price",
                ],
                rows,
            )
        )
    return "".join(out)
