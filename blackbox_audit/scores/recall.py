"""ReCaLL and Con-ReCall (SPEC §2), registered as ``recall`` and ``conrecall``.

ReCaLL (Xie et al. 2024): ``recall(x) = LL(x | p) / LL(x)``, LL the average token
log-likelihood and ``p`` a prefix made of known non-member texts. Conditioning a member on
non-member context lowers its likelihood more than a non-member's, and both LLs are negative,
so the ratio is *higher* for members: no sign conversion (SPEC orientation already holds).

Con-ReCall (Wang et al. 2024, arXiv 2409.03363, Eq. in §3; public code
``WangCheng0116/CON-RECALL`` ``run.py``): with known *member* texts as a second prefix,

    conrecall(x) = (LL(x | P_nonmember) - gamma * LL(x | P_member)) / LL(x).

A member prefix raises a member's likelihood (the numerator's second term shrinks) while the
non-member prefix lowers it, so this is again higher = member (the authors' evaluation ranks
by the raw value). The paper sweeps gamma over {0.1, ..., 1.0} per setting and reports the
best; we default to gamma = 0.5, the default of fast-mia's ``conrecall`` (the implementation
behind the 96.8 AUC quoted in the issue), because sweeping on labelled test data is not a
label-free choice.

Positions: an unconditional record covers ``u_2..u_L`` (the first token is context, see
``blackbox_audit.types``), a conditional record covers ``u_1..u_L``. ``LL(x | p)`` therefore
drops the first conditional position, so both averages run over the same tokens
``u_2..u_L`` (``conditional_ll``).

Prefixes: the first ``shots`` texts of a file (any format ``load_dataset`` reads; labels, if
present, must all say non-member for ``prefixes`` and member for ``member_prefixes``), joined
and terminated by a blank line (``PREFIX_SEP``) so that ``x`` starts a new paragraph. A text
that is itself one of the prefix shots is scored with a prefix built from the other shots
(otherwise the model could copy it from its context, ``LL(x|p) ~ 0``). The white-box target
encodes each distinct prefix once and reuses its key/value cache for every text (batched;
``HFTarget.conditional_logprobs``); a prefix that does not fit the context window is cut from
the left with a warning by the adapter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.types import TokenLogprobs

from .builtin import mean_logprob
from .registry import REQUIRED, Score, register_score
from .requests import Conditional, Plain, Request

PREFIX_SEP = "\n\n"
DEFAULT_SHOTS = 12  # EM-MIA §6.2.1 fixes n = 12 for its ReCaLL baselines


def build_prefix(shots: Sequence[str]) -> str:
    """The conditioning text for ``shots``: joined and ended by ``PREFIX_SEP``."""
    if not shots:
        raise UserError("the prefix has no texts", "give at least one prefix text")
    return PREFIX_SEP.join(shots) + PREFIX_SEP


def conditional_ll(record: TokenLogprobs) -> float:
    """``LL(x | p)`` over ``u_2..u_L`` (the first conditional position dropped, see module doc)."""
    lp = np.asarray(record.logprobs, dtype=np.float64)
    if len(lp) < 2:
        raise UserError(
            f"text {record.text[:40]!r} has {len(lp)} token(s); ReCaLL needs at least 2",
            "drop one-token samples before scoring",
        )
    return float(np.mean(lp[1:]))


def recall_ratio(conditional: TokenLogprobs, plain: TokenLogprobs) -> float:
    """``LL(x|p) / LL(x)`` (higher = member)."""
    return conditional_ll(conditional) / mean_logprob(plain)


@lru_cache(maxsize=32)
def _load_file(path: str, mtime: float, want: int) -> tuple[str, ...]:
    from blackbox_audit.data import load_dataset

    ds = load_dataset(path)
    role = "member" if want == 1 else "non-member"
    if ds.labels is not None and any(lab is not None and lab != want for lab in ds.labels):
        raise UserError(
            f"prefix file {path} should hold only known {role}s, but some rows are labelled {1 - want}",
            f"keep only the {role} rows (label {want}) in the prefix file",
        )
    return tuple(ds.texts)


def load_prefix_texts(path: str, *, members: bool = False) -> tuple[str, ...]:
    """Texts of a prefix file (cached per path and modification time)."""
    if not os.path.isfile(path):
        raise UserError(f"prefix file {path} does not exist", "pass a .jsonl/.csv/.txt file of known texts")
    return _load_file(path, os.path.getmtime(path), 1 if members else 0)


def prefix_for(text: str, pool: Sequence[str], shots: int) -> str:
    """The first ``shots`` texts of ``pool`` other than ``text`` itself, as one prefix."""
    chosen = [p for p in pool if p != text][:shots]
    if not chosen:
        raise UserError("no prefix text is left once the scored text itself is excluded", "add more prefix texts")
    return build_prefix(chosen)


def _check_shots(name: str, params: Mapping[str, Any]) -> None:
    if int(params["shots"]) < 1:
        raise UserError(f"parameter shots={params['shots']} of score '{name}' must be >= 1", f"write {name}:shots=12")


class ReCaLL(Score):
    """``recall:prefixes=FILE[:shots=12]``: ``LL(x|p) / LL(x)`` with ``p`` from known non-members.

    Higher = member (no conversion). Costs one plain record and one conditional record per
    text; all texts share one prefix, so white-box it is encoded once.
    """

    name = "recall"
    needs = (Plain, Conditional)
    defaults = {"prefixes": REQUIRED, "shots": DEFAULT_SHOTS}
    param_types = {"prefixes": str}

    def check_params(self, params: Mapping[str, Any]) -> None:
        _check_shots(self.name, params)
        load_prefix_texts(params["prefixes"])  # fail on a bad file before any model call

    def _prefix(self, text: str, params: Mapping[str, Any]) -> str:
        return prefix_for(text, load_prefix_texts(params["prefixes"]), int(params["shots"]))

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text), Conditional(self._prefix(text, params), text))

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        return recall_ratio(fetched[Conditional(self._prefix(text, params), text)], fetched[Plain(text)])


class ConReCaLL(Score):
    """``conrecall:prefixes=NM_FILE:member_prefixes=M_FILE[:gamma=0.5][:shots=12]``.

    ``(LL(x|P_nm) - gamma * LL(x|P_m)) / LL(x)``, higher = member (see module docstring for the
    form, the source and the gamma default). Costs one plain and two conditional records per text.
    """

    name = "conrecall"
    needs = (Plain, Conditional)
    defaults = {"prefixes": REQUIRED, "member_prefixes": REQUIRED, "gamma": 0.5, "shots": DEFAULT_SHOTS}
    param_types = {"prefixes": str, "member_prefixes": str}

    def check_params(self, params: Mapping[str, Any]) -> None:
        _check_shots(self.name, params)
        if not float(params["gamma"]) >= 0.0:
            raise UserError(f"gamma={params['gamma']} of score 'conrecall' must be >= 0", "write conrecall:gamma=0.5")
        load_prefix_texts(params["prefixes"])
        load_prefix_texts(params["member_prefixes"], members=True)

    def _prefixes(self, text: str, params: Mapping[str, Any]) -> tuple[str, str]:
        shots = int(params["shots"])
        nm = prefix_for(text, load_prefix_texts(params["prefixes"]), shots)
        m = prefix_for(text, load_prefix_texts(params["member_prefixes"], members=True), shots)
        return nm, m

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        nm, m = self._prefixes(text, params)
        return (Plain(text), Conditional(nm, text), Conditional(m, text))

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        nm, m = self._prefixes(text, params)
        return conrecall_value(
            conditional_ll(fetched[Conditional(nm, text)]),
            conditional_ll(fetched[Conditional(m, text)]),
            mean_logprob(fetched[Plain(text)]),
            float(params["gamma"]),
        )


def conrecall_value(ll_nonmember: float, ll_member: float, ll: float, gamma: float) -> float:
    """``(ll_nonmember - gamma * ll_member) / ll`` (higher = member)."""
    return (ll_nonmember - gamma * ll_member) / ll


register_score(ReCaLL())
register_score(ConReCaLL())
