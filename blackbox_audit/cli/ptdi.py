"""``blackbox-audit ptdi``: select the test texts that were trained on, with FDR <= alpha.

Reads ``scores.jsonl`` files written by ``score`` (scores higher = member), runs
``blackbox_audit.methods.ptdi.select`` and writes ``selection.jsonl`` (id, p_value,
scaled_p_value, selected), ``summary.json`` (n_test, n_calibration, pi_hat, threshold,
n_selected, alpha, method; realised fdp/power when the test file has labels) and ``run.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.cli.common import prepare_out_dir
from blackbox_audit.errors import UserError
from blackbox_audit.methods.ptdi import DEFAULT_LAMBDA, METHODS, fdp_and_power, select
from blackbox_audit.reports import RunRecorder, write_json, write_jsonl


@dataclass
class ScoreFile:
    """One score column of a ``scores.jsonl``; ``labels`` is None unless every row has 0/1."""

    path: Path
    ids: list[str]
    scores: np.ndarray
    labels: np.ndarray | None


def read_scores(path: str | Path, score: str, what: str) -> ScoreFile:
    """Read ``score`` from every row of a ``scores.jsonl``; missing or non-finite values are errors."""
    path = Path(path).expanduser()
    if path.is_dir():
        hint = path / "scores.jsonl"
        raise UserError(
            f"{what} path {path} is a folder, not a file",
            f"pass the scores.jsonl inside it{f' ({hint})' if hint.is_file() else ''}",
        )
    if not path.is_file():
        raise UserError(f"{what} file {path} does not exist", "pass the scores.jsonl written by 'blackbox-audit score'")
    try:
        lines = path.read_bytes().decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} file {path} holds bytes that are not UTF-8 (at byte {exc.start})",
            "pass the scores.jsonl written by 'blackbox-audit score' (UTF-8 JSON lines)",
        ) from None
    ids: list[str] = []
    values: list[float] = []
    labels: list[Any] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno} is not valid JSON ({exc.msg})", "pass a scores.jsonl file") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno} is not a JSON object", "pass a scores.jsonl file")
        if score not in row:
            fields = [k for k, v in row.items() if isinstance(v, float) and k not in ("label",)]
            raise UserError(
                f"{path}:{lineno} has no score '{score}' (score fields there: {', '.join(fields) or 'none'})",
                "pass --score with one of those names, or re-run 'score' with that score",
            )
        v = row[score]
        rid = str(row.get("id", lineno - 1))
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise UserError(
                f"{path}: score '{score}' of id {rid} is {v!r}, not a finite number",
                "drop rows whose score is undefined (null/NaN) or use another score",
            )
        ids.append(rid)
        values.append(float(v))
        labels.append(row.get("label"))
    if not values:
        raise UserError(f"{what} file {path} has no rows", "pass a non-empty scores.jsonl")
    has_labels = all(lab in (0, 1) and not isinstance(lab, bool) for lab in labels)
    return ScoreFile(
        path=path,
        ids=ids,
        scores=np.asarray(values, dtype=np.float64),
        labels=np.asarray(labels, dtype=np.int64) if has_labels else None,
    )


def require_label(f: ScoreFile, label: int, what: str) -> None:
    """Calibration must be known non-members, --members known members; refuse labelled mix-ups."""
    if f.labels is None:
        return
    wrong = np.flatnonzero(f.labels != label)
    if wrong.size:
        raise UserError(
            f"{what} file {f.path} has {wrong.size} row(s) labelled {1 - label} (first id {f.ids[wrong[0]]})",
            f"pass only rows with label {label} ({'members' if label else 'known non-members'})",
        )


def _level(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got '{value}'") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ptdi",
        help="FDR-controlled selection of training texts (PTDI) -> OUT/selection.jsonl, summary.json",
        description="Select the test texts that were trained on so that, in expectation, at most a share "
        "ALPHA of the selected ones are wrong (PTDI: conformal p-values from known non-members, scaled by "
        "the estimated member share, then Benjamini-Hochberg). Inputs are scores.jsonl files from 'score'.",
    )
    p.add_argument("--test", required=True, help="scores.jsonl of the texts to audit")
    p.add_argument("--calibration", required=True, help="scores.jsonl of known non-members (same model and score)")
    p.add_argument("--score", required=True, help="score field to use, e.g. min_k or loss (higher = member)")
    p.add_argument("--alpha", type=_level, required=True, help="target false discovery rate, e.g. 0.1")
    p.add_argument(
        "--method",
        choices=METHODS,
        help="subtraction (default; moment when --members is given), moment (needs --members), vanilla (plain BH)",
    )
    p.add_argument("--members", help="scores.jsonl of known members (for --method moment)")
    p.add_argument(
        "--lam",
        type=_level,
        default=DEFAULT_LAMBDA,
        help=f"subtraction region size (default {DEFAULT_LAMBDA})",
    )
    p.add_argument("--out", required=True, help="output folder (created if missing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recorder = RunRecorder("ptdi", args)
    method = args.method or ("moment" if args.members else "subtraction")
    test = read_scores(args.test, args.score, "--test")
    cal = read_scores(args.calibration, args.score, "--calibration")
    require_label(cal, 0, "--calibration")
    mem = None
    if args.members:
        mem = read_scores(args.members, args.score, "--members")
        require_label(mem, 1, "--members")
    res = select(
        test.scores,
        cal.scores,
        args.alpha,
        lam=args.lam,
        member_scores=None if mem is None else mem.scores,
        method=method,
    )
    out_dir = prepare_out_dir(args.out)
    mask = res.selected_mask()
    rows = []
    for i, rid in enumerate(test.ids):
        row: dict[str, Any] = {
            "id": rid,
            "p_value": float(res.p_values[i]),
            "scaled_p_value": float(res.scaled_p_values[i]),
            "selected": bool(mask[i]),
        }
        if test.labels is not None:
            row["label"] = int(test.labels[i])
        rows.append(row)
    write_jsonl(out_dir / "selection.jsonl", rows)
    summary = res.summary()
    summary["score"] = args.score
    if test.labels is not None:
        fdp, power = fdp_and_power(mask, test.labels)
        summary["fdp"] = float(fdp)
        summary["power"] = None if np.isnan(power) else float(power)
    write_json(out_dir / "summary.json", summary)
    recorder.finish(out_dir, extra={"summary": summary})

    print(
        f"selected {summary['n_selected']} of {summary['n_test']} test texts at FDR level {res.alpha:g} "
        f"({method}; estimated member share {res.pi_hat:.3f}; {res.n_calibration} calibration texts)"
    )
    if test.labels is not None:
        pw = "n/a (no members)" if summary["power"] is None else f"{summary['power']:.3f}"
        print(f"realised FDP {summary['fdp']:.3f}, power {pw}")
    print(f"-> {out_dir}/selection.jsonl, summary.json, run.json")
    return 0
