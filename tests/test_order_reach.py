"""The order test's reach: the measured table it ships, and what a dry-run and a verdict say with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from blackbox_audit.methods.contamination import ContaminationConfig
from blackbox_audit.methods.contamination.order_reach import (
    POWER,
    REACH_FILE,
    DesignKey,
    expected_cpu_s,
    reach_of,
    reach_rows,
)

ROOT = Path(__file__).resolve().parents[1]


def _default_key(statistic: str, read: str, framing: str = "plain") -> DesignKey:
    from blackbox_audit.methods.contamination.order_run import combine_of, design_of, tokens_of

    cfg = ContaminationConfig(heldout="order", order_statistic=statistic, order_read="auto")
    d = design_of(cfg)
    tokens = None if statistic == "full" else tokens_of(cfg)
    return DesignKey(statistic, read, d.shard_items, d.permutations, combine_of(cfg), "jsonl", tokens, framing)


#: what ``resolve_access`` chooses by access (tests/test_order_access.py), with the framing of its reads
DEFAULT_READS = [
    ("full", "exact", "plain"),
    ("successor", "exact", "plain"),
    ("successor", "censored", "user-turn"),
    ("successor", "greedy", "prefill"),
    ("window", "censored", "prefill"),
]


@pytest.mark.parametrize(("statistic", "read", "framing"), DEFAULT_READS)
def test_every_default_design_has_a_measured_row(statistic: str, read: str, framing: str) -> None:
    """Whatever access chooses, the default's verdict can state its measured reach (never a guess)."""
    reach = reach_of(_default_key(statistic, read, framing), 100)
    assert reach.row is not None
    assert reach.text().startswith("reach: ")


def test_rows_are_counts_with_their_command_and_a_revision_of_this_repository() -> None:
    for row in reach_rows():
        bench = row.get("bench", "bench/order_test_eval.py")
        assert (ROOT / bench).exists() and f"python {bench} " in row["command"]
        assert row["command"].startswith("python bench/")
        for c in [*row["passes"].values(), *([row["clean"]] if row.get("clean") else [])]:
            assert 0 <= c["flagged"] <= c["n"] and c["n"] >= 1
        if (ROOT / ".git").exists():
            git = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", row["revision"] + "^{commit}"], check=False)
            assert git.returncode == 0, f"{row['revision']} is not a commit of this repository"
    assert REACH_FILE.name in {p.name for p in REACH_FILE.parent.iterdir()}  # ships beside the module


def test_reach_names_the_smallest_pass_count_at_the_power_threshold() -> None:
    reach = reach_of(_default_key("successor", "exact"), 100)
    flagged = {int(k): c["flagged"] / c["n"] for k, c in reach.row["passes"].items()}
    want = min(k for k, share in flagged.items() if share >= POWER)
    assert reach.smallest_passes == want
    assert f"trained {want} times in file order" in reach.text()
    assert "this run reads" not in reach.text()  # the table's own block size
    assert "this run reads 40 items" in reach_of(_default_key("successor", "exact"), 40).text()


def test_no_power_and_unmeasured_designs_say_so_and_name_what_would_have_power() -> None:
    none = reach_of(_default_key("successor", "greedy", "prefill"), 100)
    assert none.smallest_passes is None and "no measured power at this access" in none.text()
    assert "--heldout FILE" in none.text() and "--probe" in none.text()
    odd = reach_of(DesignKey("full", "exact", 7, 5, "sum", "jsonl"), 100)
    assert odd.row is None and odd.text().startswith("reach: not measured at this design (full (exact), 7-item")
    assert odd.to_json()["smallest_passes"] is None
    # the same design read through another framing is another design: its figures do not carry over
    moved = reach_of(_default_key("successor", "censored", "prefill"), 100)
    assert moved.row is None and "text framed prefill" in moved.text() and "--prefill" not in moved.text()
    user_turn = reach_of(_default_key("successor", "censored", "user-turn"), 100)
    assert "no measured power" in user_turn.text() and "--prefill 'Continue the document.'" in user_turn.text()
    # the window that has power prefilled has none measured in the user turn (OpenAI's chat)
    window = reach_of(_default_key("window", "censored", "user-turn"), 100)
    assert window.row is not None and window.smallest_passes is None and "no measured power" in window.text()
    assert reach_of(_default_key("window", "censored", "prefill"), 100).smallest_passes is not None


def test_expected_cpu_time_scales_with_positions_and_parameters() -> None:
    one, measured = expected_cpu_s(1000, 100_000_000)
    assert expected_cpu_s(2000, 100_000_000)[0] == pytest.approx(2 * one)
    assert expected_cpu_s(1000, 200_000_000)[0] == pytest.approx(2 * one)
    rate = measured["cpu_s_per_block"] / (measured["positions_per_block"] * measured["parameters"])
    assert one == pytest.approx(rate * 1000 * 100_000_000)
    assert expected_cpu_s(1000, None) is None


def test_views_say_where_the_text_sits(tiny_target) -> None:
    """The framing that the reach key reads: a local model plain, or as the chat API it is conditioned as;
    an endpoint by its API and prefill."""
    from blackbox_audit.adapters.chat_templates import ChatConditioning
    from blackbox_audit.planning import endpoint_view, local_view

    assert local_view(tiny_target).framing == "plain"
    assert local_view(tiny_target.with_chat(ChatConditioning("chatml"))).framing == "user-turn"
    prefilled = tiny_target.with_chat(ChatConditioning("chatml", prefill="Continue the document."))
    assert local_view(prefilled).framing == "prefill"
    views = {
        (chat, prefill): endpoint_view("e", "m", len, price=None, chat=chat, prefill=prefill).framing
        for chat in (True, False, None)
        for prefill in (False, True)
    }
    assert views == {
        (True, False): "user-turn",
        (False, False): "plain",
        (None, False): "unknown",
        (True, True): "prefill",
        (False, True): "prefill",
        (None, True): "prefill",
    }
