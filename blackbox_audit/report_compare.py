"""The report's section for a ``compare`` result (``compare.json`` + ``positions.jsonl``): the
per-rung table of token deltas, the |delta| histogram, score agreement, and requests and cost per
side.

Separate from the page (``report_html``) because it reads one method's own summary file, with
tables of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

from blackbox_audit.report_markup import esc, fmt_num, html_figure, html_table
from blackbox_audit.results import MethodResult


def compare_section(result: MethodResult) -> str:
    """The compare method's section: per-token deltas by rung, score agreement, each side's requests."""
    from blackbox_audit.report_plots import delta_figure

    summary = result.extras.get("compare.json")
    if not isinstance(summary, Mapping):
        return ""
    tokens = summary.get("tokens", {})
    out = [f"<h3>Per token: side {esc(tokens.get('rung_side', 'b'))}'s recovery rung</h3>"]
    rows = []
    for rung, r in tokens.get("by_rung", {}).items():
        rp = "–" if not r.get("requests") else f"{r['requests'] / r['positions']:.2f}"
        rows.append(
            [
                esc(rung),
                fmt_num(r["positions"]),
                fmt_num(r["max_abs_delta"]),
                fmt_num(r["mean_abs_delta"]),
                fmt_num(r["median_abs_delta"]),
                fmt_num(r["mean_bound"]),
                fmt_num(r["bounded_positions"]),
                fmt_num(r["beyond_bound"]),
                rp,
            ]
        )
    rows.append(
        [
            "<strong>all</strong>",
            fmt_num(tokens.get("positions")),
            fmt_num(tokens.get("max_abs_delta")),
            fmt_num(tokens.get("mean_abs_delta")),
            fmt_num(tokens.get("median_abs_delta")),
            "",
            fmt_num(tokens.get("bounded_positions")),
            f"<strong>{fmt_num(tokens.get('beyond_bound'))}</strong>",
            "",
        ]
    )
    out.append(
        html_table(
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
        f"error bounds plus {fmt_num(tokens.get('tolerance'))} nats. Texts not compared (tokenized differently): "
        f"{len(tokens.get('texts_skipped', []))}.</p>"
    )
    if summary.get("conditioning_note"):
        out.append(f'<p class="warn-text">{esc(summary["conditioning_note"])}</p>')
    positions = result.extras.get("positions.jsonl") or []
    if positions:
        out.append(
            html_figure(
                delta_figure(positions, float(tokens.get("tolerance") or 0.0)), "per-token |Δ| by rung", "delta"
            )
        )
    scores = summary.get("scores", {})
    if scores:
        out.append("<h3>Per score</h3>")
        out.append(
            html_table(
                ["score", "Spearman ρ", "n", "AUC side a", "AUC side b"],
                [
                    [
                        esc(k),
                        fmt_num(s.get("spearman")),
                        fmt_num(s.get("n")),
                        fmt_num(s.get("auc_a")),
                        fmt_num(s.get("auc_b")),
                    ]
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
                    f"{esc(side)}: {esc(s.get('target'))}",
                    esc(s.get("conditioning", {}).get("api")),
                    fmt_num(s.get("positions")),
                    fmt_num(s.get("requests")),
                    fmt_num(s.get("requests_per_position")),
                    fmt_num(run.get("requests_sent")),
                    fmt_num(run.get("cache_hits")),
                    fmt_num((run.get("prompt_tokens") or 0) + (run.get("completion_tokens") or 0)),
                    f"${run.get('cost_usd', 0):.4f}",
                    f"${price['usd']:.4f} ({esc(price['model'])})" if price else "–",
                ]
            )
        out.append(
            html_table(
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
