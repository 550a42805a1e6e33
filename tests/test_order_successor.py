"""The order test's successor statistic (``order_successor``): exact under the null, and wired per access.

Stand-in targets answer each pair (item a, start of item b) from the items alone: hash noise of the
pair, plus a lift when b follows a in the file (a model that trained on the file in order). The
greedy stand-in continues item a with the start of a hash-chosen item, or of a's file successor.
Then the real thing through the emulator: the ``openai-chat`` profile gets censored top-n reads, the
``anthropic`` profile (text only) greedy continuations, both chosen by ``auto`` in the dry-run and the
run alike, and a rerun is served by the cache.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.benchmarks import load_gsm8k
from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination.order import OrderDesign, layout
from blackbox_audit.methods.contamination.order_successor import (
    lead_of,
    path_sums,
    read_successor,
    snippet,
    successor_layout,
)
from blackbox_audit.sim.emulator import run_emulator


def _unit(text: str, salt: str) -> float:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class PairAware(Target):
    """Pair value = noise(pair) + ``lift`` when b follows a in ``lines`` (jsonl units: one line each)."""

    name = "pair-aware"

    def __init__(self, lines: list[str], lift: float = 0.0, salt: str = "") -> None:
        self.lines = lines
        self.next_of = dict(itertools.pairwise(lines))
        self.lift, self.salt, self.pairs, self.prompts = lift, salt, 0, 0
        self.capabilities = Capabilities(conditional=True)

    def fingerprint(self) -> str:
        return f"pair-aware-{self.lift}-{self.salt}"

    def tokenize(self, text: str) -> list[int]:
        return [int(hashlib.sha256(w.encode()).hexdigest()[:6], 16) for w in text.split()]

    def decode(self, ids):  # pragma: no cover - not used
        raise AssertionError

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):  # pragma: no cover - not used
        raise AssertionError

    def _follows(self, prefix: str, text: str) -> bool:
        a, lead = prefix.split("\n", 1)
        return self.next_of.get(a, "").startswith(lead + text)

    def conditional_pairs(self, pairs, *, progress=True):
        self.pairs += len(pairs)
        out = []
        for prefix, text in pairs:
            value = (_unit(prefix + "|" + text, self.salt) - 0.5) * 4 + self.lift * self._follows(prefix, text)
            out.append(hand_record(text, [value] * max(1, len(text.split()))))
        return out

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        return self.conditional_pairs([(prefix, t) for t in texts])

    def generate(self, prompts, *, max_new_tokens=64, temperature=0.0, seed=None, top_k=None):
        self.prompts += len(prompts)
        replies = []
        for p in prompts:
            a, lead = p.split("\n", 1)
            follow = self.next_of.get(a) if self.lift else None
            b = follow or self.lines[int(_unit(p, self.salt) * len(self.lines))]
            replies.append(b[len(lead) :])
        return replies


@pytest.fixture(scope="module")
def gsm8k():
    return load_gsm8k()


@pytest.fixture(scope="module")
def lines(gsm8k) -> list[str]:
    return Path(gsm8k.path).read_text(encoding="utf-8").splitlines()


def _p(gsm8k, lines, seed: int, lift: float, read: str) -> float:
    design = OrderDesign(shard_items=5, permutations=199, items=40, offset=(seed * 37) % 1200, seed=seed)
    lay = successor_layout(layout(gsm8k, design, texts=False), read, 4)
    stats, stopped = read_successor(PairAware(lines, lift=lift, salt=str(seed)), lay)
    assert stopped is None and len(stats.canonical) == 8
    return stats.p_exact


def test_lead_and_snippet() -> None:
    units = ['{"question": "James runs"}\n', '{"question": "Janet lays"}\n', '{"question": "Jo"}\n']
    assert lead_of(units) == '{"question": "'  # cut back to a word boundary: "J" says nothing
    assert lead_of(["Question: a\n\n", "Question: b\n\n"]) == "Question:"  # no trailing space (prefill)
    assert snippet(" Natalia sold clips to 48 of her friends", 3) == " Natalia sold clips"
    assert snippet(" two words", 4) == " two words"


def test_path_sums_read_adjacent_pairs() -> None:
    m = np.arange(16, dtype=float).reshape(4, 4)
    assert path_sums(m, np.array([[0, 1, 2, 3], [3, 2, 1, 0]])).tolist() == [1 + 6 + 11, 14 + 9 + 4]


@pytest.mark.parametrize("read", ["exact", "greedy"])
def test_null_false_flag_rate_on_an_order_blind_target(gsm8k, lines, read: str) -> None:
    """Pair values that ignore the file order: flagged at most alpha + 3 SE over 200 blocks."""
    pvals = np.array([_p(gsm8k, lines, s, 0.0, read) for s in range(200)])
    se = np.sqrt(0.05 * 0.95 / len(pvals))
    assert np.mean(pvals <= 0.05) <= 0.05 + 3 * se


@pytest.mark.parametrize("read", ["exact", "greedy"])
def test_detects_a_target_that_learned_the_transitions(gsm8k, lines, read: str) -> None:
    pvals = np.array([_p(gsm8k, lines, s, 2.0, read) for s in range(20)])
    assert np.mean(pvals <= 0.05) >= 0.9


def test_reads_per_shard_and_the_verdict(gsm8k, lines) -> None:
    """n (n - 1) pair reads per shard of n items, or one continuation per item; the verdict names the statistic."""
    cfg = {"heldout": "order", "items": 30, "order_statistic": "successor", "sequential": False}
    target = PairAware(lines, lift=3.0)
    result = Contamination(ContaminationConfig(**cfg, order_read="exact")).run(AuditInputs(data=gsm8k, target=target))
    assert target.pairs == 6 * 5 * 4 and result.verdict.decision == "contaminated"
    assert "successor (exact) statistic" in result.verdict.statement
    assert result.provenance["contamination"]["heldout"]["successor"]["lead"] == '{"question": "'
    target = PairAware(lines, lift=0.0)
    result = Contamination(ContaminationConfig(**cfg, order_read="greedy")).run(AuditInputs(data=gsm8k, target=target))
    assert target.prompts == 30 and result.verdict.decision == "not detected"
    assert result.fields["canonical_T"] and "clean" not in result.verdict.statement.lower()


def test_bad_options_are_one_clear_error() -> None:
    with pytest.raises(UserError, match="order_read"):
        ContaminationConfig(heldout="order", order_statistic="full", order_read="greedy").validate()
    with pytest.raises(UserError, match="order_statistic"):
        ContaminationConfig(heldout="order", order_statistic="fast").validate()  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- through the emulator
def _bench(tmp: Path) -> Path:
    path = tmp / "b.jsonl"
    rows = [(f"What is {a} plus {a + 3}?", f"{a} plus {a + 3} makes {2 * a + 3}.") for a in range(1, 11)]
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("profile", "chosen"), [("openai-chat", "successor (censored)"), ("anthropic", "successor (greedy)")]
)
def test_auto_chooses_by_access_in_the_dry_run_and_the_run(
    tiny_target, tiny_lm_dir, tmp_path, capsys, monkeypatch, profile, chosen
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    bench = _bench(tmp_path)
    model = {"anthropic": "claude-emu"}.get(profile)
    with run_emulator(tiny_target, profile, model=model) as emu:
        spec = f"anthropic:{emu.base_url}#{emu.model}" if profile == "anthropic" else emu.target_spec
        pricing = tmp_path / "price.json"
        pricing.write_text(
            json.dumps({"models": {emu.model: {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6}}})
        )
        cli = ["contamination", "--benchmark", str(bench), "--target", spec, "--tokenizer"]
        cli += [f"hf:{tiny_lm_dir}", "--pricing", str(pricing), "--budget-usd", "1", "--cache-dir", str(tmp_path / "c")]
        cli += ["--order-successor-tokens", "2", "--out", str(tmp_path / "o")]
        assert main([*cli, "--dry-run"]) == 0
        planned = capsys.readouterr().out
        assert "order test (successor statistic): 10 items in 2 shards" in planned
        assert f"order statistic: {chosen} (" in planned and "held-out side: order (no held-out set" in planned
        requests = int(re.search(r"requests:\s+([\d,]+)", planned).group(1).replace(",", ""))
        assert main(cli) == 0
        run = json.loads((tmp_path / "o" / "run.json").read_text())
        assert run["contamination"]["choices"]["order_statistic"]["chosen"] == chosen
        sent = run["usage"]["requests_sent"]
        assert 0 < sent <= requests  # the dry-run's count is an upper bound (shared first positions are cached)
        if profile == "anthropic":
            assert run["contamination"]["heldout"]["successor"]["continuation"] == "prefill"
        assert main(cli) == 0  # a rerun: every answer from the cache
        assert json.loads((tmp_path / "o" / "run.json").read_text())["usage"]["requests_sent"] == 0
