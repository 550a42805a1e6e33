"""The run's workspace (``blackbox_audit.workspace``) and the typed path of the engine options.

Fake target kinds stand in for real loaders: each records what the workspace handed it, so the
tests see exactly which targets get the run's ``Spending`` and the request cache.
"""

from __future__ import annotations

import argparse
import ast
import sys
import types
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.adapters.registry import TARGET_KINDS, TargetKind
from blackbox_audit.cache import CachedTarget
from blackbox_audit.engine import EngineOptions, RequestEngine, Spending
from blackbox_audit.errors import UserError
from blackbox_audit.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]


class Fake(Target):
    """Records the options its loader got and how often it was closed."""

    def __init__(self, rest: str, spending: Spending | None, options: dict[str, Any]) -> None:
        self.name = f"fake:{rest}"
        self.capabilities = Capabilities()
        self.spending = spending
        self.options = options
        self.closed = 0

    def fingerprint(self) -> str:
        return self.name

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def token_logprobs(self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        self.closed += 1


def load_fake(rest: str, *, spending: Spending | None = None, **options: Any) -> Fake:
    return Fake(rest, spending, options)


@pytest.fixture(autouse=True)
def fake_kinds(monkeypatch):
    module = types.ModuleType("workspace_fake_kinds")
    module.load = load_fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "workspace_fake_kinds", module)
    for scheme, api in (("fakeapi", True), ("fakelocal", False)):
        kind = TargetKind(scheme, f"{scheme}:X", "a test kind", "workspace_fake_kinds:load", api, Capabilities())
        monkeypatch.setitem(TARGET_KINDS, scheme, kind)


def test_api_targets_of_a_run_spend_from_one_budget(tmp_path):
    options = EngineOptions(budget_usd=0.5, max_requests=7, concurrency=3)
    with Workspace.open(cache_dir=tmp_path / "c", engine=options) as ws:
        a = ws.open_target("fakeapi:a", tokenizer="tok")
        b = ws.open_target("fakeapi:b")
        assert isinstance(a, CachedTarget) and a.cache is ws.cache is not None
        assert a.inner.spending is b.inner.spending is ws.spending  # one Spending, one Budget
        assert a.inner.options == {"tokenizer": "tok", "cache": ws.cache}  # the request-level cache
        assert ws.spending.options == options and ws.spending.pricing is not None
        assert (ws.spending.budget.max_usd, ws.spending.budget.max_requests) == (0.5, 7)
        # the engines built from it share the budget object and take the limits
        first = RequestEngine("http://api.test/v1", spending=a.inner.spending)
        second = RequestEngine("http://api.test/v1", spending=b.inner.spending)
        assert first.budget is second.budget is ws.spending.budget and first.max_concurrency == 3
        assert ws.budget_record() == {"max_usd": 0.5, "max_requests": 7, "requests_reserved": 0, "spent_usd": 0.0}


def test_local_targets_get_neither_spending_nor_the_request_cache(tmp_path):
    with Workspace.open(cache_dir=tmp_path / "c", engine=EngineOptions()) as ws:
        t = ws.open_target("fakelocal:m", device="cpu")
        assert t.inner.spending is None and t.inner.options == {"device": "cpu"}
        assert t.cache is ws.cache  # its records are still cached


def test_the_price_file_is_read_on_the_first_api_target_only(tmp_path):
    with Workspace.open(no_cache=True, engine=EngineOptions(pricing=str(tmp_path / "missing.json"))) as ws:
        ws.open_target("fakelocal:m")  # a white-box run never reads the price table
        with pytest.raises(UserError, match="pricing file .*missing.json does not exist"):
            ws.open_target("fakeapi:a")


def test_without_engine_options_api_targets_are_uncapped_and_unpriced():
    with Workspace(None) as ws:  # the demo and the benches: the emulator is free
        t = ws.open_target("fakeapi:a")
        assert t.cache is None and "cache" not in t.inner.options
        s = t.inner.spending
        assert s.pricing is None and s.budget.max_usd is None and s.options == EngineOptions()


def test_close_closes_each_loaded_target_once_then_the_cache(tmp_path):
    ws = Workspace.open(cache_dir=tmp_path / "c")
    loaded = ws.load_target("fakelocal:m")
    opened = ws.open_target("fakeapi:a")
    view = ws.cached(Fake("view", None, {}))  # e.g. a chat view: its base is what the workspace closes
    ws.close()
    ws.close()
    assert (loaded.closed, opened.inner.closed, view.inner.closed) == (1, 1, 0)
    assert ws.cache is None


def test_cli_flags_and_audit_specs_build_the_same_engine_options(tmp_path):
    from blackbox_audit.audit import engine_options_from_spec
    from blackbox_audit.auditspec import AuditSpec
    from blackbox_audit.cli.common import workspace_from_args
    from blackbox_audit.cli.options import add_engine_arguments, add_execution_arguments

    parser = argparse.ArgumentParser()
    add_execution_arguments(parser)
    add_engine_arguments(parser)
    prices = tmp_path / "p.json"
    argv = ["--no-cache", "--budget-usd", "2", "--max-requests", "5", "--rpm", "60", "--concurrency", "3"]
    args = parser.parse_args([*argv, "--max-retries", "1", "--pricing", str(prices)])
    ws = workspace_from_args(args)
    assert ws.cache is None
    flags = EngineOptions(budget_usd=2.0, max_requests=5, rpm=60.0, concurrency=3, max_retries=1, pricing=str(prices))
    assert ws.engine == flags
    assert workspace_from_args(parser.parse_args(["--no-cache"])).engine == EngineOptions()  # same defaults
    audit = {"budget_usd": 2, "max_requests": 5, "rpm": 60, "concurrency": 3, "max_retries": 1, "pricing": str(prices)}
    spec = AuditSpec(tmp_path / "a.toml", "", audit, {}, {}, {}, [])
    assert replace(engine_options_from_spec(spec), prices_source=None) == flags
    spec = AuditSpec(tmp_path / "a.toml", "", {}, {}, {}, {}, [])
    assert replace(engine_options_from_spec(spec), prices_source=None) == EngineOptions()


def test_spec_prices_override_the_table_and_are_named():
    from blackbox_audit.engine.pricing import ModelPrice

    options = EngineOptions(prices=(("my-model", ModelPrice(1.0, 0.5, 2.0)),), prices_source="a.toml [prices]")
    assert hash(options) == hash(replace(options))  # frozen values: usable as a key
    table = Spending.start(options).pricing
    assert table.get("my-model") == ModelPrice(1.0, 0.5, 2.0) and table.sources == ["bundled", "a.toml [prices]"]
    assert Spending.start(EngineOptions()).pricing.sources == ["bundled"]


def test_the_engine_and_the_workspace_never_import_argparse():
    paths = [*sorted((ROOT / "blackbox_audit" / "engine").glob("*.py")), ROOT / "blackbox_audit" / "workspace.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert "argparse" not in names, f"{path.relative_to(ROOT)} imports argparse"
