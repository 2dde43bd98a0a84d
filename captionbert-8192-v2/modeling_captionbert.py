"""captionbert-8192-v2: a 58.3M-parameter BERT-style sentence encoder with 8,192 learned positions.

Token + position embeddings -> 12 post-LayerNorm transformer layers (hidden 512, 8 heads, FFN 2,048; attention
through one SDPA/eager dispatch point) -> masked mean pool -> head (Linear -> GELU -> LayerNorm -> Linear to 768)
-> L2 normalisation. The trunk's weights are distilled from the consensus of several BERT-family teachers
(tools/ in the source repository). The layers come from the bundle's shared_modeling package, vendored here as
flat `shared_*.py` files. Legend: B batch, T tokens, D hidden (512), E embedding width (768).
"""

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils import can_return_tuple

from .configuration_captionbert import CaptionBertConfig
from .shared_amoe_mixin import AmoeMixin
from .shared_checks import check_has_tokens, checked_from_pretrained
from .shared_encoding import TextEncoderMixin, truncate_keeping_last
from .shared_layers import Embeddings, Encoder
from .shared_pooling import l2_normalize, masked_mean_pool


class SentenceHead(nn.Module):
    """Pooled token state (B, D) -> Linear -> GELU -> LayerNorm -> Linear -> (B, E), not yet normalised."""

    def __init__(self, hidden_size, output_dim, layer_norm_eps):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.projection = nn.Linear(hidden_size, output_dim)

    def forward(self, pooled):
        return self.projection(self.norm(F.gelu(self.dense(pooled))))


class CaptionBertPreTrainedModel(PreTrainedModel):
    config_class = CaptionBertConfig
    base_model_prefix = "captionbert"
    main_input_name = "input_ids"
    _supports_sdpa = True  # the shared attention dispatch implements "sdpa" and "eager"

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' from_pretrained, refusing a checkpoint that is not the config's model and weights with NaN
        or infinite values (shared_checks.checked_from_pretrained)."""
        return checked_from_pretrained(super().from_pretrained, *args, **kwargs)


class CaptionBertModel(TextEncoderMixin, AmoeMixin, CaptionBertPreTrainedModel):
    """The encoder. `forward` returns token states and the normalised sentence embedding; `encode` takes text
    (shared_encoding.py); attach_amoe / amoe_off / set_amoe / detach_amoe put AMOE arms on it (shared_amoe_mixin.py)."""

    def __init__(self, config: CaptionBertConfig):
        super().__init__(config)
        self.embeddings = Embeddings(
            config.vocab_size, config.max_position_embeddings, config.hidden_size, config.pad_token_id,
            config.layer_norm_eps, config.hidden_dropout_prob,
        )
        self.encoder = Encoder(
            config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size,
            config.layer_norm_eps, config.hidden_dropout_prob,
        )
        self.head = SentenceHead(config.hidden_size, config.output_dim, config.layer_norm_eps)
        self.post_init()

    @can_return_tuple  # takes transformers' `return_dict` keyword, which sentence-transformers passes
    def forward(self, input_ids, attention_mask=None):
        """input_ids, attention_mask: (B, T). Returns BaseModelOutputWithPooling with
        last_hidden_state = token states (B, T, D), zeros at padded positions, and pooler_output = the
        L2-normalised embedding (B, E); with return_dict=False, the tuple (last_hidden_state, pooler_output).
        Rows padded on the right (the tokenizer's padding); past config.trained_length a row is cut as encode cuts
        it."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        limit = self.config.trained_length
        if limit is not None and input_ids.shape[1] > limit:
            warnings.warn(
                f"inputs of {input_ids.shape[1]} tokens were cut to the {limit} positions training reached "
                f"(config.trained_length); later positions hold untrained vectors",
                stacklevel=2,
            )
            # As encode does: a longer row keeps its first limit - 1 tokens and its last one (the closing [SEP]).
            lengths = attention_mask.sum(dim=1)
            closing = input_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
            input_ids, attention_mask = input_ids[:, :limit].clone(), attention_mask[:, :limit]
            cut = lengths > limit
            input_ids[cut, limit - 1] = closing[cut]
        hidden = self.embeddings(input_ids)  # (B, T, D)
        with self.amoe_roster_pinned():  # one roster per forward pass
            hidden = self.encoder(hidden, attention_mask, self.config._attn_implementation)  # (B, T, D), 0 at padding
        embedding = l2_normalize(self.head(masked_mean_pool(hidden, attention_mask)))  # (B, E)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=embedding)

    # ---- what encode and tokenizer (shared_encoding.py) need -----------------------------------------------------

    encode_batch_size = 64

    @property
    def tokenizer_vocab_size(self):
        return self.config.vocab_size

    @property
    def embedding_dim(self):
        return self.config.output_dim

    @property
    def usable_length(self):
        """The longest input the model reads: the positions training reached (config.trained_length), else all."""
        return self.config.trained_length or self.config.max_position_embeddings

    def encode_ids(self, texts):
        """WordPiece ids with [CLS]/[SEP]; inputs over usable_length keep their first tokens and the closing [SEP]."""
        limit = self.usable_length
        token_ids = self.tokenizer(texts, truncation=False, verbose=False)["input_ids"] if texts else []
        check_has_tokens(texts, token_ids, special_tokens=2)  # [CLS] and [SEP] alone: nothing of the text
        too_long = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
        if too_long:
            warnings.warn(
                f"{len(too_long)} of {len(texts)} texts exceed the model's {limit} usable positions and were "
                f"truncated "
                f"(first: texts[{too_long[0]}], {len(token_ids[too_long[0]])} tokens)",
                stacklevel=3,
            )
            for i in too_long:
                token_ids[i] = truncate_keeping_last(token_ids[i], limit)
        return token_ids

    def embed_ids(self, rows):
        """The sentence embeddings (b, E) of b rows of token ids, padded into one batch."""
        batch = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt")
        return self(batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)).pooler_output

    def encode_pinned(self):
        """One AMOE roster for every batch of an encode call, whatever set_amoe does meanwhile in another thread."""
        return self.amoe_roster_pinned()


__all__ = ["CaptionBertModel", "CaptionBertPreTrainedModel"]
