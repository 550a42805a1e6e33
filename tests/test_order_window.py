"""The order test's window statistic (``order_window``): exact under the null, and wired per access.

A stand-in target answers each read (everything before an item, the item's window) from the texts alone:
hash noise of the read, plus a lift when the item follows the context's last item in the file (a model
that trained on the file in order). Its greedy continuation is the start of the file successor of the
context's last item, or of a hash-chosen item. Then the real thing through the emulator's
``openai-chat`` profile (censored top-n reads), dry-run and run alike, and a rerun served by the cache.
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
from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import AuditInputs
from blackbox_audit.methods.contamination import Contamination, ContaminationConfig
from blackbox_audit.methods.contamination.order import OrderDesign, layout
from blackbox_audit.methods.contamination.order_window import read_window, window_layout
from blackbox_audit.sim.emulator import run_emulator


def _unit(text: str, salt: str) -> float:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class WindowAware(Target):
    """Read value = noise(read) + ``lift`` when the item follows the context's last line in ``lines``."""

    name = "window-aware"

    def __init__(self, lines: list[str], lift: float = 0.0, salt: str = "") -> None:
        self.lines = lines
        self.next_of = dict(itertools.pairwise(lines))
        self.lift, self.salt, self.reads, self.prompts = lift, salt, 0, 0
        self.capabilities = Capabilities(conditional=True)

    def fingerprint(self) -> str:
        return f"window-aware-{self.lift}-{self.salt}"

    def tokenize(self, text: str) -> list[int]:
        return [int(hashlib.sha256(w.encode()).hexdigest()[:6], 16) for w in text.split()]

    def decode(self, ids):  # pragma: no cover - not used
        raise AssertionError

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):  # pragma: no cover - not used
        raise AssertionError

    def _last_and_lead(self, prefix: str) -> tuple[str, str]:
        *before, lead = prefix.split("\n")
        return before[-1], lead

    def conditional_pairs(self, pairs, *, progress=True):
        self.reads += len(pairs)
        out = []
        for prefix, text in pairs:
            last, lead = self._last_and_lead(prefix)
            follows = self.next_of.get(last, "").startswith(lead + text)
            value = (_unit(prefix + "|" + text, self.salt) - 0.5) * 4 + self.lift * follows
            out.append(hand_record(text, [value] * max(1, len(text.split()))))
        return out

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        return self.conditional_pairs([(prefix, t) for t in texts])

    def generate(self, prompts, *, max_new_tokens=64, temperature=0.0, seed=None, top_k=None):
        self.prompts += len(prompts)
        replies = []
        for p in prompts:
            last, lead = self._last_and_lead(p)
            follow = self.next_of.get(last) if self.lift else None
            b = follow or self.lines[int(_unit(p, self.salt) * len(self.lines))]
            replies.append(b[len(lead) :])
        return replies


@pytest.fixture(scope="module")
def gsm8k():
    return load_gsm8k()


@pytest.fixture(scope="module")
def lines(gsm8k) -> list[str]:
    return Path(gsm8k.path).read_text(encoding="utf-8").splitlines()


def _stats(gsm8k, lines, seed: int, lift: float, read: str, shuffles: int):
    design = OrderDesign(shard_items=5, permutations=shuffles, items=40, offset=(seed * 37) % 1200, seed=seed)
    lay = window_layout(layout(gsm8k, design, texts=False), read, 4)
    stats, stopped = read_window(WindowAware(lines, lift=lift, salt=str(seed)), lay)
    assert stopped is None and len(stats.canonical) == 8
    return stats


def test_reads_nest_their_contexts_and_count_what_they_buy(gsm8k) -> None:
    design = OrderDesign(shard_items=5, permutations=2, items=10, offset=3)
    lay = window_layout(layout(gsm8k, design, texts=False), "exact", 4)
    assert lay.n_requests == 2 * (1 + 2) * (5 - 1)  # shards x orders x places after the first
    canonical = lay.orders(0)[0]
    items = lay.items(0, canonical)
    units = lay.order.units[0]
    assert [c for c, _ in items] == ["".join(units[:t]) + lay.lead for t in range(1, 5)]
    assert all(units[t].startswith(lay.lead + text) for t, (_, text) in enumerate(items, start=1))
    assert len(lay.fetch_calls()) == lay.n_requests
    greedy = window_layout(layout(gsm8k, design, texts=False), "greedy", 4).fetch_calls()
    assert len(greedy) == 1 and len(greedy[0].texts) == lay.n_requests


@pytest.mark.parametrize("read", ["exact", "greedy"])
def test_null_false_flag_rate_on_an_order_blind_target(gsm8k, lines, read: str) -> None:
    """Reads that ignore the file order: each p-value flags at most alpha + 3 SE over 200 blocks."""
    stats = [_stats(gsm8k, lines, s, 0.0, read, 9) for s in range(200)]
    se = np.sqrt(0.05 * 0.95 / len(stats))
    for p in ([st.p_exact for st in stats], [st.p_sum for st in stats]):
        assert np.mean(np.asarray(p) <= 0.05) <= 0.05 + 3 * se


@pytest.mark.parametrize("read", ["exact", "greedy"])
def test_detects_a_target_that_learned_the_order_with_two_shuffles(gsm8k, lines, read: str) -> None:
    pvals = np.array([_stats(gsm8k, lines, s, 2.0, read, 2).p_sum for s in range(20)])
    assert np.mean(pvals <= 0.05) >= 0.9


def test_through_the_method_and_its_records(gsm8k, lines) -> None:
    cfg = ContaminationConfig(heldout="order", items=30, order_statistic="window", order_read="exact", sequential=False)
    target = WindowAware(lines, lift=3.0)
    result = Contamination(cfg).run(AuditInputs(data=gsm8k, target=target))
    assert target.reads == 3 * 3 * 9  # 3 shards of 10, 3 orders, 9 places
    assert result.verdict.decision == "contaminated" and "window (exact) statistic" in result.verdict.statement
    held = result.provenance["contamination"]["heldout"]
    assert held["window"]["tokens"] == 16 and held["combine"] == "sum"
    assert held["reach"]["smallest_passes"] is None and "not measured at this design" in held["reach"]["text"]


# ----------------------------------------------------------------------------- through the emulator
def _bench(tmp: Path) -> Path:
    path = tmp / "b.jsonl"
    rows = [(f"What is {a} plus {a + 3}?", f"{a} plus {a + 3} makes {2 * a + 3}.") for a in range(1, 11)]
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in rows))
    return path


def contamination_cli(emu, bench: Path, tiny_lm_dir, tmp_path: Path) -> list[str]:
    """``contamination`` on the emulator's model, priced at gpt-4o-mini's list prices, with a $1 cap."""
    pricing = tmp_path / "price.json"
    pricing.write_text(json.dumps({"models": {emu.model: {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.6}}}))
    cli = ["contamination", "--benchmark", str(bench), "--target", emu.target_spec, "--tokenizer"]
    cli += [f"hf:{tiny_lm_dir}", "--pricing", str(pricing), "--budget-usd", "1", "--cache-dir", str(tmp_path / "c")]
    return cli


@pytest.mark.timeout(900)
def test_a_chat_endpoint_reads_censored_windows_priced_first(tiny_target, tiny_lm_dir, tmp_path, capsys) -> None:
    bench = _bench(tmp_path)
    with run_emulator(tiny_target, "openai-chat") as emu:
        cli = contamination_cli(emu, bench, tiny_lm_dir, tmp_path)
        cli += ["--order-statistic", "window", "--order-successor-tokens", "2", "--order-shard-items", "5"]
        cli += ["--out", str(tmp_path / "o")]
        assert main([*cli, "--dry-run"]) == 0
        planned = capsys.readouterr().out
        assert "order statistic: window (censored) (as configured)" in planned
        assert "order test (window statistic): 10 items in 2 shards" in planned
        assert "24 censored top-20 reads" in planned
        high = re.search(r"requests:\s+[\d,]+ – ([\d,]+)", planned).group(1)  # the range's high end
        assert main(cli) == 0
        run = json.loads((tmp_path / "o" / "run.json").read_text())
        assert run["contamination"]["heldout"]["window"]["read"] == "censored"
        sent = run["usage"]["requests_sent"]
        assert 0 < sent <= int(high.replace(",", ""))
        assert main(cli) == 0  # a rerun: every answer from the cache
        assert json.loads((tmp_path / "o" / "run.json").read_text())["usage"]["requests_sent"] == 0


@pytest.mark.parametrize(
    ("framing", "hinted"), [("unknown", True), ("plain", True), ("user-turn", False), ("prefill", False)]
)
def test_only_an_endpoint_that_could_echo_is_told_a_probe_may_read_the_full_statistic(framing, hinted) -> None:
    """A chat endpoint (the text in the user turn or prefilled) never echoes its prompt, so its unprobed
    dry-run must not promise the full statistic after a probe; an endpoint of unknown kind may echo."""
    from blackbox_audit.methods.contamination.order_run import resolve_access

    class Unprobed:
        api, logprobs, probed, name, shape = True, True, False, "gemini:gemini-2.0-flash", None

    Unprobed.framing = framing
    _, record = resolve_access(ContaminationConfig(heldout="order"), Unprobed())
    assert ("an echo endpoint reads the full statistic once probed" in record["rule"]) is hinted


@pytest.mark.timeout(900)
def test_auto_reads_the_window_on_a_prefilled_top_n_chat_endpoint(
    tiny_target, tiny_lm_dir, tmp_path, capsys, monkeypatch
) -> None:
    """``--prefill`` on a chat endpoint with top-n logprobs (a Gemini model that accepts one): the default
    order test is the window statistic, the one measured to keep the order signal through that framing;
    the same endpoint without a prefill keeps the successor statistic."""
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    bench = _bench(tmp_path)
    with run_emulator(tiny_target, "gemini") as emu:
        cli = contamination_cli(emu, bench, tiny_lm_dir, tmp_path)
        cli += ["--order-successor-tokens", "2", "--order-shard-items", "5", "--out", str(tmp_path / "o")]
        assert main([*cli, "--dry-run"]) == 0
        assert "order statistic: successor (censored) (" in capsys.readouterr().out
        cli += ["--prefill", "Continue the document."]
        assert main([*cli, "--dry-run"]) == 0
        planned = capsys.readouterr().out
        assert "order statistic: window (censored) (endpoint with top-n logprobs and the text as the start" in planned
        assert "order test (window statistic): 10 items in 2 shards" in planned
        assert "text framed prefill" in planned  # k = 2 here is no measured design: its reach says so
        assert main(cli) == 0
        run = json.loads((tmp_path / "o" / "run.json").read_text())
        assert run["contamination"]["choices"]["order_statistic"]["chosen"] == "window (censored)"
        assert run["contamination"]["heldout"]["window"]["read"] == "censored"
        assert run["contamination"]["heldout"]["reach"]["design"].endswith("text framed prefill")
