"""Calibrated DI's baseline models (``baseline_lm``): the scores another model gives the same
suffixes, subtracted from the target's feature by feature so that what any model sees in generated
text cancels.

Separate from ``calibrated.py`` because each baseline is a model of its own to load or train,
with its own cache entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

from blackbox_audit.errors import UserError

from .artifacts import ArtifactStore, di_key, texts_digest
from .calibrated_options import METHOD
from .features import feature_matrix
from .generator import LocalGenerator
from .self_baseline import SelfBaselineConfig, self_baseline_target


def baseline_lm_matrix(
    spec: str,
    generator: LocalGenerator,
    texts: list[str],
    names: Sequence[str],
    store: ArtifactStore,
    *,
    progress: bool,
    prefixes: Sequence[str] | None = None,
) -> np.ndarray:
    """A local baseline model's scores (the MIA features ``names``) of every suffix, cached (``baseline_lm``).

    ``calibrate`` subtracts them from the target's scores, feature by feature (the reference-model
    idea of Carlini et al. 2021, applied to every feature): whatever *any* language model sees in
    generated text (samples of one model are less likely to another) cancels, and what is left is
    what the target sees beyond a model that was not trained on the suspect set. The reference must
    not be the generator's base: that model finds its own samples likely, so the difference would
    make generated suffixes look less member-like, a false 'member' (docs/di.md)."""
    from .generator import resolve_folder

    folder = resolve_folder(spec)
    if folder.resolve() == generator.folder.resolve():
        raise UserError(
            f"{METHOD}: the reference model ({spec}) is the generator's base model: it finds its own samples "
            "likely, which makes generated suffixes look less member-like (a false 'member')",
            "give --baseline-lm a different model (another family or training set), or leave it out",
        )
    lm = LocalGenerator(spec, progress=False)
    key = di_key(
        {
            "baseline_lm": lm.fingerprint(),
            "texts": texts_digest(texts),
            "names": list(names),
            **({"prefixes": texts_digest(list(prefixes))} if prefixes is not None else {}),
        }
    )
    found = store.read_json("baseline_lm", key)
    if found is None:
        from blackbox_audit.adapters.hf import load_hf

        base = load_hf(str(folder), device="cpu", progress=False)
        x, _ = feature_matrix(base, texts, names, progress=progress, prefixes=prefixes)
        found = x.tolist()
        store.write_json("baseline_lm", key, found)
    return np.asarray(found, dtype=np.float64)


def self_baseline_matrix(
    train_texts: Sequence[str],
    texts: list[str],
    names: Sequence[str],
    store: ArtifactStore,
    *,
    seed: int,
    prefixes: Sequence[str] | None = None,
) -> np.ndarray:
    """``baseline_lm="self"``: the MIA features of every suffix under the self-baseline model (a small
    GPT-2 trained from scratch on the generator-training sequences, ``self_baseline.py``), cached.

    It needs no model from the user and cannot be the generator's base. It never saw the scored
    pairs, and it knows only the suspect set's own kind of text, so the part of the generation
    shift that a model of that text sees cancels in the difference, and training on the pairs
    themselves does not."""
    if not train_texts:
        raise UserError(
            f"{METHOD}: baseline_lm=self needs the generator-training sequences, and this held-out set has none",
            "rebuild the held-out set (it was made by an older version), or give --baseline-lm hf:DIR",
        )
    cfg = SelfBaselineConfig()
    key = di_key(
        {
            "self_baseline_lm": texts_digest(list(train_texts)),
            "cfg": asdict(cfg),
            "seed": seed,
            "texts": texts_digest(texts),
            "names": list(names),
            **({"prefixes": texts_digest(list(prefixes))} if prefixes is not None else {}),
        }
    )
    found = store.read_json("baseline_lm", key)
    if found is None:
        base = self_baseline_target(train_texts, cfg, seed)
        x, _ = feature_matrix(base, texts, names, progress=False, prefixes=prefixes)
        found = x.tolist()
        store.write_json("baseline_lm", key, found)
    return np.asarray(found, dtype=np.float64)
