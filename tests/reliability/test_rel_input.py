"""Bad options, bad outputs, bad input and malformed answers (issue 18 "Why" bullets 6-8).

Each case: exit status 2, one line naming the problem (for options: argparse's error, without
the command's usage), no traceback, and -- where the mistake can be seen up front -- not one
request sent, because the check runs before any expensive work.
"""

from __future__ import annotations

import json

import pytest
from reliability_helpers import probe_keys, scan_args
from reliability_stub import FaultStub


def _requests(emu) -> int:
    return emu.stats()["requests"]


@pytest.mark.parametrize(
    "option,value",
    [
        ("--budget-usd", "nan"),
        ("--budget-usd", "inf"),
        ("--budget-usd", "-1"),
        ("--rpm", "-5"),
        ("--rpm", "nan"),
        ("--tpm", "-1"),
        ("--concurrency", "0"),
        ("--max-retries", "-1"),
        ("--max-requests", "-3"),
        ("--rate-limit-wait", "-1"),
    ],
)
def test_caps_and_rates_that_would_switch_themselves_off_are_refused_at_parse_time(
    cli, emulator, tmp_path, data_file, capfd, option, value
):
    with emulator() as emu:
        with pytest.raises(SystemExit) as ei:
            cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", str(tmp_path / "o"),
                option, value)  # fmt: skip
        assert _requests(emu) == 0
    err = capfd.readouterr().err
    assert ei.value.code == 2 and f"argument {option}" in err and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("blackbox-audit score: error: argument")  # not 18 usage lines
    assert lines[0].endswith("(see blackbox-audit score --help)")


def test_out_not_writable_fails_before_any_request(cli, emulator, tmp_path, data_file):
    import os

    if os.geteuid() == 0:
        out = "/proc/self/fdinfo"  # a folder even root cannot create files in
    else:
        out = str(tmp_path / "ro")
        os.mkdir(out, 0o500)
    with emulator() as emu:
        r = cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", out)
        assert _requests(emu) == 0
    assert r.rc == 2 and "cannot write into --out" in r.one_error()


def test_run_json_that_is_a_folder_fails_before_work_and_leaves_nothing(cli, emulator, tmp_path, data_file):
    out = tmp_path / "o"
    (out / "run.json").mkdir(parents=True)
    with emulator() as emu:
        r = cli("score", "--target", emu.target_spec, "--data", str(data_file), "--out", str(out))
        assert _requests(emu) == 0
    assert r.rc == 2 and "folder named run.json" in r.one_error()
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]  # no partial outputs


def test_unknown_device_is_one_line(cli, tiny_lm_dir, tmp_path, data_file):
    r = cli("score", "--target", f"hf:{tiny_lm_dir}", "--data", str(data_file), "--out", str(tmp_path / "o"),
            "--device", "bogus")  # fmt: skip
    assert r.rc == 2 and "unknown device 'bogus'" in r.one_error()


@pytest.mark.parametrize("field", ["id", "text"])
def test_lone_surrogate_is_a_per_row_data_error(cli, emulator, tmp_path, field):
    data = tmp_path / "d.jsonl"
    rows = [{"id": "a", "text": "fine text"}, {"id": "b", "text": "also fine"}]
    rows[1][field] = rows[1][field] + "\ud800"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json escapes it as \ud800
    with emulator() as emu:
        r = cli("score", "--target", emu.target_spec, "--data", str(data), "--out", str(tmp_path / "o"))
        assert _requests(emu) == 0
    line = r.one_error()
    assert r.rc == 2 and f"d.jsonl:2: {field} field" in line and "lone surrogate U+D800" in line


def _scores_file(path, values, label=0):
    rows = [{"id": f"r{i}", "loss": v, "label": label} for i, v in enumerate(values)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_ptdi_calibration_not_utf8_or_a_folder_is_one_line(cli, tmp_path):
    test = _scores_file(tmp_path / "test.jsonl", [0.1 * i for i in range(20)], label=1)
    latin1 = tmp_path / "cal.jsonl"
    latin1.write_bytes('{"id": "caf\xe9", "loss": 0.5}\n'.encode("latin-1"))
    folder = tmp_path / "calfolder"
    folder.mkdir()
    _scores_file(folder / "scores.jsonl", [0.2] * 5)
    for cal, want in ((latin1, "not UTF-8"), (folder, "is a folder, not a file")):
        r = cli("ptdi", "--test", str(test), "--calibration", str(cal), "--score", "loss", "--alpha", "0.1",
                "--out", str(tmp_path / "o"))  # fmt: skip
        assert r.rc == 2 and want in r.one_error(), r.err
    assert "does not exist" not in r.err and str(folder / "scores.jsonl") in r.err


def test_ptdi_calibration_too_small_to_select_warns_and_records_the_minimum(cli, tmp_path):
    test = _scores_file(tmp_path / "test.jsonl", [5.0 + i for i in range(30)], label=1)  # all far above
    for n in (1, 2):
        cal = _scores_file(tmp_path / f"cal{n}.jsonl", [0.1 * i for i in range(n)])
        out = tmp_path / f"o{n}"
        r = cli("ptdi", "--test", str(test), "--calibration", str(cal), "--score", "loss", "--alpha", "0.1",
                "--method", "vanilla", "--out", str(out))  # fmt: skip
        assert r.rc == 0
        summary = json.loads((out / "verdict.json").read_text())["details"]
        run = json.loads((out / "run.json").read_text())
        assert summary["n_selected"] == 0 and summary["min_calibration"] == 9
        assert "below the minimum of 9" in r.err and summary["warnings"][0]["minimum"] == 9
        assert "below the minimum of 9" in run["warnings"][0]
    enough = _scores_file(tmp_path / "cal9.jsonl", [0.1 * i for i in range(9)])
    r = cli("ptdi", "--test", str(test), "--calibration", str(enough), "--score", "loss", "--alpha", "0.1",
            "--method", "vanilla", "--out", str(tmp_path / "o9"))  # fmt: skip
    summary = json.loads((tmp_path / "o9" / "verdict.json").read_text())["details"]
    assert r.rc == 0 and summary["n_selected"] == 30 and "warnings" not in summary  # the stated minimum is exact


MALFORMED = {
    "choices: ['oops']": (lambda a: {**a, "choices": ["oops"]}, "choices[0]"),
    "usage: 'lots'": (lambda a: {**a, "usage": "lots"}, "usage"),
    "top_logprobs as lists": (
        lambda a: {
            **a,
            "choices": [
                {**c, "logprobs": {**(c.get("logprobs") or {}), "top_logprobs": [[["a", -1.0]]]}} for c in a["choices"]
            ],
        },
        "choices[0].logprobs.top_logprobs[0]",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_200_answer_is_retried_then_one_line_naming_the_field(
    cli, emulator, tiny_lm_dir, tmp_path, data_file, case
):
    mutate, field = MALFORMED[case]
    with emulator() as emu, FaultStub(emu.root_url, mutate=lambda req, a: mutate(a)) as stub:
        target = f"compat:{stub.base_url}#{emu.model}"
        args = scan_args(tiny_lm_dir, target, data_file, tmp_path / "o", tmp_path / "c", "--max-retries", "3")
        r = cli(*args)
        sent = stub.provider_requests
    line = r.one_error()
    assert r.rc == 2 and f"malformed answer: field '{field}'" in line and "after 4 attempts" in line, line
    assert sent == 4  # bounded: 1 + --max-retries, then stop
    assert probe_keys(tmp_path / "c") == []


def test_dry_run_still_sends_nothing(cli, emulator, tiny_lm_dir, tmp_path, data_file):
    """What passed before must keep passing: --dry-run sends nothing."""
    with emulator() as emu:
        args = scan_args(tiny_lm_dir, emu.target_spec, data_file, tmp_path / "o", tmp_path / "c", "--dry-run")
        r = cli(*args)
        assert r.rc == 0 and _requests(emu) == 0 and "requests:" in r.out
