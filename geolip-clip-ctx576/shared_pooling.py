# Generated from shared_modeling/pooling.py by `make vendor`. Do not edit: edit the source and regenerate.
"""Sentence pooling: masked mean over real tokens, and L2 normalisation. Legend: B batch, T tokens, D width."""

import torch.nn.functional as F


def masked_mean_pool(token_states, attention_mask):
    """Mean of token_states (B, T, D) over positions where attention_mask (B, T) is nonzero -> (B, D).

    A row with no real token pools to zeros rather than NaN.
    """
    weights = attention_mask.to(token_states.dtype).unsqueeze(-1)  # (B, T, 1)
    summed = (token_states * weights).sum(dim=1)  # (B, D)
    counts = weights.sum(dim=1).clamp(min=1.0)  # (B, 1)
    return summed / counts


def l2_normalize(embeddings, eps=1e-12):
    """Scale each row of (N, D) to unit Euclidean norm (rows of zeros stay zero)."""
    return F.normalize(embeddings, p=2.0, dim=-1, eps=eps)
