"""Issue 53: an emulator's answer is a function of the request alone, never of what was asked before.

Echo reads (prompt logprobs of a whole text, one ``logprob_matrix`` pass) and single next-token reads
(``batching.ReadBatcher``, padded widths) compute the same context's row with different fp32 rounding.
They once shared one row cache, so whichever filled it first decided both answers; an echo of a
prefix also got the rows of a longer text echoed before it.
"""

from __future__ import annotations

import httpx

from blackbox_audit.sim.emulator import run_emulator

TEXT = "The state of the union is strong, and the people of this great land are free to choose."


def _answers(target, order: list[str]) -> dict[str, dict]:
    """Each request's answer (less its id and time) on a fresh emulator, sent in ``order``."""
    ids = target.tokenize(TEXT)
    requests = {f"single{k}": {"prompt": ids[:k], "max_tokens": 1, "logprobs": 5} for k in range(1, len(ids) + 1)}
    requests |= {
        "echo": {"prompt": ids, "max_tokens": 2, "logprobs": 5, "echo": True},
        "echo_prefix": {"prompt": ids[: len(ids) // 2], "max_tokens": 0, "logprobs": 5, "echo": True},
        "text_only": {"prompt": ids[:5], "max_tokens": 4},
    }
    out = {}
    with run_emulator(target, "openai-legacy-echo") as emu, httpx.Client(base_url=emu.root_url, timeout=30) as c:
        for name in order:
            body = {"model": emu.model, "temperature": 0, **requests[name]}
            r = c.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            out[name] = {k: v for k, v in r.json().items() if k not in ("id", "created")}
        truth = {"ids": emu.exact_sequence(ids).tolist(), "context": emu.exact(ids[:7], list(range(50))).tolist()}
        out["exact"] = truth
    return out


def test_an_answer_is_the_same_whatever_was_asked_before_it(tiny_target):
    n = len(tiny_target.tokenize(TEXT))
    singles = [f"single{k}" for k in range(1, n + 1)]
    reads_first = _answers(tiny_target, [*singles, "text_only", "echo", "echo_prefix"])
    echo_first = _answers(tiny_target, ["echo", "echo_prefix", "text_only", *singles[::-1]])
    prefix_first = _answers(tiny_target, ["echo_prefix", *singles[:3], "echo", "text_only", *singles[3:]])
    for name in reads_first:
        assert reads_first[name] == echo_first[name] == prefix_first[name], name
