"""Configuration of geolip-clip-ctx576: a frozen short-window text encoder extended to long texts by a trained
geometric memory."""

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from .shared_checks import RemoteCodeFilesCheck
from .shared_segments import covered_tokens

# The text tower of CLIP-ViT-L/14 (123M parameters, 768-d, 77 positions): the published base.
CLIP_L_TEXT = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
               "projection_dim": 768, "max_position_embeddings": 77}


@strict
class GeolipConfig(RemoteCodeFilesCheck, PreTrainedConfig):
    """Hyper-parameters of GeolipModel. The defaults are the published model (CLIP-L base, a 77-token window,
    18/14/32 segments).

    base_model_type / base_config: the frozen base, built as AutoConfig.for_model(base_model_type, **base_config)
        ("clip_text_model" with CLIP-L's text shape by default; any encoder AutoModel builds, e.g. "bert").
    base_pooling: a segment's own embedding from the base's last hidden states: "eos" (the state at the closing
        special token, as CLIP pools) or "mean" (masked mean, as sentence-transformers encoders pool).
    base_window: the tokens the base reads of a text at once, its two special tokens included (CLIP's context
        length: 77). The base's embedding of this window is where the model starts: the memory only adds to it.
        At least 3 (one content token) and at most the base's max_position_embeddings; a config saved without it
        (before it existed) gets 77.
    fusion_layers: how many of the base's last hidden states (the output included) the layer fusion and the depth
        compressor read.
    segment_size / segment_stride / max_segments: content tokens per segment, the step between segment starts, and
        the most segments of a text (together they cover segment_size + (max_segments - 1) * segment_stride tokens).
    memory_slots / memory_layers / memory_heads: the memory bank's anchors, its cross-attention layers over the
        segment anchors, and the attention heads of every cross-attention.
    readout_anchors: which segment anchors of the text the readout reads beside the final memory slots: "none" (the
        published readout; a config saved before the field existed), "all", or "past_window" (the segments that
        reach past the base's window: what the window embedding has not read).
    readout_source: what stands for each of those segments among the readout's keys: "anchors" (its depth-compressor
        anchor, trained) or "base" (its own base embedding, the pooled output of the frozen base on the segment: in
        the window embedding's own space from the first step). Unused when readout_anchors is "none".
    blend_weight: where the model starts: None (the published model; a config saved before the field existed) starts
        from the base's embedding of the window; a weight w in [0, 1] starts from the blend w * window + (1 - w) *
        segment mean of the two L2-normalised (the mean of the segments' own base embeddings: the same segments the
        memory reads), the best such blend the training tool fitted, so an untrained memory already reads the tail.
    teacher_dim: width of the teacher the projector maps into (training only; ModernBERT-large: 1,024).
    layer_norm_eps: epsilon of the memory system's LayerNorms.
    vocabulary_sha256: the sha256 of the base tokenizer's vocabulary (shared_checks.vocabulary_sha256), written by
        the training tool: the first `encode` refuses a tokenizer that maps tokens to other ids. None: not checked.
    """

    model_type = "geolip"

    base_model_type: str = "clip_text_model"
    base_config: dict | None = None
    base_pooling: str = "eos"
    base_window: int = 77
    fusion_layers: int = 6
    segment_size: int = 18
    segment_stride: int = 14
    max_segments: int = 32
    memory_slots: int = 64
    memory_layers: int = 2
    memory_heads: int = 8
    readout_anchors: str = "none"
    readout_source: str = "anchors"
    blend_weight: float | None = None
    teacher_dim: int = 1024
    layer_norm_eps: float = 1e-5
    vocabulary_sha256: str | None = None

    def __post_init__(self, **kwargs):
        if self.base_config is None:
            self.base_config = dict(CLIP_L_TEXT) if self.base_model_type == "clip_text_model" else {}
        super().__post_init__(**kwargs)

    @property
    def base(self):
        """The frozen base's own configuration object."""
        return AutoConfig.for_model(self.base_model_type, **self.base_config)

    def validate_architecture(self):
        """Part of `@strict` validation: reject shapes the model cannot be built with."""
        for name in ("fusion_layers", "segment_size", "segment_stride", "max_segments", "memory_slots",
                     "memory_layers", "memory_heads", "teacher_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.segment_stride > self.segment_size:
            raise ValueError(f"segment_stride ({self.segment_stride}) above segment_size ({self.segment_size}) "
                             f"would skip tokens")
        if self.readout_anchors not in ("none", "all", "past_window"):
            raise ValueError(f"readout_anchors must be 'none', 'all' or 'past_window', got {self.readout_anchors!r}")
        if self.readout_source not in ("anchors", "base"):
            raise ValueError(f"readout_source must be 'anchors' or 'base', got {self.readout_source!r}")
        if self.blend_weight is not None and not 0 <= self.blend_weight <= 1:
            raise ValueError(f"blend_weight must be None or in [0, 1], got {self.blend_weight}")
        if self.base_pooling not in ("eos", "mean"):
            raise ValueError(f"base_pooling must be 'eos' or 'mean', got {self.base_pooling!r}")
        base = self.base
        if self.fusion_layers > base.num_hidden_layers + 1:
            raise ValueError(f"fusion_layers ({self.fusion_layers}) exceeds the base's {base.num_hidden_layers} "
                             f"layers + embeddings")
        if not 3 <= self.base_window <= base.max_position_embeddings:
            raise ValueError(f"base_window ({self.base_window}) must be at least 3 (two special tokens and one of "
                             f"content) and at most the base's {base.max_position_embeddings} positions")
        covered = covered_tokens(self.segment_size, self.segment_stride, self.max_segments)
        if covered <= self.base_window - 2:
            raise ValueError(f"the segments cover {covered} content tokens, no more than the base_window's "
                             f"{self.base_window - 2}: the memory would read nothing past the window")
        if self.segment_size + 2 > base.max_position_embeddings:
            raise ValueError(f"a segment of {self.segment_size} tokens plus its two special tokens does not fit the "
                             f"base's {base.max_position_embeddings} positions")
        if base.hidden_size % self.memory_heads:
            raise ValueError(f"the base's hidden_size ({base.hidden_size}) must be a multiple of memory_heads "
                             f"({self.memory_heads})")


__all__ = ["GeolipConfig"]
