"""The method contract (docs/CONTRACTS.md "Methods"): typed configs, checks before work, one result
type, one writer that lays out the same files for every method, and labels used for evaluation only."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.adapters.base import Capabilities, Target
from blackbox_audit.data import Dataset, Sample
from blackbox_audit.errors import CapabilityError, UserError
from blackbox_audit.methods import METHODS, AuditInputs, get_method
from blackbox_audit.methods.em_mia import EMMIA, EMMIAConfig
from blackbox_audit.methods.ptdi import PTDI, PTDIConfig
from blackbox_audit.methods.scoring import ScoreConfig, ScoreMethod
from blackbox_audit.results import MethodResult, Verdict, read_result, write_result

TEXTS = [
    "The committee met on Tuesday to discuss the new budget.",
    "A small boat drifted slowly across the quiet harbour.",
    "Prices of grain rose sharply after the long dry summer.",
    "She wrote three letters before the evening train left.",
    "The old bridge was closed for repairs during the winter.",
    "Children played in the park until the lights came on.",
    "Our nation faces questions that no single law can answer.",
    "The river flooded the lower fields twice in one spring.",
]


def dataset(labels: bool = True) -> Dataset:
    return Dataset([Sample(f"t{i}", t, (i % 2) if labels else None) for i, t in enumerate(TEXTS)])


def test_built_in_methods_are_registered_with_typed_configs() -> None:
    assert {"score", "em_mia", "ptdi"} <= set(METHODS)
    for name, cls in METHODS.items():
        cfg = cls.config_class()
        assert get_method(name.replace("_", "-")) is cls
        assert cls.config_class.from_mapping(cfg.to_json()) == cfg  # run.json's config rebuilds the method
        assert cls.title and cls.name == name


def test_config_errors_name_the_key() -> None:
    with pytest.raises(UserError, match="unknown option 'iteration'"):
        EMMIAConfig.from_mapping({"iteration": 3}, where="spec.toml line 4")
    with pytest.raises(UserError, match="option 'iterations'.*must be int"):
        EMMIAConfig.from_mapping({"iterations": "ten"})
    with pytest.raises(UserError, match="iterations must be a positive integer"):
        EMMIA(iterations=0)
    with pytest.raises(UserError, match="alpha must be strictly between"):
        PTDI(alpha=1.5)
    with pytest.raises(UserError, match="unknown score 'nope'"):
        ScoreMethod(scores=("loss", "nope"))
    assert EMMIAConfig.from_mapping({"baselines": ["avg"], "prefix_pool": 4}).baselines == ("avg",)


class _NoFullDistribution(Target):
    """A target without the full distribution that fails loudly if anything is asked of it."""

    name = "stub"
    capabilities = Capabilities(full_distribution=False, conditional=False)

    def fingerprint(self) -> str:
        return "stub"

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids):  # pragma: no cover - never called
        raise AssertionError

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        raise AssertionError("a request was sent before the capability check")


def test_capabilities_are_checked_before_any_request() -> None:
    inputs = AuditInputs(data=dataset(), target=_NoFullDistribution())
    with pytest.raises(CapabilityError, match="min_k_pp"):
        ScoreMethod(scores=("loss", "min_k_pp")).run(inputs)
    with pytest.raises(CapabilityError, match="logprobs of a text given a prefix"):
        EMMIA().run(inputs)
    with pytest.raises(UserError, match="'calibration' data set"):
        PTDI().run(inputs)


def test_writer_round_trip_and_standard_files(tmp_path: Path) -> None:
    result = MethodResult(
        method="score",
        config=ScoreConfig().to_json(),
        ids=["a", "b", "c"],
        labels=[1, 0, 1],
        scores={"loss": np.array([-1.0, np.nan, -np.inf])},
        fields={"n_tokens": [3, 4, 5]},
        metrics={"loss": {"auc": 0.5, "tpr_at_1pct_fpr": 0.0, "tpr_at_5pct_fpr": 0.0, "n": 2}},
        verdict=Verdict("selected", "selected 1 of 3", alpha=0.1, estimate={"member_share": 0.3}),
        extras={"extra.jsonl": [{"id": "a", "x": 1}], "more.json": {"k": [1, 2]}},
        provenance={"seed": 7},
        warnings=["careful"],
    )
    paths = write_result(result, tmp_path)
    assert [p.name for p in paths] == [
        "scores.jsonl",
        "metrics.json",
        "verdict.json",
        "extra.jsonl",
        "more.json",
        "run.json",
    ]
    rows = [json.loads(x) for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert rows[1] == {"id": "b", "label": 0, "n_tokens": 4, "loss": None}  # non-finite -> null
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["method"] == "score" and run["seed"] == 7 and run["warnings"] == ["careful"]
    back = read_result(tmp_path)
    assert back.ids == result.ids and back.labels == result.labels and back.fields == {"n_tokens": [3, 4, 5]}
    assert np.array_equal(back.scores["loss"][:1], [-1.0]) and np.isnan(back.scores["loss"][1:]).all()
    assert back.verdict == result.verdict and back.extras == result.extras and back.config == result.config
    with pytest.raises(ValueError, match="extra output"):
        write_result(replace(result, extras={"run.json": {}}), tmp_path / "x")


def _run(method, target, labels: bool, **kw) -> MethodResult:
    return method.run(AuditInputs(data=dataset(labels), target=target, progress=False, **kw))


@pytest.mark.parametrize(
    "make",
    [
        lambda: ScoreMethod(scores=("loss", "zlib", "min_k")),
        lambda: EMMIA(iterations=2, baselines=("avg", "avgp"), init="loss"),
        lambda: PTDI(score="loss", alpha=0.5),
    ],
    ids=["score", "em_mia", "ptdi"],
)
def test_labels_are_for_evaluation_only(make, tiny_target) -> None:
    """The same scores, fields and verdict with and without labels; metrics only with them."""
    cal = {"calibration": Dataset([Sample(f"c{i}", t[::-1], 0) for i, t in enumerate(TEXTS)])}
    method = make()
    kw = {"sets": cal} if method.name == "ptdi" else {}
    with_labels, without = _run(method, tiny_target, True, **kw), _run(method, tiny_target, False, **kw)
    assert with_labels.metrics and not without.metrics
    assert with_labels.scores.keys() == without.scores.keys() and with_labels.scores
    for name in with_labels.scores:
        np.testing.assert_array_equal(with_labels.scores[name], without.scores[name])
    assert with_labels.fields == without.fields
    assert with_labels.verdict == without.verdict
    assert with_labels.config == method.config.to_json()


def test_em_mia_dry_run_plan_counts_the_matrix() -> None:
    """The cost plan lists the ReCaLL matrix's conditional calls without a target."""
    plan = EMMIA(prefix_pool=4, baselines=()).plan(AuditInputs(data=dataset()))
    conditional = [c for c in plan.calls if c.kind == "conditional"]
    assert len(conditional) == 4  # one batched call per prefix
    assert PTDIConfig().score == "min_k"


#: what each registered method reads beside its data and target (from its run/prepare): a new method is added here
READS: dict[str, dict] = {
    "score": {"reference": True},
    "em_mia": {},
    "ptdi": {"sets": ("calibration", "members"), "scored": ("test", "calibration", "members")},
    "di_plain": {"sets": ("heldout",), "reference": True},
    "di_calibrated": {"reference": True},
    "fsd": {"sets": ("finetune",)},
    "decop": {},
    "compare": {"targets": ("a", "b")},
    "contamination": {"sets": ("heldout",)},
}
#: options a method cannot be built without
REQUIRED_OPTIONS = {"decop": {"paraphraser": "smollm2"}}


def _inputs(sets=(), scored=(), reference=False, targets=()) -> AuditInputs:
    from blackbox_audit.results import ScoredSet

    return AuditInputs(
        data=dataset(),
        sets={r: dataset() for r in sets},
        scored={r: ScoredSet(ids=[], scores={}) for r in scored},
        reference="smollm2" if reference else None,
        targets={r: object() for r in targets},
    )


@pytest.mark.parametrize("name", sorted(READS))
def test_every_registered_method_declares_what_it_reads(name: str) -> None:
    """Each method's legitimate inputs pass ``refuse_unread``; one more side set or a reference it does
    not read is one ``UserError`` naming it, with the methods that read it."""
    assert set(READS) == set(METHODS), "declare what a new method reads in READS"
    method = get_method(name)(**REQUIRED_OPTIONS.get(name, {}))
    method.refuse_unread(_inputs(**READS[name]))  # everything it reads: no error
    with pytest.raises(UserError, match=f"{name} does not read a 'heldot' data set") as err:
        method.refuse_unread(_inputs(**{**READS[name], "sets": (*READS[name].get("sets", ()), "heldot")}))
    assert "drop it" in (err.value.fix or "")
    if not READS[name].get("reference"):
        with pytest.raises(UserError, match=f"{name} does not read a reference target") as err:
            method.refuse_unread(_inputs(**{**READS[name], "reference": True}))
        assert "score" in (err.value.fix or "")  # the methods that read one are named


@pytest.mark.parametrize(
    ("method", "options", "named"),
    [
        ("score", {"heldout": TEXTS}, "score does not read a 'heldout' data set"),
        ("di_plain", {"sets": {"heldout": TEXTS, "heldot": TEXTS}}, "di_plain does not read a 'heldot' data set"),
        ("em_mia", {"reference": "smollm2"}, "em_mia does not read a reference target"),
    ],
)
def test_an_unread_input_is_one_error_through_the_python_api(method: str, options: dict, named: str) -> None:
    import blackbox_audit as ba

    with pytest.raises(UserError, match=named):  # before any load: nothing is read or sent
        ba.plan(method, target="smollm2", data=TEXTS, no_cache=True, progress=False, **options)


def test_an_unread_input_is_one_error_through_a_spec_and_the_cli(tmp_path: Path, capsys) -> None:
    """An audit spec's step with a side set its method does not read fails when the spec is read (before
    any step runs), naming the step's line; ``blackbox-audit audit`` prints it as one line (exit 2)."""
    from blackbox_audit.auditspec import load_spec
    from blackbox_audit.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[targets.m]\nspec = "smollm2"\n\n[data.d]\npath = "{data}"\n\n'
        '[[steps]]\nmethod = "score"\ntarget = "m"\ndata = "d"\nsets = { heldout = "d" }\n'
    )
    with pytest.raises(UserError, match=r"score does not read a 'heldout' data set \(spec.toml line 7"):
        load_spec(spec)
    assert main(["audit", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not read a 'heldout' data set" in err
