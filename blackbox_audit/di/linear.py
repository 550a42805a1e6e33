"""The linear aggregator of dataset inference: logistic regression trained like the authors'.

Both DI papers aggregate per-text features with ``nn.Linear(d, 1)`` trained on the full batch
with ``BCEWithLogitsLoss`` and Adam (lr 0.01) from PyTorch's default initialisation,
``U(-1/sqrt(d), 1/sqrt(d))`` for weights and bias; suspect texts are label 0, held-out texts
label 1. Plain DI (Maini et al.) trains 1000 epochs with free weights. Calibrated DI (Zhao et
al. §4.3, App. D.2) constrains every weight to (0, 1) through a sigmoid, ``w = sigmoid(v)``,
and trains 200 epochs: a feature whose held-out values are *lower* than its suspect values can
then only get a small weight, never a negative one that would turn a generation shift into a
false "member" verdict. The epoch count is part of the method: from the default start
(``w ~= 0.5``) 200 Adam steps of 0.01 keep every weight within about (0.12, 0.88), so no
feature is dropped entirely.

This is the same computation in numpy (float64, seeded), so plain DI needs no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64)))  # overflow-free logistic


@dataclass(frozen=True)
class LinearFit:
    """A fitted aggregator: ``logit(x) = offset + x @ weights + bias``; ``weights`` are the effective
    ones (already through the sigmoid where ``constrained``)."""

    weights: np.ndarray
    bias: float
    constrained: np.ndarray  # per weight: True = through the sigmoid, in (0, 1)
    final_loss: float

    def logits(self, x: np.ndarray, offset: np.ndarray | float = 0.0) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) @ self.weights + self.bias + offset

    def predict_proba(self, x: np.ndarray, offset: np.ndarray | float = 0.0) -> np.ndarray:
        """Probability of the held-out label (1) per row."""
        return sigmoid(self.logits(x, offset))


def _loss_and_grad(
    theta: np.ndarray, x: np.ndarray, y: np.ndarray, mask: np.ndarray, offset: np.ndarray | float = 0.0
) -> tuple[float, np.ndarray]:
    """Mean binary cross-entropy (from logits, overflow-free) and its gradient in the raw parameters."""
    d = x.shape[1]
    w = np.where(mask, sigmoid(theta[:d]), theta[:d])
    z = x @ w + theta[d] + offset
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    dz = (sigmoid(z) - y) / len(y)
    grad_w = x.T @ dz
    grad_w = np.where(mask, grad_w * w * (1.0 - w), grad_w)
    return loss, np.concatenate([grad_w, [dz.sum()]])


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    *,
    constrained: bool | Sequence[bool],
    epochs: int,
    lr: float = 0.01,
    seed: int = 0,
    offset: np.ndarray | float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> LinearFit:
    """Logistic regression of ``y`` on ``x`` (plus a fixed per-row ``offset`` logit).

    ``epochs > 0``: full-batch Adam for that many steps (the authors' recipe); ``epochs = 0``:
    L-BFGS to convergence, i.e. the maximum-likelihood fit under the constraint.
    ``constrained``: one flag for every weight, or one per column; a constrained weight is
    ``sigmoid(v)``, a free one is ``v`` itself.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x must be [n, d] with one label per row, got {x.shape} and {y.shape}")
    d = x.shape[1]
    mask = np.broadcast_to(np.asarray(constrained, dtype=bool), (d,)).copy()
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(d)
    theta = np.concatenate([rng.uniform(-bound, bound, d), rng.uniform(-bound, bound, 1)])
    if epochs == 0:
        from scipy.optimize import minimize

        res = minimize(
            _loss_and_grad,
            theta,
            args=(x, y, mask, offset),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 5000, "gtol": 1e-8},
        )
        theta = res.x
    else:
        m = np.zeros_like(theta)
        v = np.zeros_like(theta)
        b1, b2 = betas
        for t in range(1, epochs + 1):
            _, grad = _loss_and_grad(theta, x, y, mask, offset)
            m = b1 * m + (1 - b1) * grad
            v = b2 * v + (1 - b2) * grad * grad
            theta = theta - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    w = np.where(mask, sigmoid(theta[:d]), theta[:d])
    loss, _ = _loss_and_grad(theta, x, y, mask, offset)
    return LinearFit(weights=w, bias=float(theta[d]), constrained=mask, final_loss=loss)
