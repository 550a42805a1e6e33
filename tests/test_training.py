"""The one training loop (blackbox_audit.training): batching and shuffling, one clipped step per
batch, the token-weighted epoch loss, and right padding."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from blackbox_audit.training import causal_labels, pad_right, predicted_tokens, train_epochs  # noqa: E402


def test_epochs_visit_a_seeded_permutation_in_batches_and_weight_the_loss_by_tokens() -> None:
    w = torch.nn.Parameter(torch.tensor(1.0))
    opt = torch.optim.SGD([w], lr=0.0)  # no movement: the losses are the batch means below
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    seen: list[list[int]] = []
    epochs_done: list[int] = []

    def batch_loss(idx: list[int]):
        seen.append(idx)
        return w * float(sum(idx)), len(idx) * 2  # mean loss, positions it averages over

    losses = train_epochs(
        batch_loss,
        7,
        epochs=2,
        batch_size=3,
        rng=np.random.default_rng(4),
        optimizer=opt,
        scheduler=sched,
        params=[w],
        desc="test",
        progress=False,
        on_epoch=epochs_done.append,
    )
    rng = np.random.default_rng(4)
    expected = [[int(i) for i in rng.permutation(7)] for _ in range(2)]
    assert seen == [e[s : s + 3] for e in expected for s in (0, 3, 6)]  # the last batch is partial
    per_epoch = [sum(sum(b) * len(b) * 2 for b in seen[k : k + 3]) / (7 * 2) for k in (0, 3)]
    assert losses == pytest.approx(per_epoch) and epochs_done == [1, 2]
    assert sched.last_epoch == 6  # one scheduler step per batch


def test_right_padding_masks_and_labels() -> None:
    ids, mask = pad_right([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    labels = causal_labels(ids, mask)
    assert labels.tolist() == [[5, 6, 7], [8, -100, -100]]
    assert predicted_tokens(labels) == 2  # the first position of a row is never predicted
