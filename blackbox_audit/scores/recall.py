"""ReCaLL and Con-ReCall (SPEC §2), registered as ``recall`` and ``conrecall``.

ReCaLL (Xie et al. 2024; public code ``ruoyuxie/recall`` ``src/run.py``):
``recall(x) = LL(x | p) / LL(x)``, LL the average token log-likelihood and ``p`` a prefix made
of known non-member texts. Conditioning a member on non-member context lowers its likelihood
more than a non-member's, and both LLs are negative, so the ratio is *higher* for members: no
sign conversion (SPEC orientation already holds; the authors rank by the raw ratio).

Con-ReCall (Wang et al. 2024, arXiv 2409.03363, §3; public code ``WangCheng0116/CON-RECALL``
``run.py``): with known *member* texts as a second prefix,

    conrecall(x) = (LL(x | P_nonmember) - gamma * LL(x | P_member)) / LL(x).

A member prefix raises a member's likelihood (the numerator's second term shrinks) while the
non-member prefix lowers it, so this is again higher = member (the authors rank by the raw
value). gamma: the authors' code computes every gamma of a grid and the paper reports the best
per setting; choosing gamma that way reads the labels of the evaluated texts. Our default,
gamma = 0.5, is the middle of that grid and fast-mia's default (``src/methods/conrecall.py``),
a label-free choice. ``conrecall:...:gamma=sweep`` computes the grid 0.1, 0.2, ..., 1.0 (one
column per value, from the same records; the authors' ``run.py`` lists the same grid without
0.4); picking the best column afterwards uses labels, so report it as such.

Conventions, as in the authors' code; each alternative is a named parameter, its measured
effect in ``docs/CONFORMANCE.md``:
- **Shots are concatenated directly**: ``"".join(shots)`` (``sep=none``). ``sep=space`` joins
  with one space (EM-MIA's code); ``sep=paragraph`` joins *and ends* the prefix with a blank
  line (this project's default before issue 11, so that ``x`` starts a new paragraph). The
  prefix and the text are tokenized separately and their ids concatenated, as in the authors'
  ``get_conditional_ll``: the boundary is always a token boundary. On an API target that is
  sent text rather than ids, a boundary may not survive re-tokenization (e.g. a shot ending in
  a space, then a text starting with a letter); those positions come back ``bounded`` (never
  silently exact). Shots ending in punctuation joined to a text round-trip with either
  ``none`` or ``paragraph`` on the canary's byte-level BPE.
- **Positions**: an unconditional record covers ``u_2..u_L`` (the first token has no context,
  see ``blackbox_audit.types``; the authors' ``get_ll`` is the same); a conditional record
  covers ``u_1..u_L``. The authors' ``get_conditional_ll`` masks only the prefix, so ``LL(x|p)``
  averages over *every* token ``u_1..u_L`` (the first one predicted from the prefix's last
  token) while ``LL(x)`` averages over ``u_2..u_L``: numerator and denominator are means over
  L and L-1 tokens. We follow that (``first_token=true``). ``first_token=false`` drops ``u_1``
  from ``LL(x|p)`` so both means run over the same tokens (this project's default before issue
  11, and what EM-MIA's ``infer`` does).

Prefixes: the first ``shots`` texts of a file (any format ``load_dataset`` reads; labels, if
present, must all say non-member for ``prefixes`` and member for ``member_prefixes``). The
authors remove the prefix shots from the evaluated texts; we score every text given, and a
text that is itself one of the shots gets a prefix built from the other shots (otherwise the
model could copy it from its context, ``LL(x|p) ~ 0``). The white-box target encodes each
distinct prefix once and reuses its key/value cache for every text (batched;
``HFTarget.conditional_logprobs``); a prefix that does not fit the context window is cut from
the left with a warning by the adapter (the authors drop whole shots from the front instead).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from blackbox_audit.errors import UserError
from blackbox_audit.types import TokenLogprobs

from .builtin import mean_logprob, mean_ratio
from .precision import mean_bound, ratio_bound
from .registry import REQUIRED, Score, register_score
from .requests import Conditional, Plain, Request

#: Prefix separators by name (the ``sep`` parameter); see the module docstring.
SEPARATORS = {"none": "", "space": " ", "paragraph": "\n\n"}
DEFAULT_SEP = "none"  # the ReCaLL / Con-ReCall authors' "".join
DEFAULT_SHOTS = 12  # EM-MIA §6.2.1 fixes n = 12 for its ReCaLL baselines
GAMMA_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # Con-ReCall's sweep


def check_sep(sep: str) -> str:
    """``sep`` must name one of ``SEPARATORS``."""
    if sep not in SEPARATORS:
        raise UserError(f"unknown prefix separator sep={sep!r}", f"use sep= one of {', '.join(SEPARATORS)}")
    return sep


def build_prefix(shots: Sequence[str], sep: str = DEFAULT_SEP) -> str:
    """The conditioning text for ``shots``: ``"".join`` (``none``), ``" ".join`` (``space``), or
    joined and ended by a blank line (``paragraph``)."""
    if not shots:
        raise UserError("the prefix has no texts", "give at least one prefix text")
    joiner = SEPARATORS[check_sep(sep)]
    return joiner.join(shots) + (joiner if sep == "paragraph" else "")


def conditional_ll(record: TokenLogprobs, *, first_token: bool = True) -> float:
    """``LL(x | p)``: the mean over ``u_1..u_L`` (``first_token``) or over ``u_2..u_L``."""
    lp = np.asarray(record.logprobs, dtype=np.float64)
    if len(lp) < 2:
        raise UserError(
            f"text {record.text[:40]!r} has {len(lp)} token(s); ReCaLL needs at least 2",
            "drop one-token samples before scoring",
        )
    return float(np.mean(lp if first_token else lp[1:]))


def recall_ratio(conditional: TokenLogprobs, plain: TokenLogprobs, *, first_token: bool = True) -> float:
    """``LL(x|p) / LL(x)`` (higher = member; see the module docstring for the positions)."""
    return mean_ratio(conditional_ll(conditional, first_token=first_token), mean_logprob(plain))


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


def prefix_for(text: str, pool: Sequence[str], shots: int, sep: str = DEFAULT_SEP) -> str:
    """The first ``shots`` texts of ``pool`` other than ``text`` itself, as one prefix."""
    chosen = [p for p in pool if p != text][:shots]
    if not chosen:
        raise UserError("no prefix text is left once the scored text itself is excluded", "add more prefix texts")
    return build_prefix(chosen, sep)


def _check_common(name: str, params: Mapping[str, Any]) -> None:
    if int(params["shots"]) < 1:
        raise UserError(f"parameter shots={params['shots']} of score '{name}' must be >= 1", f"write {name}:shots=12")
    if params["sep"] not in SEPARATORS:
        raise UserError(
            f"parameter sep={params['sep']} of score '{name}' is not a known separator",
            f"write {name}:sep=none (the authors' direct concatenation), sep=space or sep=paragraph",
        )


class ReCaLL(Score):
    """``recall:prefixes=FILE[:shots=12][:sep=none][:first_token=true]``: ``LL(x|p) / LL(x)``.

    ``p`` is made of known non-members. Higher = member (no conversion). The defaults are the
    authors' conventions (module docstring). Costs one plain record and one conditional record
    per text; all texts share one prefix, so white-box it is encoded once.
    """

    name = "recall"
    needs = (Plain, Conditional)
    defaults = {"prefixes": REQUIRED, "shots": DEFAULT_SHOTS, "sep": DEFAULT_SEP, "first_token": True}
    param_types = {"prefixes": str}

    def check_params(self, params: Mapping[str, Any]) -> None:
        _check_common(self.name, params)
        load_prefix_texts(params["prefixes"])  # fail on a bad file before any model call

    def _prefix(self, text: str, params: Mapping[str, Any]) -> str:
        return prefix_for(text, load_prefix_texts(params["prefixes"]), int(params["shots"]), params["sep"])

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        return (Plain(text), Conditional(self._prefix(text, params), text))

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        """A ratio of two means (``precision.ratio_bound``); no a-priori bound (``sensitivity`` None)."""
        cond, plain = fetched[Conditional(self._prefix(text, params), text)], fetched[Plain(text)]
        first = bool(params["first_token"])
        return ratio_bound(
            conditional_ll(cond, first_token=first),
            mean_bound(cond, skip_first=not first),
            mean_logprob(plain),
            mean_bound(plain),
        )

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        cond = fetched[Conditional(self._prefix(text, params), text)]
        return recall_ratio(cond, fetched[Plain(text)], first_token=bool(params["first_token"]))


class ConReCaLL(Score):
    """``conrecall:prefixes=NM_FILE:member_prefixes=M_FILE[:gamma=0.5|sweep][:shots=12][:sep=none][:first_token=true]``.

    ``(LL(x|P_nm) - gamma * LL(x|P_m)) / LL(x)``, higher = member (see module docstring for the
    form, the source, the conventions and the gamma default; ``gamma=sweep`` gives one column
    per value of ``GAMMA_GRID``). Costs one plain and two conditional records per text, however
    many gammas.
    """

    name = "conrecall"
    needs = (Plain, Conditional)
    defaults = {
        "prefixes": REQUIRED,
        "member_prefixes": REQUIRED,
        "gamma": 0.5,
        "shots": DEFAULT_SHOTS,
        "sep": DEFAULT_SEP,
        "first_token": True,
    }
    param_types = {"prefixes": str, "member_prefixes": str}
    sweeps = {"gamma": GAMMA_GRID}

    def check_params(self, params: Mapping[str, Any]) -> None:
        _check_common(self.name, params)
        if not float(params["gamma"]) >= 0.0:
            raise UserError(f"gamma={params['gamma']} of score 'conrecall' must be >= 0", "write conrecall:gamma=0.5")
        load_prefix_texts(params["prefixes"])
        load_prefix_texts(params["member_prefixes"], members=True)

    def _prefixes(self, text: str, params: Mapping[str, Any]) -> tuple[str, str]:
        shots, sep = int(params["shots"]), params["sep"]
        nm = prefix_for(text, load_prefix_texts(params["prefixes"]), shots, sep)
        m = prefix_for(text, load_prefix_texts(params["member_prefixes"], members=True), shots, sep)
        return nm, m

    def requests(self, text: str, params: Mapping[str, Any]) -> tuple[Request, ...]:
        nm, m = self._prefixes(text, params)
        return (Plain(text), Conditional(nm, text), Conditional(m, text))

    def error_bound(self, text: str, fetched: Mapping[Request, Any], params: Mapping[str, Any]) -> float:
        """``(a - gamma c) / l``: the numerator's bound is ``e_a + gamma e_c``, then ``ratio_bound``."""
        nm, m = self._prefixes(text, params)
        a, c, plain = fetched[Conditional(nm, text)], fetched[Conditional(m, text)], fetched[Plain(text)]
        gamma, first = float(params["gamma"]), bool(params["first_token"])
        num = conditional_ll(a, first_token=first) - gamma * conditional_ll(c, first_token=first)
        num_err = mean_bound(a, skip_first=not first) + gamma * mean_bound(c, skip_first=not first)
        return ratio_bound(num, num_err, mean_logprob(plain), mean_bound(plain))

    def compute(self, text: str, fetched: Mapping[Request, TokenLogprobs], params: Mapping[str, Any]) -> float:
        nm, m = self._prefixes(text, params)
        first = bool(params["first_token"])
        return conrecall_value(
            conditional_ll(fetched[Conditional(nm, text)], first_token=first),
            conditional_ll(fetched[Conditional(m, text)], first_token=first),
            mean_logprob(fetched[Plain(text)]),
            float(params["gamma"]),
        )


def conrecall_value(ll_nonmember: float, ll_member: float, ll: float, gamma: float) -> float:
    """``(ll_nonmember - gamma * ll_member) / ll`` (higher = member)."""
    return mean_ratio(ll_nonmember - gamma * ll_member, ll)


register_score(ReCaLL())
register_score(ConReCaLL())
