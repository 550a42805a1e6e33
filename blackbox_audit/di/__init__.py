"""Dataset inference (SPEC §5): plain DI (Maini et al. 2024) and calibrated post-hoc DI with a
synthetic held-out set (Zhao et al. 2025).

Python API (the ``di`` command and the ``di_plain``/``di_calibrated`` methods call the same)::

    from blackbox_audit.di import calibrated_di, CalibratedOptions, plain_di
    result = calibrated_di(target, documents=texts)          # or items=[(id, prefix, suffix), ...]
    result.p_value, result.decision, result.to_json()        # di.json

Modules, one job each: ``segment`` (documents -> sequences -> prefix/suffix pairs),
``generator`` (LoRA generator, generation), ``text_classifier`` (c_text), ``linear`` (the
sigmoid-constrained heads), ``features`` (MIA scores from the scoring layer), ``stats`` (tests),
``artifacts`` (content-addressed cache), ``calibrated`` and ``plain`` (the two procedures);
calibrated DI's parts: ``calibrated_options`` (its knobs and checks), ``heldout`` (the generated
held-out set), ``seed_test`` (one seed's classifier, heads and paired test), ``baselines`` (the
baseline models' scores).
"""

from .artifacts import ArtifactStore
from .calibrated import CalibratedDIResult, calibrate, calibrated_di
from .calibrated_options import CalibratedOptions, minimum_sequences, validate_options
from .features import DEFAULT_FEATURES, default_features
from .generator import GeneratorConfig, LocalGenerator
from .heldout import HeldoutSet, build_heldout
from .plain import PlainDIResult, PlainOptions, plain_di
from .text_classifier import TextClassifierConfig

__all__ = [
    "DEFAULT_FEATURES",
    "ArtifactStore",
    "CalibratedDIResult",
    "CalibratedOptions",
    "GeneratorConfig",
    "HeldoutSet",
    "LocalGenerator",
    "PlainDIResult",
    "PlainOptions",
    "TextClassifierConfig",
    "build_heldout",
    "calibrate",
    "calibrated_di",
    "default_features",
    "minimum_sequences",
    "plain_di",
    "validate_options",
]
