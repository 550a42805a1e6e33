"""Calibrated DI's artifacts: kept in the project's one artifact store, keyed with DI's format version.

The generator's LoRA adapter, the generated suffixes, the classifiers' predictions and the
self-baseline's scores do not depend on the target, so they live in an ``ArtifactStore``
(``blackbox_audit.artifacts``) under ``<cache dir>/di/<kind>/<key>``. ``di_key`` is the key recipe
(``content_key``) with ``ARTIFACT_FORMAT`` mixed in, so bumping it retires every DI artifact at once.
"""

from __future__ import annotations

from typing import Any

from blackbox_audit.artifacts import ArtifactStore, content_key, texts_digest

#: Bumped when an artifact's meaning changes, so stale entries are never reused.
ARTIFACT_FORMAT = 1


def di_key(payload: Any) -> str:
    """The key of a DI artifact: ``content_key`` of ``payload`` with the artifact format mixed in."""
    return content_key({"format": ARTIFACT_FORMAT, "payload": payload})


__all__ = ["ARTIFACT_FORMAT", "ArtifactStore", "content_key", "di_key", "texts_digest"]
