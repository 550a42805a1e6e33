"""What transformers says to users on our behalf (issue 27): no deprecation of the KV-cache name
(``past_key_values``), no "``loss_type=None`` ... unrecognized" when a canary trains."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest


@pytest.fixture
def transformers_says(caplog):
    """The messages transformers logs during the test (its warn-once memory cleared first)."""
    from transformers.utils import logging as hf_logging

    hf_logging.warning_once.cache_clear()
    root = hf_logging.get_logger("transformers")
    root.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="transformers")  # whatever a CLI run in this process set
    yield lambda: [r.getMessage() for r in caplog.records if r.name.startswith("transformers")]
    root.removeHandler(caplog.handler)


def test_the_kv_cache_path_uses_the_current_name(tiny_target, transformers_says):
    target = copy.copy(tiny_target)
    target.conditional_path = "kv"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # `past_key_values` is deprecated ... (a FutureWarning)
        target.conditional_logprobs("A prefix of a few words.", ["One text to score.", "Another, longer text."])
    assert not [m for m in transformers_says() if "deprecated" in m]


def test_training_a_gpt2_canary_names_its_loss(tiny_lm_dir, transformers_says):
    from transformers import AutoModelForCausalLM

    from blackbox_audit.training import name_causal_loss

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    name_causal_loss(model)
    assert model.loss_function is not None
    assert not [m for m in transformers_says() if "loss_type" in m]
    bare = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    assert bare.loss_function is not None and [m for m in transformers_says() if "loss_type" in m]  # the noise


# what a `di` run printed between its progress lines before blackbox_audit.logs (issue 39 item 8)
NOISE = ("is_gradient_checkpointing", "loss_type=None")


def emitted_noise() -> tuple[str, ...]:
    """The lines of ``NOISE`` the installed libraries still emit: peft 0.22 stopped reading transformers'
    deprecated ``is_gradient_checkpointing``, so its FutureWarning is gone from a run on newer peft."""
    from importlib.metadata import version

    from packaging.version import Version

    old_peft = Version(version("peft")) < Version("0.22")
    return tuple(n for n in NOISE if n != "is_gradient_checkpointing" or old_peft)


def test_a_di_run_is_quiet_and_says_everything_once_under_verbose(tmp_path, tiny_lm_dir) -> None:
    """A real calibrated ``di`` run, in its own process (a fresh interpreter: warnings and transformers'
    warn-once memory start empty), with test_di_pipeline's smallest options: the libraries' warnings
    are absent from its stderr, and present once each with ``-v``."""
    import json
    import os
    import subprocess
    import sys

    from blackbox_audit.sim.tiny_models import build_tiny_llama, sample_texts

    texts = sample_texts(160)
    generator = build_tiny_llama(tmp_path / "llama", texts)
    suspect = tmp_path / "s.jsonl"
    suspect.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts[:80])))
    args = ["di", "--target", f"hf:{tiny_lm_dir}", "--features", "loss,min_k", "--suspect", str(suspect)]
    args += ["--generator", f"hf:{generator}", "--seq-tokens", "24", "--min-seq-tokens", "12", "--seeds", "2"]
    args += ["--gen-epochs", "1", "--lora-layers", "2", "--classifier-epochs", "2", "--threads", "1"]
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}

    def stderr_of(*extra: str, run: str) -> str:
        cmd = [sys.executable, "-m", "blackbox_audit", *extra, *args]
        cmd += ["--cache-dir", str(tmp_path / f"cache-{run}"), "--out", str(tmp_path / run)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    quiet = stderr_of(run="quiet")
    assert [n for n in NOISE if n in quiet] == [], quiet[-3000:]
    loud = stderr_of("-v", run="loud")
    assert {n: loud.count(n) for n in NOISE} == {n: int(n in emitted_noise()) for n in NOISE}, loud[-3000:]
