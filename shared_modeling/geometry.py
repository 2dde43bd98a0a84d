"""Geometry gauges of an embedding matrix (N, D): isotropy (`self_cos`) and effective rank (`erank`)."""

import torch

from .pooling import l2_normalize


def self_cos(embeddings):
    """Mean cosine between distinct rows: 0 for an isotropic cloud, 1 when every row points the same way."""
    rows = l2_normalize(embeddings.double())
    count = rows.shape[0]
    if count < 2:
        raise ValueError(f"self_cos needs at least 2 rows, got {count}")
    column_sum = rows.sum(dim=0)  # (D,)
    off_diagonal = column_sum @ column_sum - (rows * rows).sum()
    return (off_diagonal / (count * (count - 1))).item()


def erank(embeddings):
    """Participation ratio (sum s^2)^2 / sum s^4 of the singular values of the centred matrix.

    Between 1 (one direction carries all variance) and min(N - 1, D) (variance spread evenly).
    """
    centred = embeddings.double() - embeddings.double().mean(dim=0, keepdim=True)
    power = torch.linalg.svdvals(centred) ** 2  # s^2
    return (power.sum() ** 2 / (power**2).sum()).item()
