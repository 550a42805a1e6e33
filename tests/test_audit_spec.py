"""``blackbox-audit audit SPEC.toml``: spec errors name key and line; any registered method runs
from a spec and shows in the report; the shipped example runs offline and its rerun sends 0 requests."""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.auditspec import load_spec
from blackbox_audit.cli import main
from blackbox_audit.errors import UserError
from blackbox_audit.methods.base import METHODS, Method, MethodConfig, Needs, register_method
from blackbox_audit.results import Verdict

DATA = [
    "The committee met on Tuesday to discuss the new budget.",
    "A small boat drifted slowly across the quiet harbour.",
    "Prices of grain rose sharply after the long dry summer.",
    "She wrote three letters before the evening train left.",
    "The old bridge was closed for repairs during the winter.",
    "Children played in the park until the lights came on.",
    "Our nation faces questions that no single law can answer.",
    "The river flooded the lower fields twice in one spring.",
]


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": i % 2}) + "\n" for i, t in enumerate(DATA))
    )
    return tmp_path


def write(dirpath: Path, text: str) -> Path:
    path = dirpath / "spec.toml"
    path.write_text(text)
    return path


BASE = """\
[audit]
out = "runs/x"

[targets.m]
spec = "smollm2"

[data.d]
path = "d.jsonl"

[[steps]]
method = "score"
target = "m"
data = "d"
scores = ["loss"]
"""


@pytest.mark.parametrize(
    ("edit", "message", "line"),
    [
        (('scores = ["loss"]', 'scores = ["loss"]\nalpah = 0.1'), "unknown option 'alpah'", 15),
        (('scores = ["loss"]', 'scores = "loss"'), "option 'scores'.*must be a list", 14),
        (('method = "score"', 'method = "scroe"'), "unknown method 'scroe'", 11),
        (('target = "m"', 'target = "n"'), "target 'n' is not defined", 12),
        (('path = "d.jsonl"', 'path = "nope.jsonl"'), "does not exist", 8),
        (('out = "runs/x"', 'out = "runs/x"\nbudget = 3'), "unknown key 'budget' in \\[audit\\]", 3),
        (('spec = "smollm2"', 'spec = "smollm2"\nchta = "chatml"'), "unknown option 'chta' for target 'm'", 6),
        (('spec = "smollm2"', 'spec = "smolm2"'), "unknown target 'smolm2'", 5),
        (('spec = "smollm2"', 'spec = "smollm2"\nbatch_size = "4"'), "option 'batch_size' must be a whole number", 6),
        (('spec = "smollm2"', 'spec = "openai:gpt-4o-mini"\neps = 0'), "option 'eps' must be > 0", 6),
        (("[audit]", "[audit]\nconcurrency = 0"), "concurrency must be a finite number >= 1", 2),
        (("[data.d]", "[data.d]\nlabel = 3"), "label must be 0 or 1", 8),
        (('scores = ["loss"]', 'scores = ["loss", "nope"]'), "unknown score 'nope'", 10),
        (("[[steps]]", '[[steps]]\nmethod = "ptdi"\nalpha = 1.5\n[[steps]]'), "alpha must be strictly between", 10),
        (('out = "runs/x"', 'out = "runs/x'), "not valid TOML.*line 2", None),
    ],
)
def test_spec_errors_name_the_key_and_its_line(workdir: Path, edit, message: str, line: int | None) -> None:
    old, new = edit
    path = write(workdir, BASE.replace(old, new, 1))
    with pytest.raises(UserError, match=message) as err:
        load_spec(path)
    if line is not None:
        assert f"spec.toml line {line}" in str(err.value), str(err.value)


CANARY = """\
[canaries.c]
base = "tiny"
members = 20
nonmembers = 20
calibration = 10

[targets.m]
canary = "c"

[data.d]
canary = "c"
split = "calibration"

[[steps]]
method = "score"
target = "m"
data = "d"
scores = ["loss"]
"""


@pytest.mark.parametrize(
    ("edit", "message", "line"),
    [
        (("members = 20", "membres = 20"), "unknown key 'membres' in \\[canaries.c\\]", 3),
        (('base = "tiny"', 'base = "huge"'), "canary 'c': unknown canary base 'huge'", 1),
        (('canary = "c"\n\n[data.d]', 'canary = "x"\n\n[data.d]'), "canary 'x' is not defined", 8),
        (('split = "calibration"', 'split = "train"'), "unknown canary split 'train'", 12),
        (('canary = "c"\nsplit', 'path = "d.jsonl"\ncanary = "c"\nsplit'), "one of path, canary or benchmark", 10),
    ],
)
def test_canary_sections_are_checked_before_anything_is_built(workdir: Path, edit, message: str, line: int) -> None:
    old, new = edit
    assert old in CANARY
    with pytest.raises(UserError, match=message) as err:
        load_spec(write(workdir, CANARY.replace(old, new, 1)))
    assert f"spec.toml line {line}" in str(err.value), str(err.value)


def test_a_canary_is_a_target_and_its_files_are_data(workdir: Path) -> None:
    from blackbox_audit.sim.canary import CanaryOptions

    spec = load_spec(write(workdir, CANARY))
    opts = spec.canaries["c"].options
    shifted = CanaryOptions.n_shifted  # canary build's default pool (a spec's canary had none before)
    assert (opts.base, opts.corpus, opts.n_members, opts.n_calibration, opts.n_shifted) == (
        "tiny",
        "sotu",
        20,
        10,
        shifted,
    )
    assert spec.targets["m"].canary == "c" and spec.targets["m"].spec is None
    assert spec.data["d"].canary == "c" and spec.data["d"].split == "calibration" and spec.data["d"].path is None


def test_cli_prints_a_spec_error_as_one_line(workdir: Path, capsys) -> None:
    path = write(workdir, BASE.replace('scores = ["loss"]', 'scores = ["loss"]\nalpah = 0.1'))
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "spec.toml line 15" in err and "valid options" in err


@dataclass(frozen=True)
class EchoConfig(MethodConfig):
    factor: float = 2.0


class EchoLength(Method):
    """A method 'added later': scores = token count x factor; a p-value per text and a verdict."""

    name, title, config_class = "echo_length", "a test method registered after the audit code was written", EchoConfig
    outputs = {"echo.json": "a test extra"}

    def needs(self) -> Needs:
        return Needs(capabilities=("conditional",))

    def run(self, inputs):
        self.check(inputs)
        n = np.array([len(inputs.target.tokenize(t)) for t in inputs.texts], dtype=float)
        return self.new_result(
            inputs,
            scores={"length": n * self.config.factor},
            fields={"p_value": list(np.linspace(0.001, 0.9, len(n)))},
            verdict=Verdict("inconclusive", "echo of lengths", p_value=0.5, alpha=0.05),
            extras={"echo.json": {"factor": self.config.factor}},
        )


@pytest.fixture()
def echo_method():
    register_method(EchoLength)
    yield EchoLength
    METHODS.pop("echo_length", None)


def test_a_method_registered_later_runs_from_a_spec_and_shows_in_the_report(
    workdir: Path, tiny_lm_dir: Path, echo_method, capsys
) -> None:
    spec = f"""\
[audit]
out = "{workdir / "out"}"

[targets.tiny]
spec = "hf:{tiny_lm_dir}"

[data.d]
path = "d.jsonl"
rows = [0, 6]

[data.cal]
path = "d.jsonl"
rows = [2, 8]
label = 0

[[steps]]
method = "echo_length"
target = "tiny"
data = "d"
factor = 3

[[steps]]
method = "score"
name = "scores"
target = "tiny"
data = "d"
scores = ["loss", "min_k"]

[[steps]]
method = "ptdi"
target = "tiny"
scored = {{ test = "scores" }}
sets = {{ calibration = "cal" }}
score = "loss"
"""
    path = write(workdir, spec)
    with pytest.raises(UserError, match=r"option 'factor' \(spec.toml line 20\) must be float"):
        load_spec(write(workdir, spec.replace("factor = 3", 'factor = "x"')))
    path = write(workdir, spec)
    assert main(["audit", str(path), "--cache-dir", str(workdir / "cache"), "--no-progress"]) == 0
    out = workdir / "out"
    assert {p.name for p in out.iterdir()} >= {"echo_length", "scores", "ptdi", "run.json", "report.html"}
    echo = json.loads((out / "echo_length" / "run.json").read_text())
    assert echo["config"] == {"factor": 3.0} and echo["method"] == "echo_length"
    assert json.loads((out / "echo_length" / "echo.json").read_text()) == {"factor": 3.0}
    ptdi = json.loads((out / "ptdi" / "verdict.json").read_text())
    assert ptdi["details"]["n_test"] == 6 and ptdi["details"]["n_calibration"] == 3
    html = (out / "report.html").read_text()
    assert "a test method registered after the audit code was written" in html and 'id="echo_length"' in html
    # echo's and scores' own ROCs; PTDI's test scores are the scores step's, so PTDI links to it (issue 27)
    assert html.count('data-kind="roc"') == 2 and html.count('data-kind="pvalues"') == 2  # echo, scores, ptdi
    ptdi_section = html[html.index('id="ptdi"') :]
    assert 'href="#scores"' in ptdi_section[: ptdi_section.index("</section>")]
    run = json.loads((out / "run.json").read_text())
    assert [s["name"] for s in run["steps"]] == ["echo_length", "scores", "ptdi"]
    assert run["spec"]["text"] == spec and run["git"]["commit"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_example_spec_runs_offline_and_its_rerun_sends_nothing(repo_root: Path, tmp_path: Path, capsys) -> None:
    """examples/audit.toml as shipped, except its emulator port (a free one, so parallel runs on
    one machine do not collide) and any data paths made absolute (the copy lives in tmp_path);
    the output and cache folders are given on the command line. It builds its canary (about two
    minutes), so it is marked slow."""
    text = (repo_root / "examples" / "audit.toml").read_text()
    assert len(re.findall(r"^port = \d+$", text, re.M)) == 1
    text = re.sub(r"^port = \d+$", f"port = {free_port()}", text, flags=re.M)
    text = text.replace('path = "../', f'path = "{repo_root}/')
    spec = write(tmp_path, text)
    argv = ["audit", str(spec), "--out", str(tmp_path / "a"), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv) == 0
    first = json.loads((tmp_path / "a" / "run.json").read_text())
    assert first["requests_sent"] > 0 and first["emulators"]["api"]["requests"] > 0
    cmp = json.loads((tmp_path / "a" / "white-box-vs-api" / "verdict.json").read_text())
    assert cmp["decision"] == "agree", cmp
    # the verdict a reader can check (the canary's labels are exact): a model score beats the
    # text-only blind baseline beyond its AUC's 95% CI, and PTDI selects trained-on texts
    metrics = json.loads((tmp_path / "a" / "score" / "metrics.json").read_text())
    blind = metrics.pop("blind")["auc"]
    best = max(metrics.values(), key=lambda m: m["auc"])
    assert best["auc_ci"][0] > blind and best["auc_ci"][0] > 0.5, (best, blind)
    ptdi = json.loads((tmp_path / "a" / "ptdi" / "verdict.json").read_text())
    assert ptdi["decision"] == "selected" and ptdi["estimate"]["n_selected"] > 0, ptdi
    html = (tmp_path / "a" / "report.html").read_text()
    assert "What to conclude" in html and "above the text-only blind baseline" in html
    assert first["canaries"]["sotu"]["card"]["base"] == "tiny"
    argv[3] = str(tmp_path / "b")
    assert main(argv) == 0
    second = json.loads((tmp_path / "b" / "run.json").read_text())
    assert second["requests_sent"] == 0 and second["emulators"]["api"]["requests"] == 0  # nothing reached the server
    for step in ("score", "ptdi", "white-box-vs-api"):
        assert (tmp_path / "a" / step / "scores.jsonl").read_text() == (
            tmp_path / "b" / step / "scores.jsonl"
        ).read_text()


def test_a_held_out_file_is_read_in_its_benchmarks_format_as_on_the_cli(tmp_path: Path) -> None:
    """A step's held-out benchmark file takes the format of the benchmark under audit (the CLI's
    ``--heldout FILE`` with ``--prompt-template``), unless it names templates of its own."""
    from blackbox_audit.audit import AuditRun
    from blackbox_audit.benchmarks import load_benchmark_sides

    for name in ("b", "h"):
        rows = [{"question": f"{name} q{i}?", "answer": f"a{i}"} for i in range(4)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    template = "Q: {question}\\nA:"
    spec_text = (
        f'[targets.m]\nspec = "smollm2"\n\n[data.b]\nbenchmark = "b.jsonl"\nprompt_template = "{template}"\n\n'
        '[data.h]\nbenchmark = "h.jsonl"\n\n'
        '[[steps]]\nmethod = "contamination"\ntarget = "m"\ndata = "b"\nsets = { heldout = "h" }\n'
    )
    (tmp_path / "spec.toml").write_text(spec_text)
    spec = load_spec(tmp_path / "spec.toml")
    run = AuditRun(spec, tmp_path / "out", progress=False)
    held = run.side_set(spec.steps[0], "heldout")
    _, cli = load_benchmark_sides(
        str(tmp_path / "b.jsonl"), str(tmp_path / "h.jsonl"), prompt_template="Q: {question}\nA:"
    )
    assert held.fmt == cli["heldout"].fmt == run.dataset("b").fmt and held.texts == cli["heldout"].texts
    assert held.texts[0].startswith("Q: h q0?")
    own = spec_text.replace('benchmark = "h.jsonl"\n', 'benchmark = "h.jsonl"\nprompt_template = "Z {question}"\n')
    (tmp_path / "spec.toml").write_text(own)
    spec = load_spec(tmp_path / "spec.toml")
    assert AuditRun(spec, tmp_path / "out").side_set(spec.steps[0], "heldout").texts[0].startswith("Z h q0?")
