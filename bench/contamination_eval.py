"""Contaminated-model check of ``blackbox-audit contamination`` (issue 16, "done when").

1. Builds, or reuses from the cache, a SmolLM2 canary (``blackbox_audit.sim.canary``, corpus
   ``benchmark:gsm8k``). It draws a seeded random subset of GSM8K test items and fine-tunes
   SmolLM2 on a random half of the audited benchmark (``--members``), with each item written
   exactly as the contamination check scores it (``Question: ...\\nAnswer: ...``). The other items
   (``--nonmembers`` + ``--calibration``) are never trained on. The benchmark is a subset of
   GSM8K because CPU time is scarce here; the sizes are printed.
2. Each random split draws, from the never-trained items, as many benchmark non-members as there
   are members (true rate 50%) and uses the rest as the known non-members (held-out side).
   ``Contamination`` then runs on the fine-tuned model and on unmodified SmolLM2. Scores are
   cached (``CachedTarget``), so only the first split runs the models.
3. It prints, per model: how often the dataset-level test flags the benchmark, the rate's
   estimate and how often its lower confidence bound stays at or below 50% (or at 0 on the clean
   model; ``bench/contamination_rate_coverage.py`` measures the bound at 0/50/100%), the flagged
   list's FDR (mean FDP over splits, with its standard error) and power, and the PAC-style rate
   beside what it reads on known non-members. Split 0's files and the equivalent CLI command
   are written to ``--out``.

The splits share one fine-tuned model and one pool of items, so they are not independent
draws of the whole experiment. The standard errors describe split-to-split variation only.
In particular every split audits the same members, so on the unmodified model the set test
answers the same question (are these particular items easier?) again and again;
``--clean-null redraw`` draws the clean model's benchmark afresh from all items each split,
which makes its splits independent checks of the false-flag rate.

Run from the repository root: ``.venv/bin/python bench/contamination_eval.py`` (defaults: 64
members, 64 + 128 never-trained items, 50 splits, alpha 0.05, score loss on the answer).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/X.py`: `bench` importable
from bench.common import (
    announce,
    emit,
    get_canary,
    labelled,
    open_cpu_target,
    open_workspace,
    read_rows,
    revision,
    run_method,
    stamped,
)


def write_items(path: Path, indices: list[int], labels: list[int] | None = None) -> None:
    """GSM8K rows (question, answer) at ``indices`` as a benchmark file for the CLI."""
    from blackbox_audit.benchmarks import GSM8K_FILE, package_data

    raw = package_data(GSM8K_FILE).read_text(encoding="utf-8").splitlines()
    rows = []
    for k, i in enumerate(indices):
        row = {"id": f"gsm8k-{i}", **json.loads(raw[i])}
        if labels is not None:
            row["label"] = int(labels[k])
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=64, help="items trained on (half of the audited benchmark)")
    p.add_argument("--nonmembers", type=int, default=64, help="never-trained items (canary non-members)")
    p.add_argument("--calibration", type=int, default=128, help="more never-trained items (canary calibration)")
    p.add_argument("--seed", type=int, default=0, help="canary seed (which items, which half)")
    p.add_argument("--splits", type=int, default=50, help="random benchmark/held-out splits (>= 20)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--score", default="loss")
    p.add_argument("--part", default="output", choices=("output", "whole"))
    p.add_argument("--epochs", type=int, help="canary epochs (default: the canary's smollm2 default)")
    p.add_argument("--cache-dir", help="cache (default $BLACKBOX_AUDIT_CACHE or ~/.cache/blackbox-audit)")
    p.add_argument("--out", default="runs/contamination_eval", help="split 0's files and CLI command go here")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", choices=("clean", "finetuned"), help="evaluate one model only (default both)")
    p.add_argument(
        "--clean-null",
        choices=("fixed", "redraw"),
        default="fixed",
        help="unmodified model: 'fixed' audits the same benchmark as the fine-tuned model (the canary's members "
        "in every split); 'redraw' draws the benchmark afresh from all items each split, so the splits are "
        "independent checks of the set test's false-flag rate",
    )
    p.add_argument(
        "--heldout",
        choices=("known", "synthetic"),
        default="known",
        help="known: the never-trained items are the held-out side (above); synthetic: no held-out file, the "
        "check's default (calibrated DI's generated answers); see synthetic_eval",
    )
    p.add_argument("--sets", default=None, help="synthetic: comma-separated split numbers to run (resume/parallel)")
    p.add_argument("--json", default=None, help="synthetic: append one JSON line per split here")
    p.add_argument(
        "--generator",
        default=None,
        help="synthetic: the generator (smollm2 / gemma3-270m / hf:DIR / gguf:FILE; default the check's, SmolLM2-135M)",
    )
    p.add_argument(
        "--models", default=None, help="synthetic: contaminated,clean,other-items,fully-contaminated (default all)"
    )
    a = p.parse_args(argv)
    announce(argv)
    if a.heldout == "synthetic":
        return synthetic_eval(a)
    if a.splits < 20:
        p.error("--splits must be at least 20 (the FDR claim is measured across splits)")

    import torch

    torch.set_num_threads(a.threads)
    from dataclasses import replace

    from blackbox_audit.benchmarks import load_gsm8k
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
    from blackbox_audit.sim.canary import CanaryOptions, default_train_config, draw_split
    from blackbox_audit.sim.corpora import corpus_samples

    train = default_train_config("smollm2")
    if a.epochs:
        train = replace(train, epochs=a.epochs)
    opts = CanaryOptions(
        corpus="benchmark:gsm8k",
        base="smollm2",
        seed=a.seed,
        n_members=a.members,
        n_nonmembers=a.nonmembers,
        n_calibration=a.calibration,
        train=train,
    )
    gsm = load_gsm8k()
    split = draw_split(corpus_samples(opts.corpus), opts)  # the canary's own split, known before training

    def index(row) -> int:
        i = int(str(row["id"]).rsplit("-", 1)[1])
        if gsm.texts[i] != row["text"]:
            raise SystemExit(f"canary row {row['id']} is not GSM8K item {i} as formatted now: rebuild the canary")
        return i

    members = [index(r) for r in split["members"]]
    never = [index(r) for r in split["nonmembers"] + split["calibration"]]
    models = []
    if a.only != "finetuned":
        models.append(("unmodified SmolLM2", "smollm2"))
    if a.only != "clean":
        t0 = time.perf_counter()
        canary = get_canary(opts, cache_dir=a.cache_dir)
        if [r["id"] for r in canary.members] != [r["id"] for r in split["members"]]:
            raise SystemExit("the canary's members differ from the split computed here")
        print(
            f"canary {canary.path} ({time.perf_counter() - t0:.0f} s; card: epochs {canary.card.get('epochs')}, "
            f"final train loss {canary.card.get('final_train_loss')})"
        )
        models.insert(0, ("fine-tuned on half", canary.target_spec))
    n_m = len(members)
    print(
        f"GSM8K subset: {n_m} members (trained) + {len(never)} never-trained items; each split: benchmark = "
        f"{n_m} members + {n_m} never-trained (true rate 50%), held-out = the other {len(never) - n_m}"
    )
    if a.clean_null == "redraw" and a.only != "finetuned":
        print(
            f"unmodified SmolLM2 (--clean-null redraw): each split draws its benchmark of {2 * n_m} items afresh "
            f"from all {n_m + len(never)}, held-out = the other {len(never) - n_m} (true rate 0%)"
        )
    cfg = ContaminationConfig(score=a.score, part=a.part, alpha=a.alpha)
    workspace = open_workspace(a.cache_dir)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    try:
        for name, spec in models:
            target = open_cpu_target(workspace, spec)
            rows = []
            t1 = time.perf_counter()
            for s in range(a.splits):
                rng = np.random.default_rng([a.seed, 1000 + s])
                if a.clean_null == "redraw" and not name.startswith("fine"):
                    pool = members + never
                    order = rng.permutation(len(pool))
                    bench_idx = [pool[j] for j in order[: 2 * n_m]]
                    held_idx = [pool[j] for j in order[2 * n_m :]]
                    labels = [int(i in set(members)) for i in bench_idx]  # canary members: never trained here
                else:
                    order = rng.permutation(len(never))
                    bench_idx = members + [never[j] for j in order[:n_m]]
                    held_idx = [never[j] for j in order[n_m:]]
                    labels = [1] * n_m + [0] * n_m
                bench = labelled(gsm, bench_idx, labels)
                held = gsm.subset(held_idx)
                res = run_method(
                    Contamination(replace(cfg, seed=s)), workspace, target, data=bench, sets={"heldout": held},
                    progress=s == 0,
                )  # fmt: skip
                v = res.verdict
                truth = 1.0 if name.startswith("fine") else 0.0  # share of items the model was trained on
                lo, hi = v.estimate["rate_ci"]
                y = np.asarray(res.labels)
                flagged = np.asarray(res.fields["flagged"], dtype=bool)
                real_fdp = float((flagged & (y == 0)).sum() / max(1, flagged.sum())) if truth else float(flagged.any())
                rows.append(
                    {
                        "p": v.p_value,
                        "flagged_set": v.decision == "contaminated",
                        "rate": v.estimate["rate_estimate"],
                        "lo": lo,
                        "hi": hi,
                        "covers_truth": lo <= 0.5 * truth <= hi,  # hi = 1: a lower bound
                        "includes_zero": lo <= 0.0,
                        "n_flagged": v.estimate["n_flagged"],
                        "fdp": real_fdp,
                        "power": res.metrics.get("selection", {}).get("power") if truth else None,
                        "auc_members": res.metrics.get(a.score, {}).get("auc"),
                        "pac_rate": v.details["pac_style"]["rate"],
                        "pac_heldout": v.details["pac_style"]["heldout_rate"],
                    }
                )
                if s == 0:
                    print(f"[{name}] split 0: {v.statement} ({time.perf_counter() - t1:.0f} s incl. scoring)")
                    write_items(out / "split0_benchmark.jsonl", bench_idx, labels)
                    write_items(out / "split0_heldout.jsonl", held_idx)
                    cli = [
                        ".venv/bin/blackbox-audit",
                        "contamination",
                        "--benchmark",
                        str(out / "split0_benchmark.jsonl"),
                    ]
                    cli += ["--heldout", str(out / "split0_heldout.jsonl"), "--target", spec, "--score", a.score]
                    cli += [
                        "--part",
                        a.part,
                        "--alpha",
                        str(a.alpha),
                        "--out",
                        str(out / f"cli_{'ft' if truth else 'clean'}"),
                    ]
                    print(f"  the same split through the CLI: {shlex.join(cli)}")
            summary[name] = rows
            report(name, rows, a.alpha, truth=bool(name.startswith("fine")))
    finally:
        workspace.close()
    (out / "summary.json").write_text(json.dumps(stamped({"rows": summary}, argv), indent=2))
    print(f"per-split rows: {out / 'summary.json'}")
    return 0


class SyntheticDraws:
    """The synthetic mode's canary, targets and benchmarks (``synthetic_eval``; also read by
    ``contamination_reference.py``, which audits the same splits)."""

    def __init__(self, a) -> None:
        from blackbox_audit.benchmarks import load_gsm8k
        from blackbox_audit.sim.canary import CanaryOptions, default_train_config, draw_split
        from blackbox_audit.sim.corpora import corpus_samples

        train = default_train_config("smollm2")
        if a.epochs:
            from dataclasses import replace

            train = replace(train, epochs=a.epochs)
        # n_shifted=0: this mode uses no shifted set (the trained model is the same either way; the key differs)
        opts = CanaryOptions(corpus="benchmark:gsm8k", base="smollm2", seed=a.seed, n_members=a.members,
                             n_nonmembers=a.nonmembers, n_calibration=a.calibration, train=train,
                             n_shifted=0)  # fmt: skip
        self.seed = a.seed
        self.gsm = load_gsm8k()
        split = draw_split(corpus_samples(opts.corpus), opts)
        self.members = [int(str(r["id"]).rsplit("-", 1)[1]) for r in split["members"]]
        self.never = [int(str(r["id"]).rsplit("-", 1)[1]) for r in split["nonmembers"] + split["calibration"]]
        all_models = ["contaminated", "clean", "other-items", "fully-contaminated"]
        self.wanted = a.models.split(",") if a.models else all_models
        if set(self.wanted) - set(all_models):
            raise SystemExit(
                f"--models: unknown {sorted(set(self.wanted) - set(all_models))}; choose from {all_models}"
            )
        spec = get_canary(opts, cache_dir=a.cache_dir).target_spec if set(self.wanted) - {"clean"} else None
        self.models = {"contaminated": spec, "clean": "smollm2", "other-items": spec, "fully-contaminated": spec}
        self.todo = range(a.splits) if not a.sets else [int(x) for x in a.sets.split(",")]

    def indices(self, name: str, split: int) -> list[int]:
        """GSM8K rows of ``name``'s benchmark in ``split`` (both clean models audit the same redrawn
        benchmarks, so one generator per split serves both)."""
        members, never, n_m = self.members, self.never, len(self.members)
        draw = "other-items" if name == "clean" else name
        rng = np.random.default_rng([self.seed, 2000 + split, list(self.models).index(draw)])
        if name == "contaminated":
            return members + [never[j] for j in rng.permutation(len(never))[:n_m]]
        if name == "fully-contaminated":
            return [members[j] for j in rng.permutation(n_m)]
        return [never[j] for j in rng.permutation(len(never))[: 2 * n_m]]

    def benchmark(self, name: str, split: int):
        return self.gsm.subset(self.indices(name, split))


def synthetic_eval(a) -> int:
    """``--heldout synthetic``: the check as run with no held-out file, on three targets.

    - ``contaminated``: the fine-tuned canary; each split audits its 64 members + 64 never-trained
      items drawn afresh (true rate 50%): how often is the benchmark flagged (power)?
    - ``other-items``: the canary, auditing 128 items drawn afresh from its 192 never-trained ones (a
      model trained on *other* GSM8K items): how often is a clean benchmark flagged (validity)?
    - ``clean``: unmodified SmolLM2, auditing the same redrawn benchmarks as ``other-items`` (split s
      of one is split s of the other), so the two share each split's generator, generations and
      classifiers from the cache and a clean split costs only the target's scores;
    - ``fully-contaminated``: the canary, auditing its 64 members only (true rate 100%, as when a
      whole benchmark leaked into training), in an order drawn afresh, so each split trains its
      generator on another half (power).

    Every split trains its own generator on half its benchmark (cached by content). A model's splits
    redraw from one pool of items, so their benchmarks overlap: they are separate checks of the
    false-flag rate, not fully independent ones. One JSON line per split (``--json``);
    ``--sets`` runs some splits only (e.g. to spread them over processes); the table is printed from
    every line of the JSON file.
    """
    import torch

    torch.set_num_threads(a.threads)
    from blackbox_audit.methods.contamination import Contamination, ContaminationConfig

    draws = SyntheticDraws(a)
    wanted, models, todo = draws.wanted, draws.models, draws.todo
    cfg = ContaminationConfig(heldout="synthetic", part=a.part, alpha=a.alpha)
    if a.generator:
        from dataclasses import replace

        cfg = replace(cfg, generator=a.generator)
    out = open(a.json, "a") if a.json else None  # noqa: SIM115 - appended as splits finish
    workspace, rev = open_workspace(a.cache_dir), revision()
    try:
        for name in wanted:
            target = open_cpu_target(workspace, models[name])
            for s in todo:
                bench = draws.benchmark(name, s)
                t0, c0 = time.perf_counter(), time.process_time()
                res = run_method(
                    Contamination(replace_seed(cfg, s)), workspace, target, data=bench, cache_dir=a.cache_dir,
                    progress=False,
                )  # fmt: skip
                v = res.verdict
                row = {"model": name, "split": s, "generator": cfg.generator, "p": v.p_value,
                       "flagged": v.details["dataset_test"]["flagged"], "decision": v.decision,
                       "auc_text": v.estimate.get("auc_text"), "auc_comb": v.estimate.get("auc_comb"),
                       "pairs": v.details["dataset_test"]["n_pairs"], "bow_auc": v.details["shift_check"]["bow_auc"],
                       "wall_s": round(time.perf_counter() - t0), "cpu_s": round(time.process_time() - c0),
                       "revision": rev}  # fmt: skip
                emit(row, out)
    finally:
        workspace.close()
    if a.json:
        synthetic_table(read_rows(a.json), a.alpha)
    return 0


def replace_seed(cfg, seed: int):
    from dataclasses import replace

    return replace(cfg, seed=seed)


def synthetic_table(rows: list[dict], alpha: float) -> None:
    """Share of splits flagged per model, with its binomial standard error (a split run twice counts once)."""
    rows = list({(r["model"], r["split"]): r for r in rows}.values())
    print(f"{'model':<18} {'splits':>6} {'flagged':>8} {'share ± SE':>14} {'p median':>9} {'AUC_text':>8} "
          f"{'AUC_comb':>8} {'pairs':>5} {'CPU s':>6}")  # fmt: skip
    for name in ("contaminated", "fully-contaminated", "clean", "other-items"):
        part = [r for r in rows if r["model"] == name]
        if not part:
            continue
        k, n = sum(r["flagged"] for r in part), len(part)
        share = k / n
        se = (share * (1 - share) / n) ** 0.5
        print(f"{name:<18} {n:>6} {k:>8} {share:>7.2f} ± {se:.2f} {np.median([r['p'] for r in part]):>9.3g} "
              f"{np.mean([r['auc_text'] for r in part]):>8.3f} {np.mean([r['auc_comb'] for r in part]):>8.3f} "
              f"{np.mean([r['pairs'] for r in part]):>5.0f} {np.mean([r['cpu_s'] for r in part]):>6.0f}")  # fmt: skip
    print(f"(flagged = calibrated DI p < {alpha}; a valid check flags a clean benchmark with probability <= {alpha})")


def report(name: str, rows: list[dict], alpha: float, *, truth: bool) -> None:
    def mean_se(key: str) -> tuple[float, float]:
        v = np.asarray([r[key] for r in rows if r[key] is not None], dtype=np.float64)
        return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")

    n = len(rows)
    fl = sum(r["flagged_set"] for r in rows)
    rate, rate_se = mean_se("rate")
    low = float(np.mean([r["lo"] for r in rows]))
    pac, _ = mean_se("pac_rate")
    pac_h, _ = mean_se("pac_heldout")
    auc = [r["auc_members"] for r in rows if r["auc_members"] is not None]
    print(f"== {name} ({n} splits, alpha {alpha:g}) ==")
    print(f"  member-vs-non-member AUC of the score inside the benchmark: {np.mean(auc):.3f}" if auc else "")
    print(
        f"  dataset-level test flags the benchmark: {fl}/{n} splits (median p {np.median([r['p'] for r in rows]):.3g})"
    )
    if truth:
        cov = sum(r["covers_truth"] for r in rows)
        fdr, fdr_se = mean_se("fdp")
        pw, pw_se = mean_se("power")
        print(
            f"  rate: mean PTDI estimate {rate:.3f} ± {rate_se:.3f} (SE), mean lower bound {low:.3f}; "
            f"lower bound <= 50%: {cov}/{n}"
        )
        print(
            f"  flagged list: mean {np.mean([r['n_flagged'] for r in rows]):.1f} items; FDR (mean FDP) {fdr:.4f} ± "
            f"{fdr_se:.4f} (SE) vs alpha {alpha:g}; power {pw:.3f} ± {pw_se:.3f}"
        )
    else:
        inc = sum(r["includes_zero"] for r in rows)
        any_flag = sum(r["n_flagged"] > 0 for r in rows)
        print(f"  rate: mean PTDI estimate {rate:.3f}, mean lower bound {low:.3f}; lower bound at 0: {inc}/{n}")
        print(f"  flagged list: non-empty in {any_flag}/{n} splits (every flag here is false: nothing was trained)")
    print(
        f"  PAC-style thresholded rate: {pac:.3f} on the benchmark, {pac_h:.3f} on known non-members (same threshold)"
    )


if __name__ == "__main__":
    sys.exit(main())
