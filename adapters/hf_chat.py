"""Chat-conditioned scoring of a white-box target (``chat=chatml|template``, ``system``, ``user_template``).

A chat API scores ``u_i`` as the first assistant token after a user turn holding ``u_<i``, not
as a plain continuation (``adapters/chat_templates.py``). With ``chat`` set, an ``HFTarget``
scores every position in that same rendered context instead: one context per position, so L-1
contexts per text. They share all but their last few tokens, so they run packed by shared
prefix (``adapters/hf_packing.py``); others batched and left-padded, last logit only;
``generate`` answers the rendered chat turn. The conditioning is part of the fingerprint;
``logprob_matrix``/``next_token_logprobs`` (the emulator's ground truth) stay raw.

``ChatScoring`` is a mixin of ``HFTarget``: it uses the target's batching (``_batches``,
``_pad``, ``_progress``), tokenizer and records (``_record``, ``_check_ids``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.types import FullDistribution, TokenLogprobs

from .chat_templates import ChatConditioning
from .hf_moments import full_moments, top_values


class ChatScoring:
    """Chat conditioning of an ``HFTarget`` (module docstring)."""

    chat: ChatConditioning | None
    _fingerprint: str | None

    def _set_chat(self, chat: ChatConditioning) -> None:
        if chat.template == "template" and not getattr(self.tokenizer, "chat_template", None):
            raise UserError(
                f"target {self.name} has no chat template of its own",
                "use chat=chatml (the ChatML rendering that the emulator and most ChatML servers use)",
            )
        self.chat = chat
        self._fingerprint = None

    def with_chat(self, chat: ChatConditioning | None) -> Self:
        """The same loaded model with another chat conditioning (weights shared, not copied)."""
        other = copy.copy(self)
        other.chat = None
        other._fingerprint = None
        if chat is not None:
            other._set_chat(chat)
        return other

    def _chat_meta(self) -> dict[str, Any]:
        assert self.chat is not None
        return {"conditioning": "chat", "chat": self.chat.to_json()}

    def _chat_ids(self, context: Sequence[int]) -> list[int]:
        """Ids of the rendered chat turn whose reply's first token follows ``context``."""
        assert self.chat is not None
        return self.tokenize(self.chat.render(self.decode(list(context)), self.tokenizer))

    def _last_logprobs(self, seqs: Sequence[Sequence[int]]):
        """fp32 ``log p(. | seq)`` for each sequence, ``[B, V]``: left-padded, last logit only."""
        torch = self._torch
        ids, mask, pos, _ = self._pad(seqs, "left")
        with torch.inference_mode():
            logits = self.model(
                input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **self._last_logit
            ).logits
        return torch.log_softmax(logits[:, -1].float(), dim=-1)

    def _chat_scored(
        self,
        items: Sequence[tuple[Sequence[int], Sequence[int]]],
        *,
        full_distribution: bool,
        progress: bool,
        top: int = 0,
        keep: Sequence[np.ndarray | None] | None = None,
    ) -> list[tuple[np.ndarray, FullDistribution | None, np.ndarray | None]]:
        """For each (context, ids): lp of ``ids[j]`` as the reply's first token to the chat turn
        holding ``context + ids[:j]`` (one rendered context per position). ``keep[k]``: only those
        positions of item ``k`` are run and returned (None: all); ``top``: also the ``top`` largest
        logprobs of each position's distribution."""
        torch = self._torch
        chosen = [
            np.arange(len(ids), dtype=np.int64) if keep is None or keep[k] is None else np.asarray(keep[k])
            for k, (_, ids) in enumerate(items)
        ]
        jobs: list[tuple[int, int, list[int]]] = []
        for k, (ctx, ids) in enumerate(items):
            full = [*ctx, *ids]
            for r, j in enumerate(chosen[k]):
                cids = self._chat_ids(full[: len(ctx) + int(j)])
                if len(cids) > self.max_context:
                    raise UserError(
                        f"a chat-rendered context of {len(cids)} tokens exceeds the model's context window "
                        f"of {self.max_context}",
                        "truncate long samples before scoring with chat conditioning",
                    )
                jobs.append((k, r, cids))
        lps = [np.empty(len(c), dtype=np.float64) for c in chosen]
        moments = [np.empty((3, len(c)), dtype=np.float64) for c in chosen] if full_distribution else None
        tops = [np.full((len(c), top), np.nan) for c in chosen] if top else None
        with self._progress(len(jobs), "chat-conditioned logprobs", progress) as bar:
            for batch, rows in self._last_rows([c for _, _, c in jobs], self._last_logprobs):  # type: ignore[attr-defined]
                tgt = torch.tensor(
                    [int(items[jobs[i][0]][1][int(chosen[jobs[i][0]][jobs[i][1]])]) for i in batch], device=rows.device
                )
                vals = rows.gather(-1, tgt[:, None])[:, 0].double().cpu().numpy()
                stats = full_moments(rows) if moments is not None else None
                best = top_values(rows, top)
                for r, i in enumerate(batch):
                    k, j, _ = jobs[i]
                    lps[k][j] = vals[r]
                    if moments is not None and stats is not None:
                        moments[k][:, j] = [stats[0][r], stats[1][r], stats[2][r]]
                    if tops is not None and best is not None:
                        tops[k][j, : best.shape[1]] = best[r]
                bar.update(len(batch))
        return [
            (lp, None if moments is None else FullDistribution(*moments[k]), None if tops is None else tops[k])
            for k, lp in enumerate(lps)
        ]

    def _chat_read(
        self, items: Sequence[tuple[str | None, str]], read: Any, *, full_distribution: bool, progress: bool
    ) -> list[TokenLogprobs]:
        """``read_records`` under chat conditioning: only the kept positions' contexts are run."""
        prepared = []
        for i, (prefix, text) in enumerate(items):
            ids = self.tokenize(text)
            if prefix is None:
                self._check_ids(ids, i, text)
                prepared.append((ids[:1], ids[1:], {}))
            else:
                p_ids = self.tokenize(prefix)
                if not p_ids:
                    raise UserError("the conditioning prefix is empty (0 tokens)", "pass a non-empty prefix text")
                self._check_ids(ids, i, text, min_tokens=1)
                prepared.append((p_ids, ids, {"prefix_tokens": len(p_ids)}))
        keep = [read.select(len(ids), text) for (_, text), (_, ids, _) in zip(items, prepared, strict=True)]
        scored = self._chat_scored(
            [(ctx, ids) for ctx, ids, _ in prepared],
            full_distribution=full_distribution,
            progress=progress,
            top=read.top,
            keep=keep,
        )
        out = []
        for (_, text), (ctx, ids, meta), kept, (lps, fd, top) in zip(items, prepared, keep, scored, strict=True):
            rows = np.arange(len(ids)) if kept is None else kept
            out.append(
                self._record(
                    text,
                    [ids[int(j)] for j in rows],
                    lps,
                    ctx,
                    fd,
                    meta={**meta, **self._chat_meta()},
                    top=top,
                    positions=None if kept is None else np.asarray(kept, dtype=np.int64),
                )
            )
        return out

    def _chat_conditional(self, prefix: str, texts: Sequence[str], *, progress: bool) -> list[TokenLogprobs]:
        p_ids = self.tokenize(prefix)
        if not p_ids:
            raise UserError("the conditioning prefix is empty (0 tokens)", "pass a non-empty prefix text")
        t_ids = [self.tokenize(t) for t in texts]
        for i, (t, ids) in enumerate(zip(texts, t_ids, strict=True)):
            self._check_ids(ids, i, t, min_tokens=1)
        scored = self._chat_scored([(p_ids, ids) for ids in t_ids], full_distribution=False, progress=progress)
        meta = {"prefix_tokens": len(p_ids), **self._chat_meta()}
        return [
            self._record(t, ids, lps, p_ids, meta=meta)
            for t, ids, (lps, _, _) in zip(texts, t_ids, scored, strict=True)
        ]
