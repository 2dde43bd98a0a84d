"""Pure loss functions of embeddings, reused by the training tools and their tests. Legend: B batch, D width."""

import torch
import torch.nn.functional as F

from .geometry import orthogonal_procrustes, pentachoron_cv


def symmetric_info_nce(queries, keys, temperature):
    """CLIP-style InfoNCE over in-batch negatives, averaged over both directions.

    queries, keys: (B, D), row i of each is a positive pair; rows are L2-normalised here, so the logits are
    cosines / temperature. Returns a scalar.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logits = F.normalize(queries, dim=-1) @ F.normalize(keys, dim=-1).T / temperature  # (B, B)
    targets = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2


def per_sample_mse(predictions, targets):
    """Mean squared error of each row: (B, D), (B, D) -> (B,). Callers reduce (mean, mask, weight) themselves."""
    return ((predictions - targets) ** 2).mean(dim=-1)


def consensus_distillation(student, consensus, temperature, mse_weight):
    """The captionbert objective: symmetric InfoNCE of student vs consensus rows (in-batch negatives) plus
    mse_weight x per-sample MSE. student, consensus: (B, E). Returns {"loss", "info_nce", "mse", "cosine"} where
    "cosine" (mean row cosine, no gradient) is for logging."""
    info_nce = symmetric_info_nce(student, consensus, temperature)
    mse = per_sample_mse(student, consensus).mean()
    cosine = F.cosine_similarity(student.detach(), consensus, dim=-1).mean()
    return {"loss": info_nce + mse_weight * mse, "info_nce": info_nce, "mse": mse, "cosine": cosine}


def info_nce_with_hard_negatives(anchors, positives, negatives, temperature):
    """One-direction InfoNCE: anchor i against every positive of the batch and, when given, every hard negative
    (supervised SimCSE). anchors, positives: (B, D); negatives: (B, D) or None. Returns a scalar."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    candidates = positives if negatives is None else torch.cat([positives, negatives])  # (B or 2B, D)
    logits = F.normalize(anchors, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature  # (B, B or 2B)
    return F.cross_entropy(logits, torch.arange(anchors.shape[0], device=anchors.device))


def cosent(cosines, scores, scale=20.0):
    """CoSENT: log(1 + sum over pairs (i, j) with scores[i] > scores[j] of exp(scale (cos_j - cos_i))), so every
    pair's cosine is ranked by its gold score. cosines, scores: (B,). Returns a scalar (0 when all scores tie)."""
    differences = scale * (cosines[None, :] - cosines[:, None])  # (B, B): entry (i, j) = scale (cos_j - cos_i)
    ordered = scores[:, None] > scores[None, :]  # (B, B): i should rank above j
    differences = differences[ordered]
    zero = torch.zeros(1, dtype=cosines.dtype, device=cosines.device)
    return torch.logsumexp(torch.cat([zero, differences]), dim=0)


def procrustes_residual(student, teacher):
    """The SVD-Procrustes regulariser: with rows L2-normalised, the mean squared distance from each teacher row to
    its student row after the best semi-orthogonal map R of the whole batch, min_R ||S R - T||^2 / B. Zero when the
    batch's student geometry is an isometric copy of the teacher's (R needs student width <= teacher width to be
    an isometry). R is taken without gradient: at the minimum, the loss's gradient through R vanishes."""
    student, teacher = F.normalize(student, dim=-1), F.normalize(teacher, dim=-1)
    with torch.no_grad():
        rotation = orthogonal_procrustes(student, teacher)
    return ((student @ rotation - teacher) ** 2).sum(dim=-1).mean()


def pentachoron_cv_loss(point_sets, target, samples, generator=None):
    """(pentachoron CV - target)^2 averaged over point sets (each (n_i, D), n_i >= 5, e.g. one text's segment
    anchors), each CV over `samples` random 5-point subsets."""
    if not point_sets:
        raise ValueError("no point set with at least 5 points")
    return torch.stack([(pentachoron_cv(points, samples, generator) - target) ** 2 for points in point_sets]).mean()
