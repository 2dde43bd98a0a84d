"""Configuration of captionbert-8192-v2: a 12-layer, 512-wide BERT-style sentence encoder with 8,192 positions."""

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .shared_checks import RemoteCodeFilesCheck


@strict
class CaptionBertConfig(RemoteCodeFilesCheck, PreTrainedConfig):
    """Hyper-parameters of CaptionBertModel. The defaults are the published 58.3M-parameter model.

    vocab_size: WordPiece vocabulary (bert-base-uncased, 30,522).
    hidden_size / num_hidden_layers / num_attention_heads / intermediate_size: the transformer trunk.
    max_position_embeddings: learned absolute positions.
    trained_length: how many of those positions training reached (written by the training tool); `encode` and
        `forward` cap inputs there with a warning, since later positions hold untrained vectors. None: all of them.
    output_dim: width of the L2-normalised sentence embedding produced by the head.
    hidden_dropout_prob: dropout on embeddings, residual branches and attention probabilities (training only).
    layer_norm_eps: epsilon of every LayerNorm.
    initializer_range: std of the normal initialisation of Linear and Embedding weights.
    vocabulary_sha256: the sha256 of the tokenizer's vocabulary (shared_checks.vocabulary_sha256): the first
        `encode` refuses a tokenizer that maps tokens to other ids. None: not checked.
    """

    model_type = "captionbert"

    vocab_size: int = 30522
    hidden_size: int = 512
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    max_position_embeddings: int = 8192
    trained_length: int | None = None
    output_dim: int = 768
    hidden_dropout_prob: float | int = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int | None = 0
    vocabulary_sha256: str | None = None

    def validate_architecture(self):
        """Part of `@strict` validation: reject shapes the model cannot be built with."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "output_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.trained_length is not None and not 0 < self.trained_length <= self.max_position_embeddings:
            raise ValueError(f"trained_length must be in [1, max_position_embeddings = {self.max_position_embeddings}],"
                             f" got {self.trained_length}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if not 0.0 <= self.hidden_dropout_prob < 1.0:
            raise ValueError(f"hidden_dropout_prob must be in [0, 1), got {self.hidden_dropout_prob}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id must index the vocabulary (size {self.vocab_size}), "
                             f"got {self.pad_token_id}")


__all__ = ["CaptionBertConfig"]
