"""geolip-clip-ctx576: a frozen short-window text encoder (CLIP-L's text tower in the published model) extended to
long texts by a trained geometric memory.

The model starts from what the base itself gives: its embedding of the text's own window (the first base_window
tokens, special tokens included: CLIP's 77), one batched base call over the texts. The memory then reads the WHOLE
text: its content tokens are cut into overlapping segments (18 tokens every 14, at most 32: shared_segments.py), and
every segment of every text runs through the frozen base in ONE more batched call. Per segment:
  layer fusion      a learned softmax-weighted sum of the base's last 6 hidden states -> fused token states;
  depth compressor  the segment's 6-layer profile (its masked mean in each of those layers) -> one anchor;
and the memory (`GeometricMemory`, 64 slots) runs over the segments in order, its state passed explicitly from
segment to segment: the slots read the segment's fused tokens (cross-attention), then every anchor so far (2
cross-attention layers: the bank), and a GRU gate decides how much of each slot to update. Finally the readout: the
window embedding attends to the final memory (memory -> base cross-attention; with readout_anchors, to the text's
segments as well: all, or those past the window, each by its anchor or, with readout_source "base", by its own base
embedding), and what that adds goes through a zero-initialised projection: embedding = start + residual, where the
start is the window embedding (the published model) or, with blend_weight w, the blend w * window + (1 - w) * the
mean of the segments' own base embeddings (both L2-normalised), which the readout's query is too. So the output
stays in the base's embedding space, and an untrained memory returns exactly its start; training can only add to it.
The teacher projector (hidden -> 1,024) is used in training only. Legend: B texts, S segments of the batch, T
tokens per segment (segment_size + 2), W the window (base_window), L fused layers, D hidden, M memory slots.
"""

import warnings
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_geolip import GeolipConfig
from .shared_checks import check_has_tokens, check_texts, checked_from_pretrained
from .shared_encoding import TextEncoderMixin
from .shared_identity import embedding_space, trunk_hash
from .shared_pooling import l2_normalize, masked_mean_pool
from .shared_segments import covered_tokens, segment_batch, window_batch


@dataclass
class GeolipOutput(BaseModelOutputWithPooling):
    """last_hidden_state (B, 1, D) the embedding as one token, pooler_output (B, D) the same L2-normalised, and
    segment_anchors (S, D) every segment's depth-compressor anchor, texts after one another (training's CV term)."""

    segment_anchors: torch.Tensor | None = None


class CrossAttentionBlock(nn.Module):
    """Pre-LayerNorm cross-attention then feed-forward, both residual: queries (B, Q, D) read keys (B, K, D), of
    which key_mask (B, K) marks the real ones (every row needs one)."""

    def __init__(self, hidden_size, heads, eps):
        super().__init__()
        self.query_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.key_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.attention = nn.MultiheadAttention(hidden_size, heads, batch_first=True)
        self.feed_forward_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.feed_forward = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.GELU(),
                                          nn.Linear(4 * hidden_size, hidden_size))

    def forward(self, queries, keys, key_mask):
        keys = self.key_norm(keys)
        attended, _ = self.attention(self.query_norm(queries), keys, keys, key_padding_mask=~key_mask,
                                     need_weights=False)
        queries = queries + attended
        return queries + self.feed_forward(self.feed_forward_norm(queries))


class LayerFusion(nn.Module):
    """softmax(w) weighted sum over the L hidden layers: (..., L, D) -> (..., D); starts as their plain mean."""

    def __init__(self, layers):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(layers))

    def forward(self, layers):
        return torch.einsum("...ld,l->...d", layers, self.logits.softmax(dim=0))


class DepthCompressor(nn.Module):
    """A segment's depth profile (S, L, D), its masked mean in each layer, -> one anchor (S, D)."""

    def __init__(self, layers, hidden_size, eps):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(layers * hidden_size, hidden_size), nn.GELU(),
                                 nn.Linear(hidden_size, hidden_size), nn.LayerNorm(hidden_size, eps=eps))

    def forward(self, profile):
        return self.net(profile.flatten(1))


class GeometricMemory(nn.Module):
    """The memory: a learned bank of M slots, updated once per segment by `step`. The state is an explicit tensor
    (B, M, D) that the caller passes from segment to segment; the module itself keeps none."""

    def __init__(self, slots, hidden_size, heads, layers, eps):
        super().__init__()
        self.bank = nn.Parameter(torch.randn(slots, hidden_size) * 0.02)
        self.read_segment = CrossAttentionBlock(hidden_size, heads, eps)
        self.read_anchors = nn.ModuleList(CrossAttentionBlock(hidden_size, heads, eps) for _ in range(layers))
        self.gate = nn.GRUCell(hidden_size, hidden_size)

    def initial_state(self, batch_size):
        """The state before any segment: the bank, for each of batch_size texts (B, M, D)."""
        return self.bank.unsqueeze(0).expand(batch_size, -1, -1)

    def step(self, state, tokens, token_mask, anchors, anchor_mask):
        """The state (B, M, D) after one more segment: its fused tokens (B, T, D) with token_mask (B, T), and the
        anchors of every segment so far, this one included (B, A, D) with anchor_mask (B, A)."""
        candidate = self.read_segment(state, tokens, token_mask)
        for layer in self.read_anchors:
            candidate = layer(candidate, anchors, anchor_mask)
        batch, slots, hidden = state.shape
        return self.gate(candidate.reshape(-1, hidden), state.reshape(-1, hidden)).view(batch, slots, hidden)


class GeolipPreTrainedModel(PreTrainedModel):
    config_class = GeolipConfig
    base_model_prefix = "geolip"
    main_input_name = "texts"

    def _init_weights(self, module):
        """transformers' default initialisation, except the readout's residual projection: zero, so that an untrained
        memory adds nothing to the window embedding. Loaded weights are never re-initialised (from_pretrained)."""
        if module is getattr(self, "residual_projection", None):
            init.zeros_(module.weight)
        else:
            super()._init_weights(module)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' from_pretrained, refusing a checkpoint that is not the config's model and weights with NaN
        or infinite values (shared_checks.checked_from_pretrained)."""
        return checked_from_pretrained(super().from_pretrained, *args, **kwargs)


class GeolipModel(TextEncoderMixin, GeolipPreTrainedModel):
    """The frozen base plus the geometric memory. `forward(texts)` and `encode(texts)` (shared_encoding.py) take
    strings."""

    def __init__(self, config: GeolipConfig):
        super().__init__(config)
        base = config.base
        hidden = base.hidden_size
        self.base = AutoModel.from_config(base)  # frozen: it runs without autograd (`segments`)
        self.fusion = LayerFusion(config.fusion_layers)
        self.compressor = DepthCompressor(config.fusion_layers, hidden, config.layer_norm_eps)
        self.memory = GeometricMemory(config.memory_slots, hidden, config.memory_heads, config.memory_layers,
                                      config.layer_norm_eps)
        self.readout = CrossAttentionBlock(hidden, config.memory_heads, config.layer_norm_eps)
        self.residual_projection = nn.Linear(hidden, hidden, bias=False)  # what the readout adds; zero at init
        self.projector = nn.Linear(hidden, config.teacher_dim, bias=False)  # student -> teacher space (training)
        self.post_init()

    def train(self, mode=True):
        """As nn.Module.train, but the frozen base always stays in eval mode (no dropout)."""
        super().train(mode)
        self.base.eval()
        return self

    def trainable_parameters(self):
        """Every parameter outside the frozen base (the memory system and the projector)."""
        return [p for name, p in self.named_parameters() if not name.startswith("base.")]

    # ---- the forward pass -------------------------------------------------------------------------------------

    def forward(self, texts):
        """texts: a list of B >= 1 non-empty strings -> GeolipOutput (last_hidden_state (B, 1, D), pooler_output
        (B, D) L2-normalised, segment_anchors (S, D))."""
        texts, _ = check_texts(texts)
        if not texts:
            raise ValueError("forward needs at least one text (encode([]) returns an empty array)")
        return self.embed(self.content_ids(texts))

    def embed(self, content_ids):
        """The content token ids of B texts -> GeolipOutput: the window and the segments through the base (one
        batched call each), then the memory and the readout."""
        return self.embed_segments(self.window_embedding(content_ids), *self.segments(content_ids))

    def pool(self, last, attention_mask):
        """The base's own embedding of each row from its last hidden states (N, T, D) -> (N, D), by base_pooling."""
        if self.config.base_pooling == "eos":
            return last[torch.arange(last.shape[0], device=last.device), attention_mask.sum(dim=1) - 1]
        return masked_mean_pool(last, attention_mask)

    def window_embedding(self, content_ids, window=None):
        """The frozen base's own embedding of each text's first `window` tokens, its two special tokens included
        (default: base_window), in ONE batched call -> (B, D)."""
        window = self.config.base_window if window is None else window
        input_ids, attention_mask = window_batch(content_ids, window, *self._special_ids())
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)  # (B, W)
        with torch.no_grad():  # the base is frozen
            last = self.base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, W, D)
        return self.pool(last, attention_mask)

    def segments(self, content_ids):
        """Every segment of every text through the frozen base in ONE batched call. Returns (layers (S, T, L, D),
        token_mask (S, T), own (S, D) each segment's own base embedding (the tools' baselines), counts: segments
        per text)."""
        config = self.config
        input_ids, attention_mask, _, counts = segment_batch(
            content_ids, config.segment_size, config.segment_stride, config.max_segments,
            *self._special_ids())
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        with torch.no_grad():  # the base is frozen: nothing upstream of its outputs trains
            output = self.base(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        layers = torch.stack(output.hidden_states[-config.fusion_layers:], dim=2)  # (S, T, L, D)
        # CLIP applies its final LayerNorm to last_hidden_state, not to hidden_states[-1]
        return layers, attention_mask.bool(), self.pool(output.last_hidden_state, attention_mask), counts

    def start(self, window, own, counts):
        """Where each text's embedding starts (B, D), before the memory adds to it: its window embedding, or with
        blend_weight w the blend of the window embedding and the mean of its segments' own embeddings (`own`, S
        rows, `counts` per text), both L2-normalised."""
        if self.config.blend_weight is None:
            return window
        weight = self.config.blend_weight
        means = torch.stack([chunk.mean(dim=0) for chunk in own.split(list(counts))])  # (B, D)
        return weight * l2_normalize(window) + (1 - weight) * l2_normalize(means.to(window.dtype))

    def embed_segments(self, window, layers, token_mask, own, counts):
        """The memory run over the segments of each text (the output of `segments`), then the readout from where the
        texts start (`start`: their window embeddings (B, D), or the blend)."""
        fused = self.fusion(layers)  # (S, T, D)
        profile = torch.stack([masked_mean_pool(layers[:, :, i], token_mask) for i in range(layers.shape[2])], 1)
        anchors = self.compressor(profile)  # (S, D)
        counts = torch.tensor(counts, device=fused.device)
        first = torch.cumsum(counts, 0) - counts  # row of each text's first segment
        by_text = torch.zeros(len(counts), int(counts.max()), anchors.shape[1], dtype=anchors.dtype,
                              device=anchors.device)
        positions = torch.arange(by_text.shape[1], device=anchors.device)
        valid = positions < counts[:, None]  # (B, n) which segment slots exist
        by_text = by_text.index_put((valid.nonzero(as_tuple=True)), anchors)  # (B, n, D) anchors per text, in order
        state = self.memory.initial_state(len(counts))
        for t in range(by_text.shape[1]):
            active = (counts > t).nonzero().squeeze(1)  # texts that have a segment t
            rows = first[active] + t
            updated = self.memory.step(state[active], fused[rows], token_mask[rows], by_text[active, :t + 1],
                                       valid[active, :t + 1])
            state = state.index_put((active,), updated)
        query = self.start(window, own, counts).unsqueeze(1)  # (B, 1, D): the start reads the final memory
        keys, key_mask = state, torch.ones(state.shape[:2], dtype=torch.bool, device=state.device)
        if self.config.readout_anchors != "none":  # and segments of its text: their anchors or own embeddings
            segment_keys = by_text
            if self.config.readout_source == "base":
                segment_keys = torch.zeros_like(by_text).index_put(valid.nonzero(as_tuple=True), own.to(by_text.dtype))
            reads = valid
            if self.config.readout_anchors == "past_window":  # only segments with tokens the window did not read
                lengths = torch.zeros(valid.shape, dtype=torch.long, device=valid.device)
                lengths = lengths.index_put(valid.nonzero(as_tuple=True), token_mask.sum(1) - 2)  # content tokens
                reads = valid & (positions * self.config.segment_stride + lengths > self.config.base_window - 2)
            keys, key_mask = torch.cat([keys, segment_keys], 1), torch.cat([key_mask, reads], 1)  # (B, M + n, D)
        read = self.readout(query, keys, key_mask)
        embedding = query + self.residual_projection(read - query)  # (B, 1, D); exactly the start at init
        return GeolipOutput(last_hidden_state=embedding, pooler_output=l2_normalize(embedding[:, 0]),
                            segment_anchors=anchors)

    # ---- tokens, and what encode and tokenizer (shared_encoding.py) need ----------------------------------------

    encode_batch_size = 32

    @property
    def tokenizer_vocab_size(self):
        return self.config.base.vocab_size

    @property
    def embedding_dim(self):
        return self.config.base.hidden_size

    def _special_ids(self):
        """(opening, closing, padding) token ids: what the tokenizer puts around an empty text, and its pad."""
        opening, closing = self.tokenizer("")["input_ids"]
        pad = self.tokenizer.pad_token_id
        return opening, closing, closing if pad is None else pad

    def content_ids(self, texts):
        """Token ids of each text without special tokens; texts longer than the segments cover keep their first
        covered_tokens (452 by default; one warning per call). A text with no tokens is a ValueError."""
        ids = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
        check_has_tokens(texts, ids)
        limit = covered_tokens(self.config.segment_size, self.config.segment_stride, self.config.max_segments)
        too_long = [i for i, row in enumerate(ids) if len(row) > limit]
        if too_long:
            warnings.warn(f"{len(too_long)} of {len(ids)} texts exceed the {limit} tokens the segments cover and were "
                          f"truncated (first: texts[{too_long[0]}], {len(ids[too_long[0]])} tokens)", stacklevel=3)
        return [row[:limit] for row in ids]

    encode_ids = content_ids  # encode tokenises as forward does

    def embed_ids(self, rows):
        """The embeddings (b, D) of b texts' content token ids."""
        return self.embed(rows).pooler_output

    @property
    def embedding_space(self):
        """The short id of the space this model embeds into (shared_identity.py): a hash of all its weights and of the
        config fields that run them (an edit that keeps every shape, another window or segment size, is another
        space). Store it with an index built from these embeddings, and query that index only with a model reporting
        the same id."""
        return embedding_space(trunk_hash(self), config=self.config)


__all__ = ["GeolipModel", "GeolipOutput", "GeolipPreTrainedModel"]
