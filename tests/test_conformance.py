"""Every score pinned to a value computed by hand from its authors' formula (docs/CONFORMANCE.md).

Each test writes the authors' arithmetic out (the reference code named in CONFORMANCE.md) on a
hand-made token record, then checks the registered score (or the EM-MIA function) against it.
Records hold ``lp_i`` for the positions this project scores: ``u_2..u_L`` for a plain record
(the authors' ``get_ll``/``infer`` do the same: the first token has no context), ``u_1..u_L``
for a conditional one.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest

from blackbox_audit.fixtures.records import hand_record
from blackbox_audit.methods import em_mia as em
from blackbox_audit.scores import Conditional, Full, Plain, parse_spec
from blackbox_audit.scores.pac import pac_from_logprobs
from blackbox_audit.types import FullDistribution

TEXT = "The Cat sat On the Mat"
# plain record: lp of u_2..u_11 (ten scored tokens)
LP = [-0.5, -2.0, -1.0, -4.0, -0.1, -3.0, -1.5, -0.7, -2.5, -6.0]
LP_LOWER = [-1.0, -3.0, -2.0, -5.0, -0.5, -4.0, -2.5, -1.5, -3.5, -7.0]


def score(spec: str, fetched: dict) -> float:
    s = parse_spec(spec)
    return s.score.compute(TEXT, fetched, s.params)


def plain() -> dict:
    return {Plain(TEXT): hand_record(TEXT, LP), Plain(TEXT.lower()): hand_record(TEXT.lower(), LP_LOWER)}


def test_loss() -> None:
    # Min-K%++ run.py: ll = -loss (HF mean cross-entropy over u_2..u_L), "larger for training data"
    ll = (-0.5 - 2.0 - 1.0 - 4.0 - 0.1 - 3.0 - 1.5 - 0.7 - 2.5 - 6.0) / 10  # = -2.13
    assert score("loss", plain()) == pytest.approx(-2.13)
    assert ll == pytest.approx(-2.13)


def test_zlib_value_and_carlini_ranking() -> None:
    z = len(zlib.compress(bytes(TEXT, "utf-8")))  # Carlini / Min-K%++ / ReCaLL: zlib entropy in bytes
    assert score("zlib", plain()) == pytest.approx(-2.13 / z)  # Min-K%++ run.py: ll / zlib_len
    # Carlini et al. extraction.py sorts by zlib / log(ppl) = Z / NLL, highest first; ours ranks alike
    texts = [("aaaa aaaa aaaa aaaa", 1.0), ("a quick brown fox", 1.5), ("zq xv jk wp", 2.5), ("the the", 0.4)]
    carlini = [len(zlib.compress(t.encode())) / nll for t, nll in texts]
    ours = [-nll / len(zlib.compress(t.encode())) for t, nll in texts]
    assert np.argsort(carlini).tolist() == np.argsort(ours).tolist()


def test_lowercase_is_the_ratio_of_mean_logprobs() -> None:
    # Carlini extraction.py: log(ppl_lower) / log(ppl); Min-K%++ run_ref.py: ll_lowercase / ll
    ll_lower = sum(LP_LOWER) / 10  # -3.0; ll = -2.13 (test_loss)
    assert ll_lower == pytest.approx(-3.0)
    assert score("lowercase", plain()) == pytest.approx(-3.0 / -2.13)  # = 1.4085, higher = member
    same = {Plain(TEXT): hand_record(TEXT, LP), Plain(TEXT.lower()): hand_record(TEXT.lower(), LP)}
    assert score("lowercase", same) == pytest.approx(1.0)


def test_min_k() -> None:
    # Min-K% / Min-K%++ code: k_length = int(len * ratio); mean of np.sort(lp)[:k_length]
    assert score("min_k", plain()) == pytest.approx((-6.0 + -4.0) / 2)  # int(10 * 0.2) = 2 lowest
    assert score("min_k:k=0.3", plain()) == pytest.approx((-6.0 - 4.0 - 3.0) / 3)


def _dist(probs: list[float]) -> tuple[float, float, float]:
    """(mu, sigma, sum p log(1-p)) of one next-token distribution, as in Min-K%++ run.py:
    mu = sum p log p, sigma = sqrt(sum p (log p)^2 - mu^2)."""
    mu = sum(p * math.log(p) for p in probs)
    sigma = math.sqrt(sum(p * math.log(p) ** 2 for p in probs) - mu * mu)
    return mu, sigma, sum(p * math.log(1 - p) for p in probs)


# five positions, each a 3-token distribution and the index of the observed token
DISTS = [([0.7, 0.2, 0.1], 0), ([0.5, 0.3, 0.2], 2), ([0.6, 0.3, 0.1], 1), ([0.9, 0.05, 0.05], 1), ([0.4, 0.4, 0.2], 0)]


def full_record() -> dict:
    moments = [_dist(p) for p, _ in DISTS]
    full = FullDistribution(
        mean_logprob=np.array([m[0] for m in moments]),
        std_logprob=np.array([m[1] for m in moments]),
        sum_p_log1mp=np.array([m[2] for m in moments]),
    )
    lp = [math.log(p[y]) for p, y in DISTS]
    return {Full(TEXT): hand_record(TEXT, lp, full=full)}


def test_min_k_pp() -> None:
    z = []
    for probs, y in DISTS:
        mu, sigma, _ = _dist(probs)
        z.append((math.log(probs[y]) - mu) / sigma)
    # int(5 * 0.2) = 1 lowest normalised token; position 4 (p = 0.05 under a peaked distribution)
    assert min(z) == pytest.approx(z[3])
    assert score("min_k_pp", full_record()) == pytest.approx(z[3])
    assert score("min_k_pp:k=0.4", full_record()) == pytest.approx(np.mean(sorted(z)[:2]))


def test_m_entropy() -> None:
    # Song & Mittal 2021: Mentr = -(1 - p_y) log p_y - sum_{v != y} p_v log(1 - p_v); lower = member
    mentr = []
    for probs, y in DISTS:
        rest = sum(p * math.log(1 - p) for v, p in enumerate(probs) if v != y)
        mentr.append(-(1 - probs[y]) * math.log(probs[y]) - rest)
    assert score("m_entropy", full_record()) == pytest.approx(-sum(mentr) / len(mentr))


def test_max_k_is_minus_pac_polarized_distance() -> None:
    # PAC attack.py: far = max(int(n * 0.05), 1) highest, local = max(int(n * 0.3), 1) lowest,
    # L_M = mean(far) - mean(local); n = 10 -> 1 highest (-0.1), 3 lowest (-6, -4, -3)
    lm = -0.1 - (-6.0 - 4.0 - 3.0) / 3
    assert lm == pytest.approx(4.2333333)
    assert score("max_k", plain()) == pytest.approx(-lm)


def test_pac_arithmetic() -> None:
    # PAC attack.py: PAC = L_M(x) - mean_j L_M(aug_j); calculate_auc ranks by -PAC
    aug = [[-1.0, -1.0, -2.0, -8.0, -0.2, -3.0, -1.0, -0.5, -2.0, -5.0], [-0.3, -2.0, -7.0, -4.0] * 2 + [-1.0, -1.0]]
    lm_x = -0.1 - (-6.0 - 4.0 - 3.0) / 3  # 4.2333
    lm_a0 = -0.2 - (-8.0 - 5.0 - 3.0) / 3  # 5.1333
    lm_a1 = -0.3 - (-7.0 - 7.0 - 4.0) / 3  # 5.7
    authors_pac = lm_x - (lm_a0 + lm_a1) / 2
    assert pac_from_logprobs(np.array(LP), [np.array(a) for a in aug]) == pytest.approx(-authors_pac)


# ---------------------------------------------------------------- ReCaLL / Con-ReCall


@pytest.fixture()
def prefix_files(tmp_path: Path) -> tuple[str, str]:
    nm, m = tmp_path / "nm.jsonl", tmp_path / "m.jsonl"
    nm.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["Old text one.", "Old text two."]))
    m.write_text("".join(json.dumps({"text": t, "label": 1}) + "\n" for t in ["Seen text."]))
    return str(nm), str(m)


X = "x y z w"
X_PLAIN = [-2.0, -4.0, -3.0]  # u_2..u_4: LL(x) = -3
COND_NM = [-8.0, -1.0, -2.0, -3.0]  # u_1..u_4 given the non-member prefix: mean -3.5
COND_M = [-4.0, -0.5, -1.0, -0.5]  # u_1..u_4 given the member prefix: mean -1.5


def test_recall(prefix_files) -> None:
    nm, _ = prefix_files
    spec = parse_spec(f"recall:prefixes={nm}:shots=2")
    (plain_req, cond_req) = spec.score.requests(X, spec.params)
    assert cond_req == Conditional("Old text one.Old text two.", X)  # ReCaLL run.py: "".join(prefix)
    fetched = {plain_req: hand_record(X, X_PLAIN), cond_req: hand_record(X, COND_NM)}
    # ReCaLL run.py: get_conditional_ll masks the prefix only -> mean over u_1..u_4; get_ll over u_2..u_4
    assert spec.score.compute(X, fetched, spec.params) == pytest.approx(-3.5 / -3.0)
    legacy = parse_spec(f"recall:prefixes={nm}:shots=2:first_token=false")
    assert legacy.score.compute(X, fetched, legacy.params) == pytest.approx(-2.0 / -3.0)


def test_conrecall(prefix_files) -> None:
    nm, m = prefix_files
    for gamma in (0.5, 0.1, 1.0):
        spec = parse_spec(f"conrecall:prefixes={nm}:member_prefixes={m}:gamma={gamma}")
        plain_req, nm_req, m_req = spec.score.requests(X, spec.params)
        assert (nm_req.prefix, m_req.prefix) == ("Old text one.Old text two.", "Seen text.")
        fetched = {plain_req: hand_record(X, X_PLAIN), nm_req: hand_record(X, COND_NM), m_req: hand_record(X, COND_M)}
        # CON-RECALL run.py: (ll_nonmember - gamma * ll_member) / ll
        want = (-3.5 - gamma * -1.5) / -3.0
        assert spec.score.compute(X, fetched, spec.params) == pytest.approx(want)


# ---------------------------------------------------------------- EM-MIA on a 4 x 4 hand matrix

# R[p, x] chosen by hand, self-pairs on the diagonal (small: LL(p | p) ~ 0)
R = np.array(
    [
        [0.10, 0.80, 0.90, 0.70],
        [0.95, 0.05, 0.85, 0.60],
        [0.60, 0.90, 0.02, 0.95],
        [0.70, 0.50, 0.80, 0.03],
    ]
)


class MatrixTarget:
    """Plain LL(x) = -1 for every text; LL(x | p) over u_2..u_L = -R[p, x], with a first
    conditional position of -50 that the EM-MIA convention must not read."""

    texts = ["t0 a", "t1 b", "t2 c", "t3 d"]

    def token_logprobs(self, texts, *, full_distribution=False, progress=True):
        return [hand_record(t, [-1.0, -1.0]) for t in texts]

    def conditional_logprobs(self, prefix, texts, *, progress=True):
        p = self.texts.index(prefix)
        return [hand_record(t, [-50.0, -R[p, self.texts.index(t)], -R[p, self.texts.index(t)]]) for t in texts]


def test_em_mia_matrix_keeps_self_pairs_and_scores_u2_onwards() -> None:
    t = MatrixTarget()
    matrix = em.recall_matrix(t, t.texts, np.arange(4), progress=False)
    # emmia.py reads run.py's ReCaLL-all scores: every (p, x), p = x included; infer scores u_2..u_L
    np.testing.assert_allclose(matrix.values, R)
    legacy = em.recall_matrix(t, t.texts, np.arange(4), self_pairs=False, progress=False)
    assert np.isnan(np.diag(legacy.values)).all()
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(legacy.values[off], R[off])


def test_em_mia_prefix_scores_update_avg_avgp_topk_by_hand() -> None:
    matrix = em.RecallMatrix(values=R, pool=np.arange(4), ll=-np.ones(4))
    f = np.array([0.9, 0.1, 0.5, 0.3])  # median 0.4 -> pseudo-labels [1, 0, 1, 0]
    # emmia.py: r(p) = calc_auc(R[p], f > median f): share of (member, non-member) pairs ordered right
    # p0: members {0.10, 0.90} vs non {0.80, 0.70}: 0.90 wins twice -> 2/4
    # p1: {0.95, 0.85} vs {0.05, 0.60}: 4/4;  p2: {0.60, 0.02} vs {0.90, 0.95}: 0/4
    # p3: {0.70, 0.80} vs {0.50, 0.03}: 4/4
    r = em.prefix_scores(matrix, f)
    np.testing.assert_allclose(r, [0.5, 1.0, 0.0, 1.0])
    # NegPref update: membership = -prefix score
    res = em.em_mia(matrix, f, iterations=1, update="neg-prefix")  # named: auto is gated by its premise check
    np.testing.assert_allclose(res.final, [-0.5, -1.0, 0.0, -1.0])
    # Avg(x) = mean_p R[p, x] (emmia.py: recall_all_scores.mean(0)), diagonal included
    np.testing.assert_allclose(em.avg_scores(matrix), [2.35 / 4, 2.25 / 4, 2.57 / 4, 2.28 / 4])
    # AvgP(p) = mean_x R[p, x] (emmia.py: recall_all_scores.mean(1)), ranked as is (higher = member)
    np.testing.assert_allclose(em.avgp_scores(matrix), [2.5 / 4, 2.45 / 4, 2.47 / 4, 2.03 / 4])
    # topk-recall, k = 2: the best prefixes by r are p1 and p3 (stable order); texts 1 and 3 keep
    # their own self-pair among the two terms
    top2 = em.topk_recall(matrix, r, 2)
    np.testing.assert_allclose(top2, [(0.95 + 0.70) / 2, (0.05 + 0.50) / 2, (0.85 + 0.80) / 2, (0.60 + 0.03) / 2])
