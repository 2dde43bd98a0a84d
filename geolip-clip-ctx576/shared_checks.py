# Generated from shared_modeling/checks.py by `make vendor`. Do not edit: edit the source and regenerate.
"""Checks where texts, tokenizers and weights enter a model of the bundle, so that bad input fails loudly with a
message naming the problem instead of producing embeddings of garbage."""

import hashlib
import json
import unicodedata
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers.dynamic_module_utils import get_relative_imports


def check_texts(texts):
    """(list of str, single): a str is one text; otherwise a list or tuple of str. TypeError names a wrong item;
    ValueError a text that cannot be encoded as UTF-8 (a lone surrogate) or that has no content: empty, or only
    whitespace, zero-width (format) and control characters, which a tokenizer reduces to nothing."""
    single = isinstance(texts, str)
    if not single and not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a str or a list of str, got {type(texts).__name__}")
    texts = [texts] if single else list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}: {text!r:.60}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"texts[{i}] is not valid Unicode text ({error.reason} at character {error.start}): "
                             f"{text!r:.60}") from None
        if all(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in text):
            raise ValueError(f"texts[{i}] has no content ({text!r:.40}): empty, blank, zero-width or control-only "
                             "text has nothing to embed")
    return texts, single


def check_has_tokens(texts, token_ids, special_tokens=0):
    """Refuse a text its tokenizer reduces to nothing but the `special_tokens` it adds around every text: combining
    marks alone, U+FFFD, variation selectors and private-use characters pass check_texts but give no token, and
    would all embed as one shared vector."""
    empty = [i for i, ids in enumerate(token_ids) if len(ids) <= special_tokens]
    if empty:
        raise ValueError(f"texts[{empty[0]}] has no tokens ({texts[empty[0]]!r:.40}): the tokenizer drops every "
                         "character of it, so there is nothing to embed")


def check_batch_size(batch_size):
    """A positive int (bool is not one), or a TypeError / ValueError."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}: {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def vocabulary_sha256(tokenizer):
    """sha256 of a tokenizer's vocabulary: every (token, id) pair, added tokens included, in id order."""
    pairs = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


def check_tokenizer(tokenizer, vocab_size, source, vocabulary=None):
    """Refuse a tokenizer whose vocabulary is not the model's: a folder missing tokenizer.json loads a tokenizer of
    a few special tokens that maps every word to [UNK]; a tokenizer of the right size can still give other ids to
    its tokens (another model's, or an edited tokenizer.json), which `vocabulary` (the config's vocabulary_sha256,
    when it has one) catches."""
    if len(tokenizer) != vocab_size:
        raise ValueError(f"the tokenizer of {source or 'this model'} has {len(tokenizer):,} tokens, the model's "
                         f"vocabulary {vocab_size:,}: tokenizer.json is missing or belongs to another model")
    if vocabulary is not None and vocabulary_sha256(tokenizer) != vocabulary:
        raise ValueError(f"the tokenizer of {source or 'this model'} maps tokens to other ids than the model was "
                         f"trained with (its vocabulary's sha256 is not config.vocabulary_sha256 {vocabulary[:12]}): "
                         "tokenizer.json was edited or belongs to another model")
    return tokenizer


def checked_from_pretrained(load, *args, **kwargs):
    """A model class's from_pretrained: `load` (its super().from_pretrained) with the bundle's checks. It refuses a
    checkpoint whose tensors are not exactly the model's (a config.json edited to more or fewer layers loads
    otherwise, with random layers added or trained ones dropped), weights with NaN or infinite values, and names the
    folder of a weights file it cannot read.
    output_loading_info=True returns (model, loading info), as transformers does."""
    wants_info = kwargs.pop("output_loading_info", False)
    try:
        model, info = load(*args, output_loading_info=True, **kwargs)
    except SafetensorError as error:  # its message names no file
        where = args[0] if args else kwargs.get("pretrained_model_name_or_path", "the model")
        raise ValueError(f"{where}: its weights file (model.safetensors) cannot be read, it is corrupted or "
                         f"truncated ({error}); download or export it again") from error
    source = model.name_or_path or "the model"
    problems = {key: sorted(map(str, info[key]))[:4] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")
                if info.get(key)}
    if problems:
        raise ValueError(f"{source}: the checkpoint's tensors are not the ones its config.json builds ({problems}): "
                         "config.json and model.safetensors do not belong together")
    check_finite(model.state_dict(), f"{source}'s weights")
    return (model, info) if wants_info else model


class RemoteCodeFilesCheck:
    """A mixin of the bundle's configs: loaded from a local folder, the config refuses a folder that lacks a file of
    its remote code (a module config.json's auto_map names, or one that such a module imports relatively), before
    transformers' own error, which points at a Hub address made from the local path."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        config = loaded[0] if isinstance(loaded, tuple) else loaded  # (config, unused kwargs) when asked for
        if Path(pretrained_model_name_or_path).is_dir():
            check_remote_code_files(Path(pretrained_model_name_or_path), getattr(config, "auto_map", None) or {})
        return loaded


def check_remote_code_files(folder, auto_map):
    """Refuse a folder missing a module of its remote code: those auto_map names ("module.Class"; a reference to
    another repository's code, "repo--module.Class", is not the folder's) and, recursively, their relative
    imports."""
    needed = [(reference.split(".")[0], "config.json's auto_map names it") for reference in auto_map.values()
              if isinstance(reference, str) and "--" not in reference]
    seen = set()
    while needed:
        module, why = needed.pop()
        if module in seen:
            continue
        seen.add(module)
        path = folder / f"{module}.py"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} has no {path.name}, a file of the model's remote code ({why}): copy "
                                    "or download the whole model folder")
        needed += [(imported, f"{path.name} imports it") for imported in sorted(get_relative_imports(path))]


def check_finite(tensors, source):
    """Refuse NaN or infinite values in {name: tensor}: such weights load silently and make every embedding NaN."""
    bad = [name for name, tensor in tensors.items() if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
    if bad:
        raise ValueError(f"{source}: non-finite values (NaN or inf) in {len(bad)} tensors, first {bad[0]!r}")


def check_finite_embeddings(embeddings, dtype):
    """RuntimeError naming the first non-finite row of (N, E): with finite weights, the computation overflowed."""
    not_finite = (~torch.isfinite(embeddings).all(dim=1)).nonzero()
    if len(not_finite):
        raise RuntimeError(f"the embeddings of {len(not_finite)} texts are not finite (first: texts"
                           f"[{int(not_finite[0])}]); the weights are, so the computation overflowed (dtype {dtype})")
