"""``report.html``: drawn from results read back with ``read_result``, self-contained, and rendered
by a real headless Chromium with no console errors and its plots drawn."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.report_html import render_report, write_report
from blackbox_audit.results import MethodResult, RunRecorder, Verdict, git_revision, write_result

RNG = np.random.default_rng(0)
N = 60


def _labels() -> list[int]:
    return [i % 2 for i in range(N)]


def _fill(folder: Path) -> None:
    """One folder per kind of result the report draws (synthetic numbers, real writer)."""
    ids = [f"t{i}" for i in range(N)]
    y = np.array(_labels())
    good = y * 1.2 + RNG.normal(size=N)
    score = MethodResult(
        "score",
        {"scores": ["loss", "min_k"]},
        ids=ids,
        labels=list(y),
        scores={"loss": good, "min_k": good + RNG.normal(size=N)},
        fields={"n_tokens": [40] * N},
        metrics={
            "loss": {"auc": 0.8, "tpr_at_1pct_fpr": 0.1, "tpr_at_5pct_fpr": 0.2, "n": N},
            "blind": {"auc": 0.52, "tpr_at_1pct_fpr": 0.0, "tpr_at_5pct_fpr": 0.05, "n": N},
        },
        provenance={
            "usage": {
                "requests_sent": 12,
                "cache_hits": 3,
                "prompt_tokens": 900,
                "completion_tokens": 12,
                "cost_usd": 0.0012,
                "positions_by_strategy": {"bisection": 30},
            },
            "cache": {"hits": 0, "misses": 60, "corrupt": 0},
        },
    )
    write_result(score, folder / "score")
    p = np.sort(RNG.uniform(size=N))
    sel = [bool(v < 0.05) for v in p]
    ptdi = MethodResult(
        "ptdi",
        {"score": "loss", "alpha": 0.1},
        ids=ids,
        labels=list(y),
        scores={"loss": good},
        fields={"p_value": list(p), "scaled_p_value": list(p), "selected": sel},
        verdict=Verdict("selected", f"selected {sum(sel)} of {N}", alpha=0.1, estimate={"member_share": 0.47}),
        metrics={"selection": {"fdp": 0.0, "power": 0.3}},
    )
    write_result(ptdi, folder / "ptdi")
    em = MethodResult(
        "em_mia",
        {"iterations": 3},
        ids=ids,
        labels=list(y),
        scores={"em_mia": good + 0.5 * RNG.normal(size=N)},  # its own scores, not the score step's
        metrics={
            "per_iteration": [{"iteration": t, "auc": 0.6 + 0.05 * t, "tpr_at_5pct_fpr": 0.1, "n": N} for t in range(4)]
        },
    )
    write_result(em, folder / "em_mia")
    rows = [
        {
            "id": f"t{i // 10}",
            "pos": i % 10,
            "token_id": i,
            "token": "x",
            "lp_a": -1.0,
            "lp_b": -1.0 + d,
            "delta": d,
            "bound": b,
            "rung": r,
            "status_a": "exact",
            "status_b": "recovered",
            "requests": 4,
            "beyond": False,
        }
        for i, (d, b, r) in enumerate(
            [(1e-7, 0.0001, "top_n")] * 20 + [(float(RNG.uniform(-0.2, 0.2)), 0.3, "bisection")] * 40
        )
    ]
    cmp = MethodResult(
        "compare",
        {"scores": ["loss"]},
        ids=ids[:6],
        scores={"loss@a": np.arange(6.0), "loss@b": np.arange(6.0)},
        verdict=Verdict("agree", "all 60 token positions agree within their stated error bounds"),
        extras={
            "compare.json": {
                "tokens": {
                    "positions": 60,
                    "beyond_bound": 0,
                    "bounded_positions": 0,
                    "max_abs_delta": 0.2,
                    "mean_abs_delta": 0.1,
                    "median_abs_delta": 0.1,
                    "tolerance": 1e-4,
                    "rung_side": "b",
                    "texts_skipped": [],
                    "by_rung": {
                        "bisection": {
                            "positions": 40,
                            "max_abs_delta": 0.2,
                            "mean_abs_delta": 0.1,
                            "median_abs_delta": 0.1,
                            "mean_bound": 0.3,
                            "max_bound": 0.3,
                            "bounded_positions": 0,
                            "beyond_bound": 0,
                            "requests": 160,
                        }
                    },
                },
                "scores": {"loss": {"spearman": 1.0, "n": 6, "auc_a": None, "auc_b": None}},
                "sides": {
                    "b": {
                        "target": "compat:emu",
                        "conditioning": {"api": "chat"},
                        "positions": 60,
                        "requests": 160,
                        "requests_per_position": 2.7,
                        "this_run": {
                            "requests_sent": 160,
                            "cache_hits": 0,
                            "prompt_tokens": 5000,
                            "completion_tokens": 160,
                            "cost_usd": 0.0,
                        },
                        "price_as": {"model": "gpt-4o-mini", "usd": 0.0008},
                    }
                },
                "conditioning_note": None,
            },
            "positions.jsonl": rows,
        },
    )
    write_result(cmp, folder / "compare")
    RunRecorder("audit", {"spec": "x.toml"}).finish(
        folder,
        extra={
            "spec": {"path": "x.toml", "text": "[audit]\nout = 'x'\n"},
            "budget": {"max_usd": 1.0},
            "steps": [{"name": n, "folder": n} for n in ("score", "ptdi", "em_mia", "compare")],
            "side_by_side": [
                {
                    "score": "loss",
                    "auc_whitebox_all": 0.8,
                    "auc_whitebox_sample": 0.9,
                    "auc_whitebox_chat_sample": 0.85,
                    "auc_api_sample": 0.85,
                    "spearman_chat_vs_api": 0.99,
                }
            ],
            "api_sample": {"texts": 6, "members": 3},
        },
    )


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report") / "run"
    _fill(folder)
    write_report(folder)
    return folder


def test_report_draws_every_part_from_the_results(report_dir: Path) -> None:
    html = (report_dir / "report.html").read_text()
    for kind in ("roc", "histogram", "iterations", "pvalues", "delta"):
        assert f'data-kind="{kind}"' in html, kind
    assert html.count("<svg") >= 8
    for text in (
        "blind baseline",
        "TPR@0.1%FPR",
        "95% CI",
        "member share",
        "gpt-4o-mini",
        "API requests sent",
        "package git revision",
        "Audit spec",
        "bisection",
        "Spearman",
    ):
        assert text in html, text
    # self-contained: no scripts, no external resources
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)
    links = re.findall(r'href="([^"]+)"', html)  # the page's own anchors and the SVGs' own references
    overview = html[html.index("<h2>Overview</h2>") :]
    overview = overview[: overview.index("</table>")]
    assert all(h.startswith("#") for h in links) and re.findall(r'href="([^"]+)"', overview) == [
        f"#{n}" for n in ("score", "ptdi", "em_mia", "compare")
    ]


def test_report_opens_with_what_to_conclude_and_draws_each_roc_once(report_dir: Path) -> None:
    """The page starts with a short statement drawn from the verdicts and metrics; PTDI's test
    scores (the score step's own) get a link instead of a second ROC; the white-box vs API table
    comes before any ledger or provenance."""
    html = (report_dir / "report.html").read_text()
    start = html.index('id="conclusions"')
    conclusions = re.sub(r"<[^>]+>", "", html[start : html.index("</section>", start)])
    assert start < html.index("<h2>Overview</h2>") < html.index('id="side-by-side"') < html.index('id="score"')
    assert html.index('id="side-by-side"') < min(html.index("Requests, cost and cache"), html.index("Provenance"))
    assert "score: the best score (members vs non-members) is loss, AUC" in conclusions
    assert "above the text-only blind baseline (0.520)" in conclusions
    assert "ptdi — selected: selected" in conclusions and "compare — agree: all 60 token positions" in conclusions
    assert "Spearman loss 0.99" in conclusions
    assert conclusions.count("the best score") == 1  # PTDI's test scores are the score step's: said once
    ptdi = html[html.index('id="ptdi"') : html.index('id="em_mia"')]
    assert 'data-kind="roc"' not in ptdi and 'href="#score"' in ptdi and "shown there" in ptdi
    assert html.count('data-kind="roc"') == 2  # score's and EM-MIA's own


def test_the_two_caches_are_told_apart(report_dir: Path) -> None:
    """Issue 27: "cache hits 3" (the request engine) beside "cache: hits 0" (the record cache)."""
    html = (report_dir / "report.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td><td[^>]*>([^<]*)</td>", html)
    labels = {label: value for label, value in cells}
    assert labels["API requests answered by the request cache (not sent)"] == "3"
    assert labels["texts read from the record cache"] == "0"
    assert not {"cache hits", "cache: hits"} & set(labels)


def test_report_numbers_come_from_metrics_json() -> None:
    """The report draws the numbers a result's metrics.json holds; an older result without them gets
    them from the one function that writes them (``metrics.reported_metrics``), never its own."""
    from blackbox_audit.metrics import reported_metrics
    from blackbox_audit.report_plots import roc_stats

    y = np.array(_labels())
    s = y * 2.0 + RNG.normal(size=N)
    written = reported_metrics(s, y)
    st = roc_stats(s, y, written)
    assert st["ci"] == tuple(written["auc_ci"]) and st["auc"] == written["auc"]
    assert st["tpr"]["0.01"] == written["tpr_at_1pct_fpr"]
    assert st["f1_accuracy"] == written["f1_threshold_accuracy"]["accuracy"]
    assert st["resolvable"] == {"0.001": False, "0.01": False, "0.05": True}  # 30 non-members
    odd = {**written, "auc_ci": [0.123, 0.456]}  # whatever metrics.json says is what is shown
    assert roc_stats(s, y, odd)["ci"] == (0.123, 0.456)
    legacy = {"auc": 0.5, "tpr_at_1pct_fpr": 0.0, "tpr_at_5pct_fpr": 0.0, "n": N}  # written before auc_ci
    assert roc_stats(s, y, legacy)["ci"] == tuple(written["auc_ci"])
    assert roc_stats(np.ones(4), np.ones(4, dtype=int)) is None


def test_what_to_conclude_makes_no_auc_claim_on_a_handful_of_texts() -> None:
    from blackbox_audit.metrics import evaluation_metrics
    from blackbox_audit.report_html import _membership_conclusion

    def result(n: int) -> MethodResult:
        y = [i % 2 for i in range(n)]
        s = np.asarray(y, dtype=float) + 0.01 * np.arange(n)  # perfectly separated
        return MethodResult("score", {}, ids=[f"t{i}" for i in range(n)], labels=y, scores={"loss": s},
                            metrics=evaluation_metrics({"loss": s}, y))  # fmt: skip

    assert _membership_conclusion(Path("api"), result(8)) is None  # 4 + 4 texts: AUC 1.0 says little
    assert "better than chance" in (_membership_conclusion(Path("score"), result(40)) or "")


def test_run_json_records_the_packages_git_revision_not_the_cwds(tmp_path: Path, monkeypatch) -> None:
    if git_revision() is None:
        pytest.skip("the package is not running from a git checkout")
    other = tmp_path / "elsewhere"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(other),
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    monkeypatch.chdir(other)
    run = json.loads(RunRecorder("t", {}).finish(tmp_path / "o").read_text())
    assert run["git"]["commit"] == git_revision()["commit"] != git_revision(other)["commit"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_run(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = _chromium()
    assert exe is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--hide-scrollbars",
    ]
    return subprocess.run([exe, *flags, *extra, page.as_uri()], capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    """Real browser: no console errors (a page that logs one is caught, so the check can fail),
    every figure's SVG is in the rendered DOM, and a screenshot of the page's top shows the ROC
    curves: their solid colours (histogram bars are translucent, so blended) are on screen.
    The screenshot is kept in ``$BLACKBOX_AUDIT_SCREENSHOT`` when that is set."""
    if _chromium() is None:
        pytest.skip("Debian's chromium is not installed and could not be (scripts/setup.sh --dev installs it)")
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom')</script></body></html>")
    assert console_errors(chromium_run(bad, tmp_path, "--dump-dom").stderr), "console errors would go unnoticed"

    page = report_dir / "report.html"
    dom = chromium_run(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0 and not console_errors(dom.stderr), console_errors(dom.stderr)
    figures = re.findall(r'<figure class="plot (\w+)".*?</figure>', dom.stdout, re.S)
    assert {"roc", "histogram", "iterations", "pvalues", "delta"} <= set(figures)
    assert len(re.findall(r"<svg", dom.stdout)) >= 8

    shot = tmp_path / "report.png"
    res = chromium_run(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1500")
    assert res.returncode == 0 and shot.is_file()
    import matplotlib.image

    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round().astype(int)
    blue = np.all(np.abs(pixels - [31, 119, 180]) <= 12, axis=-1).sum()  # the first ROC curve (#1f77b4)
    red = np.all(np.abs(pixels - [214, 39, 40]) <= 12, axis=-1).sum()  # the second (#d62728)
    assert blue > 300 and red > 300, (blue, red)
    keep = os.environ.get("BLACKBOX_AUDIT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_report_cli_and_errors(report_dir: Path, tmp_path: Path, capsys) -> None:
    from blackbox_audit.cli import main

    assert main(["report", str(report_dir / "score"), "--out", str(tmp_path / "one.html")]) == 0
    html = (tmp_path / "one.html").read_text()
    assert 'id="score"' in html and 'id="ptdi"' not in html
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="holds no method results"):
        render_report(tmp_path / "empty")
