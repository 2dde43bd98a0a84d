# Generated from shared_modeling/encoding.py by `make vendor`. Do not edit: edit the source and regenerate.
"""`tokenizer` and `encode`, the text side every remote-code model of the bundle shares.

A model mixes `TextEncoderMixin` in before its PreTrainedModel class and provides:
  tokenizer_vocab_size   the vocabulary size its tokenizer must have (a property; config.vocabulary_sha256, where
                         the config has one, names the vocabulary itself);
  embedding_dim          the width E of its embeddings (a property);
  encode_ids(texts)      per text its token ids, the model's own tokenisation and truncation (with its warnings);
  embed_ids(rows)        the embeddings (b, E) of b rows of such ids, in one forward pass;
and the class attribute `encode_batch_size`, encode's default rows per forward pass. A model whose forward reads state
another thread may change (captionbert's AMOE roster) overrides `encode_pinned()` to pin it for a whole encode call.
"""

import contextlib
import sys

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from .shared_checks import check_batch_size, check_finite_embeddings, check_texts, check_tokenizer
from .shared_pooling import l2_normalize


def truncate_keeping_last(ids, limit):
    """`ids` cut to `limit` tokens, its last one kept (the closing [SEP] or </s>), as sentence-transformers truncates;
    a list no longer than `limit` unchanged."""
    return ids if len(ids) <= limit else ids[:limit - 1] + ids[-1:]


class TextEncoderMixin:
    _tokenizer = None
    encode_batch_size = 32

    @property
    def tokenizer(self):
        """The tokenizer shipped beside the weights, loaded on first use; its vocabulary must be the model's."""
        if self._tokenizer is None:
            if not self.name_or_path:
                raise ValueError("this model was not loaded from a folder or repo, so it has no tokenizer; "
                                 "set model.tokenizer = AutoTokenizer.from_pretrained(<its folder>)")
            # trust_remote_code: AutoTokenizer reads config.json first, which names this remote code.
            self.tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, trust_remote_code=True)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer):
        self._tokenizer = check_tokenizer(tokenizer, self.tokenizer_vocab_size, self.name_or_path,
                                          getattr(self.config, "vocabulary_sha256", None))

    def encode(self, texts, batch_size=None, device=None, show_progress_bar=None, convert_to_numpy=True):
        """Embed a str -> (E,) or a list of str -> (N, E); rows are L2-normalised, and an empty list gives (0, E).

        Texts run longest first, so each batch carries little padding, and come back in the input order. Inputs
        longer than the model reads are truncated (one warning per call). A text with no content (empty, blank,
        zero-width or control characters only) is a ValueError, and non-finite embeddings a RuntimeError.
        batch_size: rows per forward pass; None is the model's encode_batch_size.
        device: where to run (the model is moved there; not "meta"); None keeps the model's device. Rows are unit
        length in float32 whatever the model's dtype.
        show_progress_bar: None shows one when there is more than one batch and stderr is a terminal.
        convert_to_numpy: a float32 numpy array if True, else a torch tensor on the model's device.
        """
        texts, single = check_texts(texts)
        batch_size = self.encode_batch_size if batch_size is None else batch_size
        check_batch_size(batch_size)
        if device is not None:
            if torch.device(device).type == "meta":
                raise ValueError("device='meta' holds no data: encode cannot run there, and moving the model there "
                                 "would drop its weights for good")
            self.to(device)

        token_ids = self.encode_ids(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(token_ids[i]))  # longest first
        starts = range(0, len(order), batch_size)
        if show_progress_bar is None:
            show_progress_bar = len(starts) > 1 and sys.stderr.isatty()
        embeddings = torch.empty(len(texts), self.embedding_dim, device=self.device)
        was_training = self.training
        if was_training:  # in eval mode (from_pretrained's) nothing is switched, so threads may share the model
            self.eval()
        try:
            with torch.inference_mode(), self.encode_pinned():
                for start in tqdm(starts, desc="encode", disable=not show_progress_bar):
                    rows = order[start:start + batch_size]
                    embeddings[rows] = self.embed_ids([token_ids[i] for i in rows]).float()  # (b, E)
        finally:
            if was_training:
                self.train()
        check_finite_embeddings(embeddings, self.dtype)
        if self.dtype != torch.float32:  # normalised in half precision, rows are unit length to ~1e-4 only
            embeddings = l2_normalize(embeddings)
        if single:
            embeddings = embeddings[0]
        return embeddings.cpu().numpy() if convert_to_numpy else embeddings

    def encode_pinned(self):
        """The context one encode call runs inside, every batch of it: none here (see the module docstring)."""
        return contextlib.nullcontext()
