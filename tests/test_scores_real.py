"""The scoring layer on real white-box targets: formulas vs the model's own distributions, and
orientation (higher = member) on SmolLM2 with a text the model can copy from its context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from blackbox_audit.adapters.base import Target
from blackbox_audit.scores import compute_scores
from blackbox_audit.types import FullDistribution, TokenLogprobs

FRESH = [
    "The violet submarine negotiated quietly with seventeen bakers near the old harbour of Tromsø.",
    "Marguerite repainted her grandfather's tractor in stripes of copper and teal before the spring fair.",
    "A committee of retired astronomers voted to rename the village pond after a forgotten comet.",
]
ORIENTED = ["loss", "zlib", "min_k", "min_k_pp", "m_entropy", "max_k"]


class PrimedTarget(Target):
    """A target that has "seen" each text: it scores ``x`` right after a copy of ``x``.

    In-context copying is the cleanest member/non-member contrast a small offline model
    offers: the same text (same zlib length, same tokens) scored with and without the copy.
    Positions are the tail of the record of ``x + "\\n" + x`` (checked to equal ``x``'s own
    scored token ids, so the comparison is position by position).
    """

    def __init__(self, base: Target) -> None:
        self.base = base
        self.name = f"primed:{base.name}"
        self.capabilities = base.capabilities

    def fingerprint(self) -> str:
        return "primed:" + self.base.fingerprint()

    def tokenize(self, text: str) -> list[int]:
        return self.base.tokenize(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.base.decode(ids)

    def token_logprobs(self, texts, *, full_distribution=False, progress=True) -> list[TokenLogprobs]:
        doubled = self.base.token_logprobs([t + "\n" + t for t in texts], full_distribution=full_distribution)
        out = []
        for text, rec in zip(texts, doubled, strict=True):
            own = self.base.tokenize(text)[1:]
            n = len(own)
            assert list(rec.token_ids[-n:]) == own, "copy does not tokenize like the text alone"
            full = None
            if rec.full is not None:
                full = FullDistribution(*(getattr(rec.full, f)[-n:] for f in FullDistribution.__dataclass_fields__))
            out.append(
                replace(
                    rec,
                    text=text,
                    token_ids=rec.token_ids[-n:],
                    tokens=rec.tokens[-n:],
                    logprobs=rec.logprobs[-n:],
                    status=rec.status[-n:],
                    error_bound=rec.error_bound[-n:],
                    strategy=rec.strategy[-n:],
                    full=full,
                )
            )
        return out


@pytest.mark.slow
def test_copyable_text_scores_more_member_like_on_smollm2(smollm2_target):
    base = compute_scores(smollm2_target, FRESH, ORIENTED, progress=False)
    primed_target = PrimedTarget(smollm2_target)
    primed = compute_scores(primed_target, FRESH, [*ORIENTED, "reference"], reference=smollm2_target, progress=False)
    assert list(primed.n_tokens) == list(base.n_tokens)
    for name in ORIENTED:  # max_k included: this is the empirical check of its (negated) sign
        assert np.all(primed[name] > base[name]), f"{name}: primed {primed[name]} vs fresh {base[name]}"
    assert np.all(primed["reference"] > 0)
    np.testing.assert_allclose(primed["reference"], primed["loss"] - base["loss"], rtol=1e-6, atol=1e-6)


def test_full_distribution_scores_match_the_models_own_distribution(tiny_target):
    """min_k_pp and m_entropy from the adapter's moments equal a direct computation from
    ``logprob_matrix`` (row j = log p(. | ids[:j+1]) predicts ids[j+1])."""
    texts = ["the cat sat on the mat and looked out of the window", "a short one here"]
    table = compute_scores(tiny_target, texts, ["min_k_pp:k=1.0", "m_entropy", "loss"], progress=False)
    for i, text in enumerate(texts):
        ids = tiny_target.tokenize(text)
        logp = np.asarray(tiny_target.logprob_matrix(ids), dtype=np.float64)[:-1]  # rows predicting ids[1:]
        y = np.asarray(ids[1:])
        p = np.exp(logp)
        lp = logp[np.arange(len(y)), y]
        mu = (p * logp).sum(1)
        sigma = np.sqrt((p * (logp - mu[:, None]) ** 2).sum(1))
        py = p[np.arange(len(y)), y]
        log1mp = np.log1p(-np.minimum(p, 1 - 1e-12))
        others = (p * log1mp).sum(1) - py * log1mp[np.arange(len(y)), y]
        mentr = -(1 - py) * lp - others
        assert table["loss"][i] == pytest.approx(lp.mean(), abs=1e-4)
        assert table["min_k_pp:k=1.0"][i] == pytest.approx(((lp - mu) / sigma).mean(), abs=1e-3)
        assert table["m_entropy"][i] == pytest.approx(-mentr.mean(), abs=1e-3)
        assert table.n_tokens[i] == len(y)
