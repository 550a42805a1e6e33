"""FSD (SPEC §6): the sign, the config, pricing of fine-tuning, dry-run cost, and the white-box
flow on the tiny model (LoRA adapter cached by content and reused, ``hf:BASE+lora:DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.methods.fsd import FSD, FSDConfig, fsd_deviation
from blackbox_audit.results import write_jsonl

# ------------------------------------------------------------------------------ sign and config


def test_fsd_sign_member_small_deviation_scores_higher() -> None:
    """Paper: fine-tuning on non-members lifts other non-members' likelihood most, so the paper's
    FSD = S(f) - S(f') is large for them; our member-oriented column is its negation."""
    base = np.array([-2.0, -2.0])  # mean logprob (higher = member) before fine-tuning
    tuned = np.array([-1.9, -1.0])  # a member barely moves (0), a non-member gains a lot (1)
    fsd = fsd_deviation(base, tuned)
    np.testing.assert_allclose(fsd, [-0.1, -1.0])
    paper = (-base) - (-tuned)  # S = -s (loss): S(f) - S(f')
    np.testing.assert_allclose(fsd, -paper)
    assert fsd[0] > fsd[1]  # the member ranks above the non-member


@pytest.mark.parametrize(
    "options, words",
    [
        ({"scores": ("pac",)}, "loss-family"),
        ({"lr": 2.0}, "lr"),
        ({"schedule": "step"}, "schedule"),
        ({"suffix": "x" * 65}, "suffix"),
        ({"epochs": 0}, "epochs"),
        ({"lr_multiplier": -1.0}, "lr_multiplier"),
    ],
)
def test_bad_config_is_one_clear_error(options, words) -> None:
    with pytest.raises(UserError) as err:
        FSD(FSDConfig(**options))
    assert words in str(err.value)


def test_shared_openings_counts_other_versions_of_a_fine_tuned_passage() -> None:
    """WikiMIA's length splits are truncations of one passage: a 64-word text opening with a fine-tuned
    32-word text was partly learned by the fine-tune. Exact copies are the other warning; short texts
    (under 12 words) and texts that differ within the first 12 words do not count."""
    from blackbox_audit.methods.fsd import shared_openings

    passage = " ".join(f"w{i}" for i in range(40))
    short = " ".join(passage.split()[:20])
    other = "x " + " ".join(passage.split()[1:40])
    ft = [short, "a b c"]
    assert shared_openings([passage, short, other, "a b c"], ft) == 1  # the longer version only
    assert shared_openings([passage], [passage + " more"]) == 1
    assert shared_openings(["a b c"], ["a b c d"]) == 0


def test_a_fine_tune_that_barely_moved_the_model_is_warned_about() -> None:
    """fsd_loss = NLL(f') - NLL(f) per text: its mean, negated, is how far the fine-tune lowered the
    audited texts' NLL; below MIN_NLL_DROP the deviation is mostly noise (the tiny canary's case)."""
    from blackbox_audit.methods.fsd import MIN_NLL_DROP, barely_moved_warning, nll_drop

    assert nll_drop(np.array([-0.2, -0.1])) == pytest.approx(0.15)
    assert barely_moved_warning(0.15) is None
    assert barely_moved_warning(MIN_NLL_DROP) is None
    message = barely_moved_warning(0.01)
    assert message is not None and "0.010 nats/token" in message and "--epochs" in message
    assert barely_moved_warning(-0.1) is not None  # the fine-tune made the audited texts less likely


def test_a_confounded_blind_baseline_gets_fsds_shift_warning() -> None:
    """Where text alone separates members from non-members, a fine-tune on the non-members' distribution
    raises fsd_ AUCs without membership (docs/fsd.md's control): fsd says so; otherwise it stays quiet."""
    from blackbox_audit.methods.fsd import shift_warning

    assert shift_warning(None) is None
    assert shift_warning({"auc": 0.55, "confounded": False}) is None
    message = shift_warning({"auc": 0.8, "confounded": True})
    assert message is not None and "blind AUC 0.800" in message and "docs/fsd.md" in message


def test_defaults_are_the_papers() -> None:
    cfg = FSDConfig()
    alpha = cfg.lora_options().alpha  # None in the config: 2 x rank, on every front door
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.schedule, cfg.lora_r, alpha) == (
        3,
        8,
        1e-3,
        "cosine",
        16,
        32,
    )
    assert FSD(cfg).needs().capabilities == ("fine_tuning", "logprobs")
    assert FSDConfig(lora_r=8).lora_options().alpha == 16


# ------------------------------------------------------------------------------ pricing and dry-run


def test_pricing_reads_training_and_fine_tuned_prices(tmp_path) -> None:
    from blackbox_audit.engine import PricingTable

    table = PricingTable.load()
    mini = table.get("gpt-4o-mini-2024-07-18")
    assert mini.training == 3.0 and mini.fine_tuned is not None
    assert table.get("ft:gpt-4o-mini-2024-07-18:my-org:fsd:AbC123") == mini.fine_tuned
    assert mini.training_cost(2_000_000) == pytest.approx(6.0)
    assert table.get("ft:no-such-base:org::x") is None
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"models": {"m": {"prompt": 1, "completion": 2, "training": "lots"}}}))
    with pytest.raises(UserError, match="entry 'm' is malformed"):
        PricingTable.load(path)


def _texts(n: int, offset: int = 0) -> list[str]:
    from blackbox_audit.sim.tiny_models import sample_texts

    return [t[:160] for t in sample_texts(offset + n)[offset : offset + n]]


def _write(path: Path, texts: list[str], labels: list[int] | None = None) -> Path:
    rows = [{"id": f"t{i}", "text": t, **({"label": labels[i]} if labels else {})} for i, t in enumerate(texts)]
    write_jsonl(path, rows)
    return path


def test_dry_run_prices_training_tokens_times_epochs_and_sends_nothing(tmp_path, capsys) -> None:
    """openai:gpt-4o-mini: tiktoken counts, the bundled training price, no key, no request."""
    import respx

    from blackbox_audit.adapters.finetune_api import chat_tokens_per_text
    from blackbox_audit.adapters.tokenizers import load_token_table

    data = _write(tmp_path / "d.jsonl", _texts(6), [1, 0] * 3)
    ft_texts = _texts(12, offset=50)
    ft = _write(tmp_path / "f.jsonl", ft_texts)
    argv = ["fsd", "--target", "openai:gpt-4o-mini", "--data", str(data), "--finetune", str(ft)]
    argv += ["--out", str(tmp_path / "out"), "--dry-run", "--cache-dir", str(tmp_path / "c")]
    with respx.mock(assert_all_mocked=True) as router:  # any request would fail the test
        rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0 and router.calls.call_count == 0
    table = load_token_table(None, model="gpt-4o-mini")
    tokens = 3 * sum(len(table.encode(t)) + chat_tokens_per_text() for t in ft_texts)
    assert f"fine-tuning on 12 texts: {tokens:,} trained tokens (3 epochs) x $3.00/1M: ${tokens * 3 / 1e6:,.4f}" in out
    assert "then, on the fine-tuned model:" in out and "total: $" in out
    assert not (tmp_path / "out" / "scores.jsonl").exists()


def test_price_plan_prices_both_models() -> None:
    from blackbox_audit.engine import ModelPrice
    from blackbox_audit.methods.base import AuditInputs
    from blackbox_audit.planning import PlanningView, price_plan

    class DS:
        def __init__(self, texts):
            self.texts = texts

    price = ModelPrice(1.0, 1.0, 1.0, training=10.0, fine_tuned=ModelPrice(2.0, 2.0, 2.0))
    view = PlanningView(name="t", model="m", tokenize=lambda s: s.split(), api=True, price=price)
    texts = ["a b c d", "e f g"]
    plan = FSD(FSDConfig(scores=("loss",))).plan(AuditInputs(data=DS(texts), sets={"finetune": DS(["x y", "z"])}))
    est = price_plan(plan, view)
    tokens = 3 * (2 + 1 + 2 * plan.fine_tune.overhead_tokens)
    assert est.items[0].tokens == (tokens, tokens) and est.items[0].usd == (tokens * 10 / 1e6,) * 2
    # the fine-tuned model's calls are the base model's, priced twice as high (its price is 2x)
    assert est.fine_tuned.requests == est.estimate.requests
    assert est.fine_tuned.cost_usd[1] == pytest.approx(2 * est.estimate.cost_usd[1])
    assert est.usd[1] == pytest.approx(est.estimate.cost_usd[1] * 3 + tokens * 10 / 1e6)


# ------------------------------------------------------------------------------ white-box flow


def test_adapter_key_covers_base_data_options_and_seed() -> None:
    from blackbox_audit.adapters.lora import LoraOptions, adapter_key, examples_from_texts

    ex = examples_from_texts(["one text", "another text"])
    k = adapter_key("fp", ex, LoraOptions(), 0)
    assert k == adapter_key("fp", examples_from_texts(["one text", "another text"]), LoraOptions(), 0)
    assert len({k, adapter_key("fp2", ex, LoraOptions(), 0), adapter_key("fp", ex[:1], LoraOptions(), 0)}) == 3
    assert len({k, adapter_key("fp", ex, LoraOptions(epochs=2), 0), adapter_key("fp", ex, LoraOptions(), 1)}) == 3


def test_whitebox_fsd_cli_caches_the_adapter_and_lora_target_reloads_it(tiny_lm_dir, tmp_path, capsys) -> None:
    """End to end on the tiny model: every loss-family column and its fsd_ deviation, the adapter
    trained once and reused by content, and ``hf:BASE+lora:DIR`` giving the fine-tuned numbers."""
    from blackbox_audit.adapters import load_target

    data = _write(tmp_path / "d.jsonl", _texts(8), [1, 0] * 4)
    ft = _write(tmp_path / "f.jsonl", _texts(12, offset=40))
    cache = str(tmp_path / "cache")
    argv = ["fsd", "--target", f"hf:{tiny_lm_dir}", "--data", str(data), "--finetune", str(ft), "--cache-dir", cache]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0, capsys.readouterr().err
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "a" / "scores.jsonl").read_text().splitlines()]
    names = ["loss", "zlib", "lowercase", "min_k", "min_k_pp"]
    assert run["score_columns"] == names + [f"fsd_{n}" for n in names]
    assert {f"ft_{n}" for n in names} <= set(run["field_columns"])
    for r in rows:
        for n in names:
            assert r[f"fsd_{n}"] == pytest.approx(r[n] - r[f"ft_{n}"], abs=1e-12)
    assert any(abs(r["fsd_loss"]) > 1e-3 for r in rows)  # the fine-tune moved the model
    fine = run["fine_tune"]
    assert fine["audited_nll_drop"] == pytest.approx(-np.mean([r["fsd_loss"] for r in rows]))
    assert fine["shared_openings"] == 0
    adapter = Path(fine["adapter"])
    assert fine["kind"] == "lora" and not fine["reused"] and adapter.parent == Path(cache) / "adapters"
    assert run["config"]["epochs"] == 3 and run["config"]["lr"] == 1e-3 and fine["wall_time_s"] > 0
    assert set(json.loads((tmp_path / "a" / "metrics.json").read_text())) >= {f"fsd_{n}" for n in names}

    mtime = (adapter / "adapter_model.safetensors").stat().st_mtime_ns
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    run2 = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run2["fine_tune"]["reused"] and run2["fine_tune"]["adapter"] == str(adapter)
    assert (adapter / "adapter_model.safetensors").stat().st_mtime_ns == mtime  # not retrained
    assert [json.loads(x) for x in (tmp_path / "b" / "scores.jsonl").read_text().splitlines()] == rows
    assert main([*argv, "--out", str(tmp_path / "c"), "--seed", "1"]) == 0  # another seed: another adapter
    assert json.loads((tmp_path / "c" / "run.json").read_text())["fine_tune"]["adapter"] != str(adapter)

    tuned = load_target(f"hf:{tiny_lm_dir}+lora:{adapter}", device="cpu", progress=False)
    recs = tuned.token_logprobs([r_text for r_text in _texts(8)], progress=False)
    np.testing.assert_allclose([float(np.mean(r.logprobs)) for r in recs], [r["ft_loss"] for r in rows], atol=1e-6)
    assert tuned.fingerprint() != load_target(f"hf:{tiny_lm_dir}", progress=False).fingerprint()


def test_lora_syntax_errors_are_one_line(tiny_lm_dir, tmp_path) -> None:
    from blackbox_audit.adapters import load_target

    with pytest.raises(UserError, match="not a PEFT adapter folder"):
        load_target(f"hf:{tiny_lm_dir}+lora:{tmp_path}")
    with pytest.raises(UserError, match="white-box targets only"):
        load_target("openai:gpt-4o-mini+lora:/x")
    with pytest.raises(UserError, match="names no adapter"):
        load_target(f"hf:{tiny_lm_dir}+lora:")


def test_finetune_file_with_members_is_refused(tiny_lm_dir, tmp_path, capsys) -> None:
    data = _write(tmp_path / "d.jsonl", _texts(4), [1, 0, 1, 0])
    argv = ["fsd", "--target", f"hf:{tiny_lm_dir}", "--data", str(data), "--finetune", str(data)]
    assert main([*argv, "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "must hold known non-members, but 2 row(s) are labelled 1" in capsys.readouterr().err


def test_applied_adapter_keeps_the_chat_conditioning(tiny_target, tmp_path) -> None:
    """FSD subtracts the tuned model's score from the base's: both must be scored in the same
    conditioning, so a chat-conditioned base gives a chat-conditioned tuned target."""
    import copy

    from peft import LoraConfig, get_peft_model

    from blackbox_audit.adapters.chat_templates import chat_conditioning
    from blackbox_audit.adapters.lora import apply_adapter

    peft_model = get_peft_model(
        copy.deepcopy(tiny_target.model), LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True)
    )
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    base = tiny_target.with_chat(chat_conditioning("chatml"))
    tuned = apply_adapter(base, tmp_path / "adapter")
    assert tuned.chat == base.chat is not None
    text = "The committee met on Tuesday and agreed on the budget."
    # an untrained LoRA (B = 0) leaves the weights as they were: same conditioning, same values
    np.testing.assert_allclose(
        tuned.token_logprobs([text], progress=False)[0].logprobs,
        base.token_logprobs([text], progress=False)[0].logprobs,
        atol=1e-5,
    )
    assert tuned.fingerprint() != base.fingerprint()
