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

    recovery = {"eps": 0.05, "learned_brackets": False, "search": "median"}
    assert set(recovery) == set(TARGET_EXTRA["api"])  # every extra a spec takes for an API target
    assert ba.target("openai:gpt-4o-mini", **recovery).options == recovery
    local = ba.target("smollm2", padding_side="left", dtype="bfloat16", progress=False)
    assert local.options == {"padding_side": "left", "dtype": "bfloat16", "progress": False}
    with run_emulator(tiny_target, "openai-chat") as emu, ba.Session(cache_dir=tmp_path / "c") as session:
        ref = ba.target(emu.target_spec, tokenizer=f"hf:{tiny_lm_dir}", eps=0.05, search="median")
        ladder = ref.open(session.workspace).inner.ladder
        assert (ladder.eps, ladder.search, ladder.learned_brackets) == (0.05, "median", True)


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown session option 'budget'"):
        ba.Session(budget=1)
    # engine options are checked when the session opens, with the CLI's ranges (EngineOptions)
    for bad, message in (
        ({"budget_usd": -1}, "budget_usd must be a finite number >= 0"),
        ({"budget_usd": float("nan")}, "budget_usd must be a finite number >= 0"),
        ({"budget_usd": "five"}, "budget_usd must be a number"),
        ({"concurrency": 0}, "concurrency must be a finite number >= 1"),
        ({"rpm": 0}, "rpm must be a finite number > 0"),
        ({"max_requests": 2.5}, "max_requests must be a whole number"),
        ({"batch_rounds": "first"}, "batch_rounds must be True or False"),
        ({"batch": True}, "--batch needs the request cache"),  # with no_cache=True below, as the run would say
    ):
        with pytest.raises(UserError, match=message):
            ba.Session(no_cache=True, **bad)
    with pytest.raises(UserError, match="unknown option 'tokeniser'"):
        ba.target("openai:gpt-4o-mini", tokeniser="x")
    # an option of the other kind of target would do nothing there: refused, not ignored
    with pytest.raises(UserError, match="unknown option 'dtype'"):
        ba.target("openai:gpt-4o-mini", dtype="bfloat16")
    with pytest.raises(UserError, match="unknown option 'eps'"):
        ba.target("smollm2", eps=0.02)
    # a wrong value fails when the target is named, not when the run reaches the loader
    for spec, bad, message in (
        ("openai:gpt-4o-mini", {"eps": "big"}, "option 'eps' must be a number"),
        ("openai:gpt-4o-mini", {"learned_brackets": "no"}, "option 'learned_brackets' must be True or False"),
        ("openai:gpt-4o-mini", {"system": 5}, "option 'system' must be a string"),
        ("smollm2", {"batch_size": "4"}, "option 'batch_size' must be a whole number"),
    ):
        with pytest.raises(UserError, match=message):
            ba.target(spec, **bad)
    with ba.Session(cache_dir=tmp_path / "c") as session:
        with pytest.raises(UserError, match="unknown option 'alhpa'"):
            session.audit("contamination", benchmark="gsm8k", alhpa=0.1)
        with pytest.raises(UserError, match="unknown method"):
            session.audit("no_such_method")
        with pytest.raises(UserError, match="either benchmark= or data="):
            session.audit("contamination", benchmark="gsm8k", data=["a"])
        # wrong types and wrong field options: one UserError each, not a TypeError from inside
        with pytest.raises(UserError, match="data must be a file path"):
            session.audit("score", data=123)
        with pytest.raises(UserError, match="a target spec is a string"):
            session.audit("score", target=5, data=["a b"])
        texts = tmp_path / "t.jsonl"
        texts.write_text('{"text": "a b c"}\n')
        with pytest.raises(UserError, match="'question_field' is not an option for a data file"):
            session.audit("score", data=str(texts), data_options={"question_field": "q"})
        with pytest.raises(UserError, match="'text_field' is not an option for a benchmark"):
            session.audit("contamination", benchmark="gsm8k", data_options={"text_field": "q"})


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


def test_a_saved_result_records_the_run_as_the_cli_does(tiny_target, tiny_lm_dir, tmp_path: Path, capsys) -> None:
    """``ba.save`` writes the run.json the CLI writes for the same run (the target, its usage and the
    cache's counts, the options, the wall time); a closed session refuses to run on without its cache."""
    import json

    from blackbox_audit.cli import main
    from blackbox_audit.results.files import write_jsonl
    from blackbox_audit.sim.emulator import run_emulator

    texts = ["The cat sat on the mat today.", "A quick brown fox jumps over it.", "Rain fell on the quiet town."]
    data = tmp_path / "d.jsonl"
    write_jsonl(data, [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)])
    with run_emulator(tiny_target, "openai-chat") as emu:
        argv = ["score", "--target", emu.target_spec, "--tokenizer", str(tiny_lm_dir), "--data", str(data)]
        argv += ["--scores", "loss_cens", "--cache-dir", str(tmp_path / "c-cli"), "--out", str(tmp_path / "cli")]
        assert main(argv) == 0
        session = ba.Session(cache_dir=tmp_path / "c-py", progress=False)
        audit = session.audit(
            "score", target=ba.target(emu.target_spec, tokenizer=str(tiny_lm_dir)), data=str(data), scores=["loss_cens"]
        )
        ba.save(audit.run(), tmp_path / "py")
        again = audit.run()  # the same session: every answer from its cache
        assert again.provenance["usage"]["requests_sent"] == 0
        session.close()
        for closed in (audit.run, audit.plan, lambda: session.audit("score", data=str(data))):
            with pytest.raises(UserError, match="Session is closed"):
                closed()
    capsys.readouterr()
    cli, py = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("cli", "py"))
    assert set(cli) - set(py) <= {"threads"}  # the CLI's --threads: no Python keyword sets it
    assert py["target"] == cli["target"] and py["tokens_scored"] == cli["tokens_scored"] > 0
    assert py["usage"]["requests_by_strategy"] == cli["usage"]["requests_by_strategy"]
    assert py["cache"]["enabled"] and py["options"]["cache_dir"] == str(tmp_path / "c-py")
    assert py["wall_time_s"] is not None
