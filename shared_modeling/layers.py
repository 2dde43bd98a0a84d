"""BERT-style post-LayerNorm transformer encoder layers, shared by the bundle's models.

Embeddings (token + learned absolute position -> LayerNorm -> dropout), multi-head self-attention through one
dispatch point (`attention`: torch SDPA with the padding mask, or an eager reference), a GELU feed-forward network,
and the block / stack built from them. Adapted from BERT (Devlin et al. 2019) with a fused QKV projection and
ModernBERT's unpadding: between attention calls the hidden states of a padded batch are kept packed as (N, D), the
real tokens only, so projections, FFN and LayerNorms do no work on padding (`TokenLayout`).
Legend: B batch, T tokens, N real (non-pad) tokens in the batch, D hidden, H heads, Dh = D / H.
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


class TokenLayout:
    """Where the real tokens of a padded (B, T) batch sit once packed into (N, ...) rows.

    Built once per forward from the attention mask (nonzero = real token, any padding side). Without padding,
    packing is a reshape and `key_padding_mask` is None, which lets SDPA use its fused kernel. While torch.export
    traces (the ONNX export), that test on the mask's values would fix one branch into the graph, so the traced
    graph always packs through the mask: the same maths for a batch with no padding.
    """

    def __init__(self, attention_mask):  # (B, T)
        self.batch, self.seq_len = attention_mask.shape
        if not torch.compiler.is_exporting() and bool(attention_mask.all()):
            self.key_padding_mask, self.indices = None, None
        else:
            self.key_padding_mask = attention_mask.bool()  # (B, T)
            self.indices = self.key_padding_mask.flatten().nonzero().squeeze(1)  # (N,) positions in B * T

    def pack(self, padded):  # (B, T, ...) -> (N, ...)
        flat = padded.flatten(0, 1)
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def unpack(self, packed):  # (N, ...) -> (B, T, ...), zeros at padded positions
        if self.indices is not None:
            # In place into a fresh grid: no clone, and autograd still routes gradients to `packed`.
            packed = packed.new_zeros(self.batch * self.seq_len, *packed.shape[1:]).index_copy_(0, self.indices, packed)
        return packed.view(self.batch, self.seq_len, *packed.shape[1:])


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

    def forward(self, hidden, layout, implementation):  # (N, D) packed -> (N, D)
        width = hidden.shape[-1]
        qkv = layout.unpack(self.qkv(hidden))  # (B, T, 3D)
        qkv = qkv.view(layout.batch, layout.seq_len, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
        dropout_p = self.dropout_p if self.training else 0.0
        context = attention(query, key, value, layout.key_padding_mask, implementation, dropout_p)  # (B, H, T, Dh)
        context = context.transpose(1, 2).reshape(layout.batch, layout.seq_len, width)  # (B, T, D)
        return self.out(layout.pack(context))  # (N, D)


class FeedForward(nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size)
        self.down = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden):  # (N, D) -> (N, D)
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

    def forward(self, hidden, layout, implementation):  # (N, D) packed -> (N, D)
        hidden = self.attention_norm(hidden + self.dropout(self.attention(hidden, layout, implementation)))
        return self.feed_forward_norm(hidden + self.dropout(self.feed_forward(hidden)))


class Encoder(nn.Module):
    """A stack of EncoderLayers run on packed real tokens. `layers` is a plain ModuleList so adapters can wrap it;
    each layer is called as layer(hidden (N, D), layout, implementation)."""

    def __init__(self, num_layers, hidden_size, num_heads, intermediate_size, layer_norm_eps, dropout):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(hidden_size, num_heads, intermediate_size, layer_norm_eps, dropout) for _ in range(num_layers)
        )

    def forward(self, hidden, attention_mask, implementation):  # (B, T, D), (B, T) -> (B, T, D), zeros at padding
        layout = TokenLayout(attention_mask)
        hidden = layout.pack(hidden)  # (N, D)
        for layer in self.layers:
            hidden = layer(hidden, layout, implementation)
        return layout.unpack(hidden)
