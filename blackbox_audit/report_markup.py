"""The report page's markup: its inline style sheet and the few HTML pieces every section is built
from (escaped text, numbers, tables, figures).

Separate from the sections (``report_html``, ``report_scores``, ``report_compare``,
``report_ledger``) so that each of them writes HTML the same way, and none imports another for it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:2px solid #d8dde3}
h3{font-size:15px;margin:18px 0 6px}
section{background:#fff;border:1px solid #e1e5ea;border-radius:6px;padding:4px 18px 16px;margin:18px 0}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e6e9ee;padding:3px 10px;text-align:right}th{background:#f0f2f5}
td:first-child,th:first-child{text-align:left}
.verdict{border-left:5px solid #4a7;background:#f2faf5;padding:8px 12px;margin:10px 0}
.verdict.warn{border-color:#d93;background:#fff8ec}.muted{color:#68717c}.warn-text{color:#a54}
figure{margin:8px 0}figure svg{max-width:100%;height:auto}
pre{background:#f3f4f6;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
details summary{cursor:pointer;color:#345}
"""


def esc(x: Any) -> str:
    """Text made safe inside HTML (None: empty)."""
    return html.escape(str(x))


def fmt_num(x: Any, digits: int = 3) -> str:
    """A number as the report shows it (ints with thousands separators, floats to ``digits`` places; None: a dash)."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not np.isfinite(x):
            return "–"
        return f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    return esc(x)


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table of ``rows`` under ``header`` (cells escaped by the caller)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_figure(svg: str, caption: str, kind: str) -> str:
    """An inline SVG figure with its caption (``kind``: the figure's CSS class)."""
    cap = f'<figcaption class="muted">{esc(caption)}</figcaption>'
    return f'<figure class="plot {kind}" data-kind="{kind}">{svg}{cap}</figure>'
