"""ReCaLL / Con-ReCall: formulas by hand, conventions, gamma sweep, prefix files, KV fast path == naive.

The pinned values against the authors' formulas are in ``test_conformance.py``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.cli import main
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.fixtures.records import hand_record as record
from blackbox_audit.scores import compute_scores, plan_requests
from blackbox_audit.scores.recall import GAMMA_GRID, build_prefix, conditional_ll, recall_ratio


class PrefixTarget(Target):
    """Plain records from ``plain``; conditional ones from ``cond[(prefix, text)]``; records calls."""

    def __init__(self, plain: dict, cond: dict, *, conditional: bool = True) -> None:
        self.name = "prefix-table"
        self.capabilities = Capabilities(conditional=conditional)
        self.plain, self.cond = plain, cond
        self.calls: list[tuple] = []

    def fingerprint(self) -> str:
        return "prefix-table"

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids: Sequence[int]) -> str:
        return ""

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        self.calls.append(("plain", tuple(texts)))
        return [record(t, self.plain[t]) for t in texts]

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        self.calls.append(("conditional", prefix, tuple(texts)))
        return [record(t, self.cond[(prefix, t)]) for t in texts]


def write_lines(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    nm = write_lines(tmp_path / "nm.jsonl", [{"text": "nm one"}, {"text": "nm two"}, {"text": "nm three"}])
    m = write_lines(tmp_path / "m.jsonl", [{"text": "m one", "label": 1}, {"text": "x text", "label": 1}])
    return {"nm": nm, "m": m}


def test_prefix_separators() -> None:
    assert build_prefix(["nm one", "nm two"]) == "nm onenm two"  # the authors' "".join
    assert build_prefix(["nm one", "nm two"], "space") == "nm one nm two"  # EM-MIA's " ".join
    assert build_prefix(["nm one", "nm two"], "paragraph") == "nm one\n\nnm two\n\n"  # before issue 11
    with pytest.raises(UserError, match="separator"):
        build_prefix(["a"], "tab")


def test_recall_by_hand_scores_every_conditional_position_by_default(files) -> None:
    x = "x text"
    plain = {x: [-2.0, -4.0]}  # u_2, u_3: LL(x) = -3
    p = build_prefix(["nm one", "nm two"])
    q = build_prefix(["nm one", "nm two"], "paragraph")
    cond = {(p, x): [-9.0, -5.0, -7.0], (q, x): [-9.0, -5.0, -7.0]}  # u_1, u_2, u_3
    target = PrefixTarget(plain, cond)
    base = f"recall:prefixes={files['nm']}:shots=2"
    got = compute_scores(target, [x], [base, f"{base}:first_token=false", f"{base}:sep=paragraph"], progress=False)
    assert got[base][0] == pytest.approx(((-9.0 - 5.0 - 7.0) / 3) / -3.0)  # LL(x|p) over u_1..u_3
    assert got[f"{base}:first_token=false"][0] == pytest.approx(((-5.0 - 7.0) / 2) / -3.0)  # over u_2..u_3
    assert got[f"{base}:sep=paragraph"][0] == pytest.approx(got[base][0])  # same record values, other prefix
    assert ("conditional", p, (x,)) in target.calls and ("conditional", q, (x,)) in target.calls


def test_conrecall_by_hand_and_member_prefix_excludes_the_text_itself(files) -> None:
    x = "x text"  # also in the member prefix file: its member prefix must leave it out
    nm = build_prefix(["nm one", "nm two", "nm three"])
    m = build_prefix(["m one"])
    plain = {x: [-2.0, -4.0]}  # LL = -3
    cond = {(nm, x): [0.0, -6.0, -6.0], (m, x): [0.0, -1.0, -2.0]}  # LL_nm = -4, LL_m = -1 (u_1..u_3)
    spec = f"conrecall:prefixes={files['nm']}:member_prefixes={files['m']}:gamma=0.5"
    got = list(compute_scores(PrefixTarget(plain, cond), [x], spec, progress=False).values())[0][0]
    assert got == pytest.approx((-4.0 - 0.5 * -1.0) / -3.0)  # (LL_nm - gamma LL_m) / LL
    legacy = list(compute_scores(PrefixTarget(plain, cond), [x], f"{spec}:first_token=false").values())[0][0]
    assert legacy == pytest.approx((-6.0 - 0.5 * -1.5) / -3.0)  # u_2..u_3 only
    # gamma = 0 is ReCaLL with the same non-member prefix
    spec0 = f"conrecall:prefixes={files['nm']}:member_prefixes={files['m']}:gamma=0"
    got0 = list(compute_scores(PrefixTarget(plain, cond), [x], spec0, progress=False).values())[0][0]
    assert got0 == pytest.approx(-4.0 / -3.0)


def test_conrecall_gamma_sweep_is_one_column_per_gamma_from_the_same_records(files) -> None:
    x = "x text"
    nm, m = build_prefix(["nm one", "nm two", "nm three"]), build_prefix(["m one"])
    plain = {x: [-2.0, -4.0]}
    cond = {(nm, x): [0.0, -6.0, -6.0], (m, x): [0.0, -1.0, -2.0]}
    base = f"conrecall:prefixes={files['nm']}:member_prefixes={files['m']}"
    target = PrefixTarget(plain, cond)
    table = compute_scores(target, [x], f"{base}:gamma=sweep", progress=False)
    assert list(table) == [f"{base}:gamma={g}" for g in GAMMA_GRID]
    assert GAMMA_GRID == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    for g in GAMMA_GRID:
        assert table[f"{base}:gamma={g}"][0] == pytest.approx((-4.0 - g * -1.0) / -3.0)
    assert len(target.calls) == 3  # one plain and two conditional calls, however many gammas
    assert len(plan_requests([x], f"{base}:gamma=sweep").unique) == 3
    with pytest.raises(UserError, match="cannot be swept"):
        plan_requests([x], f"{base}:shots=sweep")


def test_prefix_files_are_checked_before_any_call(files, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        plan_requests(["a b"], f"recall:prefixes={tmp_path / 'missing.txt'}")
    with pytest.raises(UserError, match="labelled 1"):  # a member in the non-member file
        plan_requests(["a b"], f"recall:prefixes={files['m']}")
    with pytest.raises(UserError, match="needs parameter"):
        plan_requests(["a b"], "recall")
    with pytest.raises(UserError):
        plan_requests(["a b"], f"recall:prefixes={files['nm']}:shots=0")
    with pytest.raises(UserError, match="separator"):
        plan_requests(["a b"], f"recall:prefixes={files['nm']}:sep=tab")
    target = PrefixTarget({}, {}, conditional=False)
    with pytest.raises(CapabilityError):
        compute_scores(target, ["a b"], f"recall:prefixes={files['nm']}", progress=False)
    assert target.calls == []


def test_positions_align_on_a_real_model(tiny_target) -> None:
    """Conditional records score u_1..u_L, plain ones u_2..u_L: same tokens after dropping one."""
    x, p = "The quick brown fox jumps over the lazy dog.", "Some unrelated context text.\n\n"
    plain = tiny_target.token_logprobs([x], progress=False)[0]
    cond = tiny_target.conditional_logprobs(p, [x], progress=False)[0]
    assert len(cond) == len(plain) + 1
    np.testing.assert_array_equal(cond.token_ids[1:], plain.token_ids)
    assert np.isfinite(recall_ratio(cond, plain))
    assert conditional_ll(cond) == pytest.approx(float(np.mean(cond.logprobs)))  # u_1..u_L
    assert conditional_ll(cond, first_token=False) == pytest.approx(float(np.mean(cond.logprobs[1:])))


def test_kv_fast_path_equals_naive_concatenation(tiny_target) -> None:
    import copy

    from blackbox_audit.sim.tiny_models import sample_texts

    tiny_target = copy.copy(tiny_target)
    tiny_target.conditional_path = "kv"  # the short prefix would go naive under the cost model
    texts = [" ".join(t.split()[: 12 + 3 * i]) for i, t in enumerate(sample_texts(6))]
    prefixes = [build_prefix(sample_texts(9)[6:8]), build_prefix(["A short prefix."])]
    plain = tiny_target.token_logprobs(texts, progress=False)
    for p in prefixes:
        fast = tiny_target.conditional_logprobs(p, texts, progress=False)
        naive = tiny_target.conditional_logprobs_naive(p, texts, progress=False)
        for f, n, u in zip(fast, naive, plain, strict=True):
            np.testing.assert_allclose(f.logprobs, n.logprobs, atol=1e-4)
            assert recall_ratio(f, u) == pytest.approx(recall_ratio(n, u), abs=1e-4)


def test_long_prefix_is_truncated_with_one_warning(tiny_target, caplog, recwarn) -> None:
    long_prefix = "word " * (tiny_target.max_context + 50)
    tiny_target = copy.copy(tiny_target)
    tiny_target._said = set()  # a fresh run's target: nothing said yet
    for _ in range(2):  # a prefix used again (another batch) is not announced again
        rec = tiny_target.conditional_logprobs(long_prefix, ["A sentence to score here."], progress=False)[0]
    said = [r.getMessage() for r in caplog.records if "keeping only the last" in r.getMessage()]
    assert len(said) == 1 and not [w for w in recwarn if "keeping only the last" in str(w.message)]
    assert len(rec.context_ids) < tiny_target.max_context


def test_recall_from_the_cli_on_the_tiny_model(tiny_lm_dir, tmp_path: Path, capsys) -> None:
    from blackbox_audit.sim.tiny_models import sample_texts

    texts = [" ".join(t.split()[:20]) for t in sample_texts(10)]
    data = write_lines(
        tmp_path / "d.jsonl", [{"id": f"s{i}", "text": t, "label": i % 2} for i, t in enumerate(texts[:6])]
    )
    nm = write_lines(tmp_path / "nm.jsonl", [{"text": t} for t in texts[6:9]])
    out = tmp_path / "out"
    rc = main(
        ["score", "--target", f"hf:{tiny_lm_dir}", "--data", data, "--out", str(out), "--no-cache",
         "--scores", f"loss,pac,recall:prefixes={nm}:shots=2"]
    )  # fmt: skip
    assert rc == 0
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    key = f"recall:prefixes={nm}:shots=2"
    assert len(rows) == 6 and all(np.isfinite(r[key]) and np.isfinite(r["pac"]) for r in rows)
    assert json.loads((out / "metrics.json").read_text())[key]["n"] == 6


def test_pac_and_recall_from_the_cli_through_the_emulator(tiny_target, tmp_path: Path) -> None:
    """The same scores on an API target (openai-chat emulator over the tiny model)."""
    from blackbox_audit.sim.emulator import run_emulator

    texts = ["The cat sat on the warm mat.", "A dog ran fast in the park.", "Rain fell on the old town."]
    data = write_lines(tmp_path / "d.jsonl", [{"id": f"s{i}", "text": t} for i, t in enumerate(texts)])
    nm = write_lines(tmp_path / "nm.jsonl", [{"text": "Bread is baked in ovens."}])
    out = tmp_path / "out"
    spec = f"pac:n=2,recall:prefixes={nm}"
    with run_emulator(tiny_target, "openai-chat") as emu:
        rc = main(["score", "--target", f"compat:{emu.base_url}#{emu.model}", "--data", data, "--out", str(out),
                   "--no-cache", "--scores", spec])  # fmt: skip
    assert rc == 0
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(r["pac:n=2"]) for r in rows)
    assert all(np.isfinite(r[f"recall:prefixes={nm}"]) for r in rows)
