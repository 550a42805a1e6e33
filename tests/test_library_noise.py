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
    caplog.set_level(logging.WARNING)
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
