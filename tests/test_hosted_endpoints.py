"""Named hosted endpoints (``together:``, ``fireworks:``, ...): each resolves to its provider's URL and
key variable (respx, no network), and what the probe finds decides the rung, never the name
(the emulator under a hosted name). Also ``blackbox-audit targets``."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from blackbox_audit.adapters import load_target
from blackbox_audit.adapters.hosted import HOSTED
from blackbox_audit.adapters.registry import TARGET_KINDS
from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.sim.emulator import run_emulator

EXPECTED = {
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "fireworks": ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "deepinfra": ("https://api.deepinfra.com/v1/openai", "DEEPINFRA_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
}


def _chat_answer(body: dict) -> httpx.Response:
    """A text-only chat server: logprobs are refused (403), plain requests answered."""
    if body.get("logprobs") or body.get("top_logprobs"):
        return httpx.Response(403, json={"error": {"message": "logprobs are not available for this model"}})
    msg = {"role": "assistant", "content": "x"}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": msg, "finish_reason": "length"}]})


@pytest.mark.parametrize("scheme", sorted(EXPECTED))
def test_each_name_resolves_to_its_url_and_key_variable(scheme, monkeypatch):
    url, env = EXPECTED[scheme]
    secret = f"sk-{scheme}-secret-0123456789"
    monkeypatch.setenv(env, secret)
    monkeypatch.delenv(f"{scheme.upper()}_BASE_URL", raising=False)
    assert TARGET_KINDS[scheme].key_env == HOSTED[scheme].key_env == env and TARGET_KINDS[scheme].api
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/completions") and not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "This is a chat model"}})
        return _chat_answer(json.loads(request.content))

    with respx.mock(assert_all_called=False) as mock:
        mock.route(url__startswith=url).mock(side_effect=answer)
        target = load_target(f"{scheme}:some/model", tokenizer="tiktoken:cl100k_base")
        try:
            assert target.name == f"{scheme}:some/model" and target.engine.base_url == url
            assert target.sem is None and not target.capabilities.logprobs  # the probe's finding: text only
            assert "403" in target.capabilities.extra["no_logprobs"]
        finally:
            target.close()
    assert seen and all(str(r.url).startswith(url) for r in seen)
    assert all(r.headers["Authorization"] == f"Bearer {secret}" for r in seen)
    assert all("repeat_penalty" not in json.loads(r.content) for r in seen)  # no llama.cpp field sent


def test_a_missing_key_or_tokenizer_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    with pytest.raises(UserError, match="TOGETHER_API_KEY"):
        load_target("together:m", tokenizer="tiktoken:cl100k_base")
    monkeypatch.setenv("TOGETHER_API_KEY", "sk-together-0123456789")
    with pytest.raises(UserError, match="needs a local tokenizer"):
        load_target("together:m")


def test_the_probe_decides_the_rung_not_the_name(tiny_target, tiny_lm_dir, tmp_path, monkeypatch, capsys):
    """The same name over an echo server climbs the echo rung; over a junk server it is text only."""
    monkeypatch.setenv("TOGETHER_API_KEY", "sk-together-0123456789")
    with run_emulator(tiny_target, "vllm") as emu:
        monkeypatch.setenv("TOGETHER_BASE_URL", emu.base_url)
        t = load_target(f"together:{emu.model}", tokenizer=str(tiny_lm_dir))
        try:
            assert t.sem.echo and t.sem.prompt_logprobs  # the cheapest rung: one request per text
            emu.reset()
            t.token_logprobs(["The committee met on Tuesday to review the budget."], progress=False)
            assert emu.stats()["requests"] == 1
        finally:
            t.close()
    with run_emulator(tiny_target, "junk-sentinel") as emu:
        monkeypatch.setenv("TOGETHER_BASE_URL", emu.base_url)
        cache = tmp_path / "c"
        args = ["probe", "--target", f"together:{emu.model}", "--tokenizer", str(tiny_lm_dir)]
        assert main([*args, "--cache-dir", str(cache)]) == 0
        assert "logprobs answered but unusable" in capsys.readouterr().out
    assert main(["targets", "--cache-dir", str(cache), "--json"]) == 0
    rows = {r["target"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["together:MODEL"]["key_env"] == "TOGETHER_API_KEY"
    assert "no usable logprobs" in rows["together:MODEL"]["last_probe"]
    assert rows["gemini:MODEL"]["key_env"] == "GEMINI_API_KEY or GOOGLE_API_KEY"
    assert rows["gemini:MODEL"]["last_probe"].startswith("not probed yet")
    assert set(EXPECTED) | {"openai", "anthropic", "gemini", "compat", "hf"} <= {k.split(":")[0] for k in rows}
