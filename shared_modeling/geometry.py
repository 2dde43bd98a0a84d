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


def cayley_menger_volume(points):
    """Volume of the 4-simplex (pentachoron) spanned by 5 points, batched: points (..., 5, D) -> (...).

    From the points' pairwise squared distances alone: vol^2 = -det(CM) / 9216, where CM is the 6 x 6 Cayley-Menger
    matrix [[0, 1^T], [1, D2]] (D2 the 5 x 5 squared distances; 9216 = 2^4 (4!)^2). A degenerate simplex has volume
    0 (a slightly negative vol^2 from rounding is clamped to 0)."""
    if points.shape[-2] != 5:
        raise ValueError(f"a pentachoron has 5 vertices, got {points.shape[-2]} points")
    gram = points @ points.transpose(-1, -2)
    norms = gram.diagonal(dim1=-2, dim2=-1)
    squared = norms.unsqueeze(-1) + norms.unsqueeze(-2) - 2 * gram  # (..., 5, 5)
    cayley_menger = squared.new_ones(*squared.shape[:-2], 6, 6)
    cayley_menger[..., 0, 0] = 0
    cayley_menger[..., 1:, 1:] = squared
    return (-torch.linalg.det(cayley_menger) / 9216).clamp(min=0).sqrt()


def pentachoron_cv(points, samples, generator=None):
    """Coefficient of variation std / mean of the volumes of `samples` random 5-point subsets of points (N, D),
    N >= 5 (each subset drawn without repetition): how evenly a cloud fills space at the scale of 4-simplices."""
    count = points.shape[0]
    if count < 5:
        raise ValueError(f"pentachoron CV needs at least 5 points, got {count}")
    subsets = torch.rand(samples, count, generator=generator, device=points.device).argsort(dim=1)[:, :5]
    volumes = cayley_menger_volume(points[subsets])  # (samples,)
    return volumes.std() / volumes.mean()


def orthogonal_procrustes(source, target):
    """The semi-orthogonal R (D1, D2) minimising ||source R - target||_F for rows source (N, D1), target (N, D2):
    R = U V^T from the SVD of source^T target (R R^T = I when D1 <= D2)."""
    u, _, vh = torch.linalg.svd(source.T @ target, full_matrices=False)
    return u @ vh
