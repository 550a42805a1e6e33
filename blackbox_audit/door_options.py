"""The options every front door reads, each defined once with its default.

The CLI's flags (``cli/options.py``), an audit spec's tables (``auditspec.py``, ``audit.py``) and the
Python API's keywords (``api.py``) read the same names here, so a default cannot drift between doors
(before this table an audit spec's canary had no shifted pool while ``canary build`` wrote 500, and
a spec's held-out file was read in its own format while the CLI read it in the benchmark's):

- ``DATA_OPTIONS``: how a data file is read (``data.load_dataset``);
- ``BENCHMARK_OPTIONS``: how a benchmark file and its held-out file are read
  (``benchmarks.load_benchmark``; a held-out file takes its benchmark's format);
- ``CANARY_KEYS`` and ``canary_options``: a canary's options (``sim.canary.CanaryOptions``), by the
  names of ``canary build``'s flags and an audit spec's ``[canaries.NAME]`` keys.

Engine options are ``engine.options.EngineOptions`` (named by ``NAMED_OPTIONS``), target options the
target registry's (``adapters.registry``); method options are each method's config class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: data file options (``data.load_dataset``): name -> (default, type)
DATA_OPTIONS: dict[str, tuple[Any, type]] = {
    "text_field": (None, str),  # None: 'text', then 'input'
    "label_field": ("label", str),
    "id_field": ("id", str),
    "limit": (None, int),
}
#: benchmark file options (``benchmarks.load_benchmark``; its held-out file is read in its format)
BENCHMARK_OPTIONS: dict[str, tuple[Any, type]] = {
    "question_field": ("question", str),
    "answer_field": ("answer", str),
    "id_field": ("id", str),
    "label_field": ("label", str),
    "prompt_template": (None, str),
    "output_template": (None, str),
}

#: a canary's options by their flag/spec-key name -> (``CanaryOptions`` field, or ``train.FIELD`` for
#: the training config, type); unset keys take ``CanaryOptions``' defaults (sizes: the base's)
CANARY_KEYS: dict[str, tuple[str, type]] = {
    "base": ("base", str),
    "corpus": ("corpus", str),
    "seed": ("seed", int),
    "members": ("n_members", int),
    "nonmembers": ("n_nonmembers", int),
    "calibration": ("n_calibration", int),
    "min_tokens": ("min_tokens", int),
    "max_tokens": ("max_tokens", int),
    "epochs": ("train.epochs", int),
    "lr": ("train.lr", float),
    "shift_pool": ("n_shifted", int),
    "shift_corpus": ("shift_corpus", str),
    "file_order": ("file_order", bool),
    "duplicates": ("duplicates", int),
    "file_format": ("file_format", str),
    "chat_tune": ("chat_tune", int),  # 0 = off: the raw canary, its key unchanged (``sim.canary_chat``)
}


def defaults(table: Mapping[str, tuple[Any, type]]) -> dict[str, Any]:
    """A table's defaults by name."""
    return {name: default for name, (default, _) in table.items()}


def with_defaults(table: Mapping[str, tuple[Any, type]], given: Mapping[str, Any]) -> dict[str, Any]:
    """``given``'s options of ``table``, every other one at its default."""
    return {name: given.get(name, default) for name, (default, _) in table.items()}


def canary_options(given: Mapping[str, Any]) -> Any:
    """The resolved ``CanaryOptions`` of ``given`` (``CANARY_KEYS`` names; None or absent: the default),
    as ``canary build`` and an audit spec's ``[canaries.NAME]`` build it."""
    from dataclasses import replace

    from blackbox_audit.sim.canary_options import CanaryOptions, default_train_config

    unknown = sorted(set(given) - set(CANARY_KEYS))
    if unknown:
        raise ValueError(f"not a canary option: {unknown[0]}")
    values = {k: v for k, v in given.items() if v is not None}
    fields = {CANARY_KEYS[k][0]: v for k, v in values.items() if not CANARY_KEYS[k][0].startswith("train.")}
    train = default_train_config(fields.get("base", CanaryOptions.base))
    changes = {CANARY_KEYS[k][0][6:]: v for k, v in values.items() if CANARY_KEYS[k][0].startswith("train.")}
    return CanaryOptions(**fields, train=replace(train, **changes)).resolved()
