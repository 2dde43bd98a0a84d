"""captionbert-8192-v2: a 58.3M-parameter BERT-style sentence encoder with 8,192 learned positions.

Token + position embeddings -> 12 post-LayerNorm transformer layers (hidden 512, 8 heads, FFN 2,048; attention
through one SDPA/eager dispatch point) -> masked mean pool -> head (Linear -> GELU -> LayerNorm -> Linear to 768)
-> L2 normalisation. The trunk's weights are distilled from the consensus of several BERT-family teachers
(tools/ in the source repository). The layers come from the bundle's shared_modeling package, vendored here as
flat `shared_*.py` files. Legend: B batch, T tokens, D hidden (512), E embedding width (768).
"""

import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_captionbert import CaptionBertConfig
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


class CaptionBertModel(CaptionBertPreTrainedModel):
    """The encoder. `forward` returns token states and the normalised sentence embedding; `encode` takes text."""

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
        self._tokenizer = None
        self.post_init()

    def forward(self, input_ids, attention_mask=None):
        """input_ids, attention_mask: (B, T). Returns BaseModelOutputWithPooling with
        last_hidden_state = token states (B, T, D), zeros at padded positions, and pooler_output = the
        L2-normalised embedding (B, E)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings(input_ids)  # (B, T, D)
        hidden = self.encoder(hidden, attention_mask, self.config._attn_implementation)  # (B, T, D), 0 at padding
        embedding = l2_normalize(self.head(masked_mean_pool(hidden, attention_mask)))  # (B, E)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=embedding)

    # ---- user API -------------------------------------------------------------------------------------------------

    @property
    def tokenizer(self):
        """The WordPiece tokenizer shipped beside the weights, loaded on first use."""
        if self._tokenizer is None:
            if not self.name_or_path:
                raise ValueError(
                    "this model was not loaded from a folder or repo, so it has no tokenizer; "
                    "set model.tokenizer = AutoTokenizer.from_pretrained(<captionbert folder>)"
                )
            # trust_remote_code: AutoTokenizer reads config.json first, which names this remote code.
            self._tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, trust_remote_code=True)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer):
        self._tokenizer = tokenizer

    def encode(self, texts, batch_size=64, device=None, show_progress_bar=None, convert_to_numpy=True):
        """Embed a str -> (E,) or a list of str -> (N, E); rows are L2-normalised.

        Texts are sorted by length so each batch carries little padding, and returned in the input order.
        Inputs longer than `config.max_position_embeddings` tokens are truncated (one warning per call).
        device: where to run (the model is moved there); None keeps the model's device.
        show_progress_bar: None shows one when there is more than one batch and stderr is a terminal.
        convert_to_numpy: float32 numpy array if True, else a torch tensor on the model's device.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else _check_texts(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device is not None:
            self.to(device)

        token_ids = self._tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(token_ids[i]))  # longest first
        starts = range(0, len(order), batch_size)
        if show_progress_bar is None:
            show_progress_bar = len(starts) > 1 and sys.stderr.isatty()
        embeddings = torch.empty(len(texts), self.config.output_dim, device=self.device)

        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                for start in tqdm(starts, desc="encode", disable=not show_progress_bar):
                    rows = order[start:start + batch_size]
                    batch = self.tokenizer.pad({"input_ids": [token_ids[i] for i in rows]}, return_tensors="pt")
                    output = self(batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device))
                    embeddings[rows] = output.pooler_output.float()
        finally:
            self.train(was_training)

        if single:
            embeddings = embeddings[0]
        return embeddings.cpu().numpy() if convert_to_numpy else embeddings

    def _tokenize(self, texts):
        """WordPiece ids with [CLS]/[SEP]; over-long inputs keep their first tokens and the closing [SEP]."""
        limit = self.config.max_position_embeddings
        token_ids = self.tokenizer(texts, truncation=False, verbose=False)["input_ids"] if texts else []
        too_long = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
        if too_long:
            warnings.warn(
                f"{len(too_long)} of {len(texts)} texts exceed {limit} tokens and were truncated "
                f"(first: texts[{too_long[0]}], {len(token_ids[too_long[0]])} tokens)",
                stacklevel=3,
            )
            for i in too_long:
                token_ids[i] = token_ids[i][:limit - 1] + token_ids[i][-1:]
        return token_ids


def _check_texts(texts):
    """A list of str, or a TypeError that names the offending item."""
    if texts is None or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a str or a list of str, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}: {text!r:.60}")
    return list(texts)


__all__ = ["CaptionBertModel", "CaptionBertPreTrainedModel"]
