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
            }
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
        scores={"em_mia": good},
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
        "requests sent",
        "package git revision",
        "Audit spec",
        "bisection",
        "Spearman",
    ):
        assert text in html, text
    # self-contained: no scripts, no external resources
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)
    links = re.findall(r'href="([^"]+)"', html)  # the overview's anchors and the SVGs' own references
    assert all(h.startswith("#") for h in links) and links[:4] == [
        f"#{n}" for n in ("score", "ptdi", "em_mia", "compare")
    ]


def test_bootstrap_interval_and_low_fpr_flags() -> None:
    from blackbox_audit.report_plots import roc_stats

    y = np.array(_labels())
    st = roc_stats(y * 2.0 + RNG.normal(size=N), y)
    assert st["ci"][0] < st["auc"] < st["ci"][1]
    assert st["resolvable"] == {"0.001": False, "0.01": False, "0.05": True}  # 30 non-members
    assert roc_stats(np.ones(4), np.ones(4, dtype=int)) is None
    from sklearn.metrics import roc_auc_score

    from blackbox_audit.report_plots import bootstrap_auc

    pos, neg = np.array([0.1, 0.5, 0.5, 0.9]), np.array([0.2, 0.5, 0.3])
    one = bootstrap_auc(pos, neg, n=1)  # the rank formula equals sklearn's AUC on the same resample
    rng = np.random.default_rng(0)
    p, q = pos[rng.integers(0, 4, (1, 4))][0], neg[rng.integers(0, 3, (1, 3))][0]
    assert one[0] == pytest.approx(roc_auc_score([1] * 4 + [0] * 3, np.r_[p, q]))


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
