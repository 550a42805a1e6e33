"""The Python API (docs/python.md): its offline example runs as written, and its objects refuse bad input
in one line, as the CLI does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import blackbox_audit as ba
from blackbox_audit.errors import UserError

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.slow
def test_the_documented_offline_example_runs(capsys) -> None:
    blocks = _python_blocks(DOC.read_text())
    offline = [b for b in blocks if "run_emulator" in b]
    assert len(offline) == 1, "docs/python.md keeps one offline example"
    exec(compile(offline[0], str(DOC), "exec"), {"__name__": "docs_python_example"})
    out = capsys.readouterr().out
    assert "requests" in out  # the plan, printed before the run
    assert "loss_cens" in out and "min_k_cens" in out  # the result's table


def test_the_api_is_reached_from_the_package() -> None:
    assert ba.Session is ba.api.Session and callable(ba.target) and callable(ba.run) and callable(ba.plan)
    with pytest.raises(AttributeError):
        ba.no_such_thing  # noqa: B018


def test_the_rate_limit_wait_is_a_session_keyword_as_it_is_a_flag_and_a_spec_key(tmp_path: Path) -> None:
    with ba.Session(cache_dir=tmp_path / "c", rate_limit_wait_s=7.5, max_retries=2) as session:
        assert session.workspace.engine.rate_limit_wait_s == 7.5
        assert session.workspace.engine.max_retries == 2


def test_a_target_takes_the_options_an_audit_spec_takes_for_its_kind(tiny_target, tiny_lm_dir, tmp_path) -> None:
    """The recovery's options reach an API target from Python as from a spec's [targets] table:
    the loaded target's ladder uses them."""
    from blackbox_audit.auditspec import TARGET_EXTRA
    from blackbox_audit.sim.emulator import run_emulator

    assert set(ba.target("openai:gpt-4o-mini", **dict.fromkeys(TARGET_EXTRA["api"], 1)).options) == set(
        TARGET_EXTRA["api"]
    )
    local = ba.target("smollm2", padding_side="left", dtype="bfloat16", progress=False)
    assert local.options == {"padding_side": "left", "dtype": "bfloat16", "progress": False}
    with run_emulator(tiny_target, "openai-chat") as emu, ba.Session(cache_dir=tmp_path / "c") as session:
        ref = ba.target(emu.target_spec, tokenizer=f"hf:{tiny_lm_dir}", eps=0.05, search="median")
        ladder = ref.open(session.workspace).inner.ladder
        assert (ladder.eps, ladder.search, ladder.learned_brackets) == (0.05, "median", True)


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown session option 'budget'"):
        ba.Session(budget=1)
    with pytest.raises(UserError, match="unknown option 'tokeniser'"):
        ba.target("openai:gpt-4o-mini", tokeniser="x")
    # an option of the other kind of target would do nothing there: refused, not ignored
    with pytest.raises(UserError, match="unknown option 'dtype'"):
        ba.target("openai:gpt-4o-mini", dtype="bfloat16")
    with pytest.raises(UserError, match="unknown option 'eps'"):
        ba.target("smollm2", eps=0.02)
    with ba.Session(cache_dir=tmp_path / "c") as session:
        with pytest.raises(UserError, match="unknown option 'alhpa'"):
            session.audit("contamination", benchmark="gsm8k", alhpa=0.1)
        with pytest.raises(UserError, match="unknown method"):
            session.audit("no_such_method")
        with pytest.raises(UserError, match="either benchmark= or data="):
            session.audit("contamination", benchmark="gsm8k", data=["a"])


def test_the_dry_run_needs_no_key_and_sends_nothing(tmp_path: Path, monkeypatch) -> None:
    """The README's GSM8K dry-run, from Python: priced with no key set and no connection."""
    import respx

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with respx.mock(assert_all_called=False) as router:
        planned = ba.plan(
            "contamination", target="openai:gpt-4o-mini", benchmark="gsm8k", heldout="synthetic",
            budget_usd=5, cache_dir=tmp_path / "c", progress=False,
        )  # fmt: skip
        assert not router.calls
    text = planned.format()
    assert "gsm8k" in text and planned.method.config.heldout == "synthetic"
