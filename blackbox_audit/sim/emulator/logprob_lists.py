"""Reported logprobs in each wire format: legacy completions lists, vLLM prompt logprobs, chat content.

- Top lists are ordered by logprob, ties by lower token id. Legacy ``top_logprobs`` dicts are
  keyed by token string: tokens with the same string collapse (the higher-ranked one kept),
  then the emitted token's own entry is written (OpenAI: up to ``logprobs + 1`` entries).
- Token strings are the token's UTF-8 text; a token that is not valid UTF-8 on its own is
  written ``bytes:\\xe2\\x80`` (OpenAI style); chat entries also carry ``bytes``.
- ``text_offset`` counts characters from the start of the prompt text, with or without echo.
- Profiles that report the biased distribution (``Profile.bias_in_logprobs``) report it here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import ModelView
from .decoding import Decoding
from .profiles import SENTINEL_LOGPROB, Profile
from .request_state import RequestState


def ranked(row: np.ndarray, k: int) -> list[int]:
    """The ``k`` highest ids of ``row``, by value then lower id."""
    if k <= 0:
        return []
    k = min(k, row.shape[0])
    cut = np.partition(row, -k)[-k]
    cand = np.flatnonzero(row >= cut)
    order = np.lexsort((cand, -row[cand]))
    return [int(i) for i in cand[order][:k]]


def rank_of(row: np.ndarray, t: int) -> int:
    """0-based rank of token ``t`` under the same ordering as ``ranked``."""
    v = row[t]
    return int((row > v).sum() + (row[:t] == v).sum())


class LogprobLists:
    """Logprob lists for ``Responder`` (a mixin: it reads ``profile`` and ``view``)."""

    profile: Profile
    view: ModelView

    def token_str(self, tid: int) -> str:
        raw = self.view.token_bytes(tid)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if self.profile.partial_utf8 in ("ignore", "replace"):  # llama-cpp-python / vLLM
                return raw.decode("utf-8", errors=self.profile.partial_utf8)
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)

    def _reported(self, req: RequestState, row: np.ndarray) -> np.ndarray:
        return req.biased(row) if self.profile.bias_in_logprobs else row

    def _legacy_entry(self, rep: np.ndarray, tok: int, n: int) -> tuple[float, dict[str, float]]:
        top: dict[str, float] = {}
        for i in ranked(rep, n):
            top.setdefault(self.token_str(i), float(rep[i]))
        top[self.token_str(tok)] = float(rep[tok])
        return float(rep[tok]), top

    def _prompt_logprobs(self, req: RequestState, ids: list[int], prompt_rows: list[np.ndarray], k: int) -> list[Any]:
        """vLLM's ``prompt_logprobs``: ``None`` for the first prompt token, then per token ``u_j`` a
        dict keyed by id: ``u_j`` itself first (any rank), then the top ``k`` after ``u_<j``."""
        out: list[Any] = [None]
        for j in range(1, len(ids)):
            rep = self._reported(req, prompt_rows[j - 1])
            entry: dict[str, Any] = {}
            for tok, rank in [(ids[j], rank_of(rep, ids[j]) + 1)] + [(i, r + 1) for r, i in enumerate(ranked(rep, k))]:
                if str(tok) not in entry:
                    entry[str(tok)] = {"logprob": float(rep[tok]), "rank": rank, "decoded_token": self.token_str(tok)}
            out.append(entry)
        return out

    def _legacy_logprobs(
        self,
        req: RequestState,
        ids: list[int],
        gen: list[int],
        rows: list[np.ndarray],
        prompt_rows: list[np.ndarray] | None,
        n_top: int,
        echo: bool,
    ) -> dict[str, Any]:
        """Legacy completions ``logprobs``: tokens, their logprobs, top dicts and text offsets
        (echo: the prompt's too, aligned as the profile does)."""
        tokens: list[str] = []
        token_lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        if echo and self.profile.echo_shifted:
            # llama-cpp-python without BOS: token j is paired with the row *after* it; only
            # evaluated tokens have one (all but a last token sampled under max_tokens).
            all_ids = ids + gen
            after = list(prompt_rows) + [req.row(ids)] + list(rows[1:])
            for j, (tok, row) in enumerate(zip(all_ids, after, strict=False)):
                lp, top = self._legacy_entry(self._reported(req, row), tok, n_top)
                tokens.append(self.token_str(tok))
                token_lps.append(lp if j else None)
                tops.append(top if j else None)
                offsets.append(len(self.view.decode(all_ids[:j])))
        else:
            seq: list[tuple[int, np.ndarray | None]] = []
            if echo:
                seq += [(ids[0], None)] + [(ids[j], prompt_rows[j - 1]) for j in range(1, len(ids))]
            seq += list(zip(gen, rows[: len(gen)], strict=True))
            all_ids = (ids if echo else []) + gen
            base = 0 if echo else len(self.view.decode(ids))
            prefix = [] if echo else list(ids)
            for j, (tok, row) in enumerate(seq):
                tokens.append(self.token_str(tok))
                if echo:
                    offsets.append(len(self.view.decode(all_ids[:j])))
                else:
                    offsets.append(len(self.view.decode(prefix + gen[:j])) if j else base)
                if row is None:
                    token_lps.append(None)
                    tops.append(None)
                    continue
                lp, top = self._legacy_entry(self._reported(req, row), tok, n_top)
                token_lps.append(lp)
                tops.append(top)
        return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}

    def _chat_content(self, req: RequestState, d: Decoding, n_top: int | None) -> list[dict[str, Any]]:
        """Chat ``logprobs.content``: one entry per shown token (the sentinel past
        ``Profile.sentinel_rank``, vLLM's sampled-token-first tops, junk values where the profile has them)."""
        p = self.profile
        content = []
        for tok, row in zip(d.gen[: d.shown()], d.rows, strict=False):
            rep = self._reported(req, row)
            lp = float(rep[tok])
            if p.sentinel_rank is not None and rank_of(rep, tok) >= p.sentinel_rank:
                lp = SENTINEL_LOGPROB
            tops = ranked(rep, n_top or 0)
            if p.wire == "vllm":  # vLLM lists the sampled token first, then the top-k, cut to n
                tops = ([tok] + [i for i in tops if i != tok])[: n_top or 0]
            content.append(
                {
                    "token": self.token_str(tok),
                    "logprob": lp,
                    "bytes": list(self.view.token_bytes(tok)),
                    "top_logprobs": [self._chat_top(rep, i) for i in tops],
                }
            )
        if p.junk_logprobs is not None:
            for entry in content:
                entry["logprob"] = p.junk_logprobs
                for top in entry["top_logprobs"]:
                    top["logprob"] = p.junk_logprobs
        return content

    def _chat_top(self, rep: np.ndarray, i: int) -> dict[str, Any]:
        return {"token": self.token_str(i), "logprob": float(rep[i]), "bytes": list(self.view.token_bytes(i))}


__all__ = ["LogprobLists", "rank_of", "ranked"]
