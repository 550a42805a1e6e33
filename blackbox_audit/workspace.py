"""A run's workspace: the cache, the engine's settings, and the targets opened through them.

Every entry point that runs methods on targets builds one the same way, ``Workspace.open``:
the CLI commands (``cli.common.workspace_from_args``, from their flags), audit specs
(``audit.py``, from the spec's ``[audit]`` section), the demo and the bench scripts. Targets
are then opened with ``open_target(spec, **options)``: loaded by the target registry, wrapped
in ``CachedTarget`` over the workspace's cache, and, for API targets, given the cache as the
engine's request-level write-ahead cache (a stopped run resumes without re-sending) and the
run's one ``Spending``, so every API target of the run spends from the same budget.

``engine=None`` (the demo, the benches) leaves API targets on the engine's defaults: no caps,
no price table. With ``EngineOptions`` the price table is read on the first API target (a
white-box run never reads it) or by ``spending`` when asked earlier. ``close()`` (or leaving a
``with`` block) closes every target the workspace loaded, then the cache.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from blackbox_audit.adapters.base import Target
from blackbox_audit.cache import CachedTarget
from blackbox_audit.engine.batch_core import batch_needs_cache
from blackbox_audit.engine.cache import open_cache
from blackbox_audit.engine.options import EngineOptions, Spending
from blackbox_audit.errors import UserError


class Workspace:
    """One run's cache (``None``: nothing is cached), engine settings and loaded targets."""

    def __init__(self, cache: Any | None, engine: EngineOptions | None = None) -> None:
        self.cache = cache
        self.engine = engine
        self._spending: Spending | None = None
        self._loaded: list[Target] = []

    @classmethod
    def open(
        cls,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        no_cache: bool = False,
        engine: EngineOptions | None = None,
    ) -> Workspace:
        """The cache at ``cache_dir`` (default: ``$BLACKBOX_AUDIT_CACHE`` or the user cache; none
        with ``no_cache``) and the engine options every API target of the run shares. ``--batch``
        without a cache is refused here, so that a dry-run refuses it as the run would (a batch's
        answers reach the run through the cache)."""
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise UserError(f"cache_dir must be a folder path, got {cache_dir!r}", "pass a str or a pathlib.Path")
        if no_cache and engine is not None and engine.batch:
            raise batch_needs_cache()
        return cls(None if no_cache else open_cache(cache_dir), engine)

    # ---- the run's spending
    @property
    def spending(self) -> Spending:
        """The one budget and price table of this run's API targets (made on first use)."""
        if self._spending is None:
            self._spending = Spending() if self.engine is None else Spending.start(self.engine)
        return self._spending

    def budget_record(self) -> dict[str, Any]:
        """What run.json records about the run's budget: caps, requests reserved, USD spent."""
        return self.spending.budget.to_json()

    # ---- targets
    def load_target(self, spec: str, **options: Any) -> Target:
        """``adapters.load_target(spec, **options)``; an API target also gets the run's
        ``spending`` and the cache as its request cache. Closed by ``close()``."""
        from blackbox_audit.adapters import is_api_spec, load_target

        if is_api_spec(spec):
            options = {**options, "spending": self.spending}
            if self.cache is not None:  # request-level write-ahead cache: a stopped run resumes without re-sending
                options["cache"] = self.cache
        target = load_target(spec, **options)
        self._loaded.append(target)
        return target

    def open_target(self, spec: str, **options: Any) -> CachedTarget:
        """``load_target`` wrapped in ``CachedTarget`` over the workspace's cache."""
        return self.cached(self.load_target(spec, **options))

    def cached(self, target: Target) -> CachedTarget:
        """``target`` (e.g. a chat view of a loaded model) answering from the workspace's cache;
        the workspace closes only what it loaded."""
        return CachedTarget(target, self.cache)

    # ---- finishing
    def close(self) -> None:
        """Close every loaded target (in load order), then the cache; a second call does nothing."""
        loaded, self._loaded = self._loaded, []
        try:
            for target in loaded:
                target.close()
        finally:
            if self.cache is not None:
                self.cache.close()
                self.cache = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["Workspace"]
