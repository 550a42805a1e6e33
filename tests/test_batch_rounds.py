"""``engine.batch_rounds.BatchRounds``: dependent searches bought one batch per round.

Checked here, with a fake batch endpoint (a dict as the cache):
- every round holds exactly the searches still running, each once; a search of k requests waits
  for k rounds;
- searches whose next body depends on shared state (how many searches have finished, like the
  recovery's learned gap model) replay the same bodies from a full cache: a re-run of a read
  buys nothing, and a re-run after a kill between rounds buys only the rounds that were not bought;
- a failed round reaches every search waiting in it, and a line the batch left unanswered goes
  direct inside its round; a round smaller than ``min_batch`` goes direct, and still replays.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from blackbox_audit.engine.batch_rounds import BatchRounds


class FakeProvider:
    """A cache and a batch endpoint: ``buy`` answers each body (unless told to drop it)."""

    def __init__(
        self, cache: dict[str, Any] | None = None, drop: set[str] | None = None, fail_at: int = 0, hang_at: int = 0
    ) -> None:
        self.cache = {} if cache is None else cache
        self.batches: list[list[str]] = []
        self.direct: list[str] = []
        self.drop, self.fail_at, self.hang_at = drop or set(), fail_at, hang_at
        self.hanging = False

    @staticmethod
    def key(body: dict[str, Any]) -> str:
        return json.dumps(body, sort_keys=True)

    async def buy(self, bodies) -> None:
        if self.fail_at and len(self.batches) + 1 == self.fail_at:
            raise RuntimeError("batch failed")
        if self.hang_at and len(self.batches) + 1 == self.hang_at:
            self.hanging = True  # waits for a batch that never comes back: the run is killed here
            await asyncio.get_running_loop().create_future()
        await asyncio.sleep(0.001)  # a real wait: the barrier must not release anyone meanwhile
        self.batches.append([b["q"] for b in bodies])
        for b in bodies:
            if b["q"] not in self.drop:
                self.cache[self.key(b)] = {"a": b["q"].upper()}

    def cached(self, body) -> bool:
        return self.key(body) in self.cache

    async def send(self, body) -> dict[str, Any]:
        k = self.key(body)
        if k not in self.cache:
            await asyncio.sleep(0.001)
            self.direct.append(body["q"])
            self.cache[k] = {"a": body["q"].upper()}
        return self.cache[k]


def _read(provider: FakeProvider, lengths: list[int], min_batch: int = 1) -> list[list[str]]:
    """Searches of the given lengths; each body names how many searches had finished when it was
    written (shared state, as the recovery's gap model). Returns each search's bodies."""
    rounds = BatchRounds(provider.buy, provider.cached, provider.send, min_batch=min_batch)
    finished = [0]
    asked: list[list[str]] = [[] for _ in lengths]

    async def search(i: int, n: int) -> None:
        for step in range(n):
            q = f"s{i}-step{step}-after{finished[0]}"
            asked[i].append(q)
            ans = await rounds.post({"q": q})
            assert ans == {"a": q.upper()}
        finished[0] += 1

    async def main() -> None:
        tasks = [asyncio.ensure_future(search(i, n)) for i, n in enumerate(lengths)]
        if not provider.hang_at:
            await asyncio.gather(*tasks)
            return
        while not provider.hanging:
            await asyncio.sleep(0.001)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return asked


def test_each_round_holds_every_running_search_once() -> None:
    p = FakeProvider()
    asked = _read(p, [3, 1, 5, 2])
    assert [len(b) for b in p.batches] == [4, 3, 2, 1, 1]  # one batch per round, the finished leave
    assert sorted(q for b in p.batches for q in b) == sorted(q for a in asked for q in a)
    assert p.direct == []


def test_a_rerun_replays_the_same_bodies_and_buys_nothing() -> None:
    p = FakeProvider()
    first = _read(p, [3, 1, 5, 2])
    again = FakeProvider(cache=dict(p.cache))
    assert _read(again, [3, 1, 5, 2]) == first  # the shared state evolves the same way round by round
    assert again.batches == [] and again.direct == []


def test_a_run_killed_between_rounds_resumes_buying_only_the_rest() -> None:
    whole = FakeProvider()
    _read(whole, [3, 1, 5, 2])
    killed = FakeProvider(hang_at=3)  # killed while its third round is out
    _read(killed, [3, 1, 5, 2])
    assert killed.batches == whole.batches[:2]
    resumed = FakeProvider(cache=dict(killed.cache))
    _read(resumed, [3, 1, 5, 2])
    assert killed.batches + resumed.batches == whole.batches  # nothing bought twice
    assert resumed.direct == []


def test_unanswered_lines_go_direct_inside_their_round() -> None:
    p = FakeProvider(drop={"s1-step0-after0"})
    _read(p, [2, 2])
    assert p.direct == ["s1-step0-after0"]
    assert [len(b) for b in p.batches] == [2, 2]  # the direct line did not split its round


def test_a_failed_round_reaches_every_search_in_it() -> None:
    p = FakeProvider(fail_at=2)
    with pytest.raises(RuntimeError, match="batch failed"):
        _read(p, [3, 3])
    assert len(p.batches) == 1


def test_rounds_too_small_for_a_batch_go_direct_and_still_replay() -> None:
    p = FakeProvider()
    asked = _read(p, [3, 1, 5, 2], min_batch=3)
    assert [len(b) for b in p.batches] == [4, 3]  # the rounds of 2, 1 and 1 requests went direct
    assert len(p.direct) == 4 and sorted([*p.direct, *(q for b in p.batches for q in b)]) == sorted(
        q for a in asked for q in a
    )
    again = FakeProvider(cache=dict(p.cache))
    assert _read(again, [3, 1, 5, 2], min_batch=3) == asked and again.batches == [] and again.direct == []
