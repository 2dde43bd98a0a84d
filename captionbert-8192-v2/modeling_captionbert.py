"""captionbert-8192-v2: a 58.3M-parameter BERT-style sentence encoder with 8,192 learned positions.

Token + position embeddings -> 12 post-LayerNorm transformer layers (hidden 512, 8 heads, FFN 2,048; attention
through one SDPA/eager dispatch point) -> masked mean pool -> head (Linear -> GELU -> LayerNorm -> Linear to 768)
-> L2 normalisation. The trunk's weights are distilled from the consensus of several BERT-family teachers
(tools/ in the source repository). The layers come from the bundle's shared_modeling package, vendored here as
flat `shared_*.py` files. Legend: B batch, T tokens, D hidden (512), E embedding width (768).
"""

import contextlib
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils import can_return_tuple

from .configuration_captionbert import CaptionBertConfig
from .shared_checks import (check_batch_size, check_finite, check_finite_embeddings, check_texts,
                            check_tokenizer)
from .shared_identity import embedding_space, trunk_hash
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
        """transformers' from_pretrained, refusing weights with NaN or infinite values."""
        model = super().from_pretrained(*args, **kwargs)
        check_finite(model.state_dict(), f"{model.name_or_path or 'the model'}'s weights")
        return model


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
        self._amoe = None  # the attached arms' state (attach_amoe), None for the bare trunk
        self.post_init()

    @can_return_tuple  # takes transformers' `return_dict` keyword, which sentence-transformers passes
    def forward(self, input_ids, attention_mask=None):
        """input_ids, attention_mask: (B, T). Returns BaseModelOutputWithPooling with
        last_hidden_state = token states (B, T, D), zeros at padded positions, and pooler_output = the
        L2-normalised embedding (B, E); with return_dict=False, the tuple (last_hidden_state, pooler_output)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        limit = self.config.trained_length
        if limit is not None and input_ids.shape[1] > limit:
            warnings.warn(
                f"inputs of {input_ids.shape[1]} tokens were cut to the {limit} positions training reached "
                f"(config.trained_length); later positions hold untrained vectors",
                stacklevel=2,
            )
            input_ids, attention_mask = input_ids[:, :limit], attention_mask[:, :limit]
        hidden = self.embeddings(input_ids)  # (B, T, D)
        with self._amoe["switch"].pinned() if self._amoe else contextlib.nullcontext():  # one roster per forward
            hidden = self.encoder(hidden, attention_mask, self.config._attn_implementation)  # (B, T, D), 0 at padding
        embedding = l2_normalize(self.head(masked_mean_pool(hidden, attention_mask)))  # (B, E)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=embedding)

    # ---- user API -------------------------------------------------------------------------------------------------

    @property
    def tokenizer(self):
        """The WordPiece tokenizer shipped beside the weights, loaded on first use; its vocabulary must be the
        model's (config.vocab_size)."""
        if self._tokenizer is None:
            if not self.name_or_path:
                raise ValueError(
                    "this model was not loaded from a folder or repo, so it has no tokenizer; "
                    "set model.tokenizer = AutoTokenizer.from_pretrained(<captionbert folder>)"
                )
            # trust_remote_code: AutoTokenizer reads config.json first, which names this remote code.
            self.tokenizer = AutoTokenizer.from_pretrained(self.name_or_path, trust_remote_code=True)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer):
        self._tokenizer = check_tokenizer(tokenizer, self.config.vocab_size, self.name_or_path)

    def encode(self, texts, batch_size=64, device=None, show_progress_bar=None, convert_to_numpy=True):
        """Embed a str -> (E,) or a list of str -> (N, E); rows are L2-normalised.

        Texts are sorted by length so each batch carries little padding, and returned in the input order.
        Inputs longer than `usable_length` tokens keep their first tokens and the closing [SEP] (one warning per call).
        A text with no content (empty, blank, zero-width or control characters only) is a ValueError, and
        non-finite embeddings a RuntimeError.
        device: where to run (the model is moved there); None keeps the model's device.
        show_progress_bar: None shows one when there is more than one batch and stderr is a terminal.
        convert_to_numpy: float32 numpy array if True, else a torch tensor on the model's device.
        """
        texts, single = check_texts(texts)
        check_batch_size(batch_size)
        if device is not None:
            self.to(device)

        token_ids = self._tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(token_ids[i]))  # longest first
        starts = range(0, len(order), batch_size)
        if show_progress_bar is None:
            show_progress_bar = len(starts) > 1 and sys.stderr.isatty()
        embeddings = torch.empty(len(texts), self.config.output_dim, device=self.device)

        was_training = self.training
        if was_training:  # in eval mode (from_pretrained's) nothing is switched, so threads may share the model
            self.eval()
        try:
            with torch.inference_mode():
                for start in tqdm(starts, desc="encode", disable=not show_progress_bar):
                    rows = order[start:start + batch_size]
                    batch = self.tokenizer.pad({"input_ids": [token_ids[i] for i in rows]}, return_tensors="pt")
                    output = self(batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device))
                    embeddings[rows] = output.pooler_output.float()
        finally:
            if was_training:
                self.train()
        check_finite_embeddings(embeddings, self.dtype)
        if single:
            embeddings = embeddings[0]
        return embeddings.cpu().numpy() if convert_to_numpy else embeddings

    @property
    def usable_length(self):
        """The longest input the model reads: the positions training reached (config.trained_length), else all."""
        return self.config.trained_length or self.config.max_position_embeddings

    def _tokenize(self, texts):
        """WordPiece ids with [CLS]/[SEP]; over-long inputs keep their first tokens and the closing [SEP]."""
        limit = self.usable_length
        token_ids = self.tokenizer(texts, truncation=False, verbose=False)["input_ids"] if texts else []
        too_long = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
        if too_long:
            warnings.warn(
                f"{len(too_long)} of {len(texts)} texts exceed the model's {limit} usable positions and were "
                f"truncated "
                f"(first: texts[{too_long[0]}], {len(token_ids[too_long[0]])} tokens)",
                stacklevel=3,
            )
            for i in too_long:
                token_ids[i] = token_ids[i][:limit - 1] + token_ids[i][-1:]
        return token_ids

    @property
    def embedding_space(self):
        """The short id of the space this model embeds into (shared_identity.py): a hash of the trunk's weights and,
        with arms enabled, of those arms and the dispatch. Store it with an index built from these embeddings, and
        query that index only with a model reporting the same id."""
        state = self._amoe
        if state is None:
            return embedding_space(trunk_hash(self))
        enabled = {name: trunk_hash(state["arms"][name]) for name in state["switch"].current()}  # none: bare trunk
        return embedding_space(state["trunk_hash"], {**enabled, "dispatch": trunk_hash(state["dispatch"])} if enabled
                               else None)

    # ---- AMOE arms (shared_amoe.py; imported only when one of these is called) ------------------------------------

    def attach_amoe(self, names=None, path=None, force=False):
        """Attach the shipped AMOE collective: its arms after every block, mixed by its dispatch.

        path: an amoe/ folder; None = amoe/ in this model's own folder or Hub repo. It must hold exactly one
        collective (<path>/<collective>/dispatch.safetensors) and the arms under <path>/arms/. names: None takes the
        roster and its order from the dispatch; a list must name the same arms in the same order. force: attach arms
        trained on another trunk. Checks the toggle law (every arm off == the bare trunk) and raises on mismatch.
        """
        from .shared_amoe import ArmSwitch, load_arm, load_dispatch, unwrap_layers, wrap_layers

        if self._amoe is not None:
            raise RuntimeError("arms are attached already; detach_amoe() first")
        folder = self._amoe_folder(path)
        dispatches = sorted(p for p in folder.glob("*/dispatch.safetensors") if p.parent.name != "arms")
        if len(dispatches) != 1:
            raise FileNotFoundError(f"{folder} must hold exactly one <collective>/dispatch.safetensors, found "
                                    f"{[str(p.relative_to(folder)) for p in dispatches]}")
        fingerprint, identity = self._amoe_fingerprint(), trunk_hash(self)
        hidden, blocks = self.config.hidden_size, self.config.num_hidden_layers
        dispatch, _ = load_dispatch(dispatches[0], hidden, blocks, identity, force)
        if names is not None and list(names) != dispatch.roster:
            raise ValueError(f"arms {list(names)} do not match the dispatch's roster {dispatch.roster}: routing keys "
                             "are positional, so the names and their order must be the roster's")
        arms = {name: load_arm(folder / "arms" / f"{name}.safetensors", hidden, blocks, identity, force, name)[0]
                for name in dispatch.roster}
        for module in (*arms.values(), dispatch):  # files hold float32; run in the trunk's dtype and device
            module.to(device=self.device, dtype=self.dtype)
        switch = ArmSwitch(dispatch.roster)
        wrap_layers(self.encoder.layers, arms, dispatch, switch)
        self._amoe = {"arms": arms, "dispatch": dispatch, "switch": switch, "fingerprint": fingerprint,
                      "trunk_hash": identity}
        with self.amoe_off():
            if not torch.equal(self._amoe_fingerprint(), fingerprint):
                unwrap_layers(self.encoder.layers)
                self._amoe = None
                raise RuntimeError("toggle law violated: with every arm off the model differs from the bare trunk")
        return self

    @contextlib.contextmanager
    def amoe_off(self):
        """Every arm off inside the block (the bare trunk, bit for bit), for the calling thread only; other threads
        keep the roster set_amoe chose."""
        with self._amoe_state()["switch"].pinned(()):
            yield self

    def set_amoe(self, names):
        """Enable exactly these arms of the roster (a list or any iterable of names; [] = none), for every thread;
        a forward already running keeps the roster it started with. The weights keep their roster-wide normaliser."""
        self._amoe_state()["switch"].set(names)

    def detach_amoe(self):
        """Remove the arms, put the original layer objects back, check the bare trunk; returns {"arms", "dispatch"}."""
        from .shared_amoe import unwrap_layers

        state = self._amoe_state()
        unwrap_layers(self.encoder.layers)
        self._amoe = None
        if not torch.equal(self._amoe_fingerprint(), state["fingerprint"]):
            raise RuntimeError("toggle law violated: after detaching, the model differs from the bare trunk")
        return {"arms": state["arms"], "dispatch": state["dispatch"]}

    def save_pretrained(self, *args, **kwargs):
        """transformers' save_pretrained, refused while arms are attached (their wrapped keys are not the trunk's;
        arms are saved as files under amoe/ by the tools)."""
        if self._amoe is not None:
            raise RuntimeError("detach_amoe() before save_pretrained: the trunk is saved without its arms")
        return super().save_pretrained(*args, **kwargs)

    def _amoe_state(self):
        if self._amoe is None:
            raise RuntimeError("no arms attached; call attach_amoe() first")
        return self._amoe

    def _amoe_folder(self, path):
        if path is not None:
            folder = Path(path)
        elif Path(self.name_or_path).is_dir():
            folder = Path(self.name_or_path) / "amoe"
        elif self.name_or_path:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(self.name_or_path, allow_patterns=["amoe/*", "amoe/*/*"])) / "amoe"
        else:
            raise ValueError("this model has no folder or repo to find amoe/ in; pass path=")
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} not found: this model folder ships no AMOE arms")
        return folder

    def _amoe_fingerprint(self):
        """Sentence embeddings of a fixed probe batch (seeded ids, one padded row) in eval mode, fp32."""
        generator = torch.Generator().manual_seed(0)
        input_ids = torch.randint(1000, self.config.vocab_size, (2, 16), generator=generator).to(self.device)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, 9:] = 0
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return self(input_ids, attention_mask).pooler_output.float().cpu()
        finally:
            self.train(was_training)


__all__ = ["CaptionBertModel", "CaptionBertPreTrainedModel"]
