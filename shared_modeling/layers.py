"""BERT-style post-LayerNorm transformer encoder layers, shared by the bundle's models.

Embeddings (token + learned absolute position -> LayerNorm -> dropout), multi-head self-attention through one
dispatch point (`attention`: torch SDPA with the padding mask, or an eager reference), a GELU feed-forward network,
and the block / stack built from them. Adapted from BERT (Devlin et al. 2019) with a fused QKV projection.
Legend: B batch, T tokens, D hidden, H heads, Dh = D / H.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


def attention(query, key, value, key_padding_mask, implementation, dropout_p=0.0):
    """The single attention dispatch point.

    query, key, value: (B, H, T, Dh). key_padding_mask: (B, T) bool with True on real tokens, or None when no row
    is padded (which lets SDPA pick its fastest kernel). Returns (B, H, T, Dh).
    """
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]  # (B, 1, 1, T)
    if implementation == "sdpa":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)
    if implementation == "eager":
        scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])  # (B, H, T, T)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = F.dropout(scores.softmax(dim=-1), p=dropout_p)
        return probs @ value
    raise ValueError(f"attention implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got {implementation!r}")


class Embeddings(nn.Module):
    """Token + learned absolute position embeddings -> LayerNorm -> dropout."""

    def __init__(self, vocab_size, max_positions, hidden_size, pad_token_id, layer_norm_eps, dropout):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_positions, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids):  # (B, T) -> (B, T, D)
        seq_len = input_ids.shape[1]
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence of {seq_len} tokens exceeds the {self.position_embeddings.num_embeddings} learned positions"
            )
        positions = torch.arange(seq_len, device=input_ids.device)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        return self.dropout(self.norm(hidden))


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection."""

    def __init__(self, hidden_size, num_heads, dropout):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.dropout_p = dropout

    def forward(self, hidden, key_padding_mask, implementation):  # (B, T, D) -> (B, T, D)
        batch, seq_len, width = hidden.shape
        qkv = self.qkv(hidden).view(batch, seq_len, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
        dropout_p = self.dropout_p if self.training else 0.0
        context = attention(query, key, value, key_padding_mask, implementation, dropout_p)  # (B, H, T, Dh)
        return self.out(context.transpose(1, 2).reshape(batch, seq_len, width))


class FeedForward(nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size)
        self.down = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden):  # (B, T, D) -> (B, T, D)
        return self.down(F.gelu(self.up(hidden)))


class EncoderLayer(nn.Module):
    """Post-LayerNorm block: x = LN(x + attn(x)); x = LN(x + ffn(x))."""

    def __init__(self, hidden_size, num_heads, intermediate_size, layer_norm_eps, dropout):
        super().__init__()
        self.attention = SelfAttention(hidden_size, num_heads, dropout)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.feed_forward = FeedForward(hidden_size, intermediate_size)
        self.feed_forward_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden, key_padding_mask, implementation):  # (B, T, D) -> (B, T, D)
        hidden = self.attention_norm(hidden + self.dropout(self.attention(hidden, key_padding_mask, implementation)))
        return self.feed_forward_norm(hidden + self.dropout(self.feed_forward(hidden)))


class Encoder(nn.Module):
    """A stack of EncoderLayers. `layers` is a plain ModuleList so adapters can wrap it."""

    def __init__(self, num_layers, hidden_size, num_heads, intermediate_size, layer_norm_eps, dropout):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(hidden_size, num_heads, intermediate_size, layer_norm_eps, dropout) for _ in range(num_layers)
        )

    def forward(self, hidden, key_padding_mask, implementation):  # (B, T, D) -> (B, T, D)
        for layer in self.layers:
            hidden = layer(hidden, key_padding_mask, implementation)
        return hidden
