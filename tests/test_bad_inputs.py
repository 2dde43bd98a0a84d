"""Bad inputs and bad files for the bundle's models with remote code, table-driven: each must fail with the stated
error type and a message that names the problem, never embed garbage silently. (glyph-embedder-v2 has no code of its
own: its GGUF export's checks are in glyph/test_gguf.py.)"""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from helpers import CAPTIONBERT, TINY_CAPTIONBERT, build_from_folder, captionbert_copy
from tools import registry
from test_geolip import geolip_folder

BAD_TEXTS = [  # (id, texts, error type, message pattern)
    ("none", None, TypeError, "texts must be a str or a list of str, got NoneType"),
    ("dict", {"a": "dog"}, TypeError, "got dict"),
    ("generator", (text for text in ["a dog"]), TypeError, "got generator"),
    ("numpy array", np.array(["a dog"]), TypeError, "got ndarray"),
    ("a number in the list", ["a dog", 3], TypeError, r"texts\[1\] must be a str, got int"),
    ("lone surrogate", ["a dog", "a \ud800 cat"], ValueError, r"texts\[1\] is not valid Unicode"),
    ("empty text", ["a dog", ""], ValueError, r"texts\[1\] has no content"),
    ("blank text", ["   "], ValueError, r"texts\[0\] has no content"),
    ("zero-width text", ["\u200b\u200b"], ValueError, r"texts\[0\] has no content"),
    ("control characters only", ["\x00\x07"], ValueError, r"texts\[0\] has no content"),
]
DROPPED_BY_WORDPIECE = [  # characters a WordPiece tokenizer drops: without a check the text embeds as [CLS][SEP] alone
    ("combining accent alone", ["a dog", "\u0301"], 1), ("replacement character", ["\ufffd"], 0),
    ("variation selector", ["\ufe0f"], 0), ("private-use characters", ["\ue000\ue001"], 0)]
BAD_BATCH_SIZES = [("8", TypeError, "batch_size must be an int, got str"),
                   (2.5, TypeError, "batch_size must be an int, got float"),
                   (True, TypeError, "batch_size must be an int, got bool"),
                   (0, ValueError, "batch_size must be >= 1")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory, data_dir):
    """{model: a saved tiny folder with its real remote code and a real-vocabulary tokenizer}."""
    from tools import corpus

    root = tmp_path_factory.mktemp("bad-inputs")
    captionbert = captionbert_copy(root / "captionbert", **TINY_CAPTIONBERT)
    build_from_folder(captionbert).save_pretrained(captionbert)
    geolip = geolip_folder(root / "geolip", corpus.build(data_dir, ["flickr8k-train"])[0][:500])
    return {"captionbert": captionbert, "geolip": geolip}


@pytest.fixture(scope="module", params=["captionbert", "geolip"])
def model(request, folders):
    return AutoModel.from_pretrained(folders[request.param], trust_remote_code=True).eval()


@pytest.mark.parametrize("texts, error, message", [row[1:] for row in BAD_TEXTS], ids=[row[0] for row in BAD_TEXTS])
def test_encode_refuses_bad_texts(model, texts, error, message):
    with pytest.raises(error, match=message):
        model.encode(texts)


@pytest.fixture(scope="module", params=["captionbert", "geolip"])
def wordpiece_model(request, folders):
    """captionbert's tiny folder (the real vocabulary), and the shipped geolip folder: its tiny folder's byte-level
    BPE gives every character a token, the shipped one reads all-MiniLM-L6-v2's WordPiece."""
    folder = folders["captionbert"] if request.param == "captionbert" else registry.GEOLIP.path
    return AutoModel.from_pretrained(folder, trust_remote_code=True).eval()


@pytest.mark.parametrize("texts, index", [row[1:] for row in DROPPED_BY_WORDPIECE],
                         ids=[row[0] for row in DROPPED_BY_WORDPIECE])
def test_encode_refuses_a_text_its_tokenizer_reduces_to_nothing(wordpiece_model, texts, index):
    with pytest.raises(ValueError, match=rf"texts\[{index}\] has no tokens"):
        wordpiece_model.encode(texts)


def test_emoji_only_texts_are_embedded_as_the_unknown_token(wordpiece_model):
    """Not refused: the tokenizer makes each emoji [UNK], so two emoji-only texts embed alike (the cards say so)."""
    first, second = wordpiece_model.encode(["😀", "🎉"])
    assert np.linalg.norm(first) == pytest.approx(1, abs=1e-5) and np.allclose(first, second, atol=1e-5)


@pytest.mark.parametrize("batch_size, error, message", BAD_BATCH_SIZES, ids=lambda value: repr(value)[:20])
def test_encode_refuses_bad_batch_sizes(model, batch_size, error, message):
    with pytest.raises(error, match=message):
        model.encode(["a dog"], batch_size=batch_size)


def test_encode_refuses_the_meta_device_and_leaves_the_model_where_it_was(model):
    with pytest.raises(ValueError, match="device='meta' holds no data"):
        model.encode(["a dog"], device="meta")
    assert model.device.type == "cpu" and np.isfinite(model.encode(["a dog"])).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_encode_in_half_precision_gives_unit_rows(folders, dtype):
    """Normalised in half precision, rows were unit length to ~1e-3 only (cosine 1.00005 to float32)."""
    for folder in folders.values():
        model = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=dtype).eval()
        norms = np.linalg.norm(model.encode(["a dog runs on the grass", "two men play chess"]), axis=1)
        np.testing.assert_allclose(norms, 1, atol=1e-6)


def test_encode_batch_size_none_is_the_models_default(model):
    texts = ["a dog", "two men play chess in a park", "a red car"]
    assert np.array_equal(model.encode(texts), model.encode(texts, batch_size=model.encode_batch_size))
    assert model.encode_batch_size == {"CaptionBertModel": 64, "GeolipModel": 32}[type(model).__name__]


def test_geolip_forward_refuses_an_empty_batch(folders):
    model = AutoModel.from_pretrained(folders["geolip"], trust_remote_code=True)
    with pytest.raises(ValueError, match="at least one text"):
        model(texts=[])


def without(file_name):
    """The folder without one of its files."""
    def break_folder(folder, copy):
        shutil.copytree(folder, copy)
        (copy / file_name).unlink()
        return copy
    return break_folder


def with_another_tokenizer(folder, copy):
    shutil.copytree(folder, copy)
    other = CAPTIONBERT if folder.name == "geolip" else folder.parent / "geolip"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(other / name, copy / name)
    return copy


def with_ids_moved(folder, copy, move):
    """The folder with tokenizer.json's vocabulary ids moved by `move` ({token: id} -> {token: id}): the same size,
    so only the vocabulary's hash tells it from the model's own."""
    shutil.copytree(folder, copy)
    tokenizer = json.loads((copy / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"] = move(tokenizer["model"]["vocab"])
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return copy


def two_tokens_swapped(vocab):  # "dog" and "cat" in a WordPiece vocabulary, two mid-vocabulary tokens otherwise
    first, second = ("dog", "cat") if "dog" in vocab else sorted(vocab, key=vocab.get)[len(vocab) // 2:][:2]
    return {**vocab, first: vocab[second], second: vocab[first]}


def every_id_permuted(vocab):
    ids = np.random.default_rng(0).permutation(sorted(vocab.values())).tolist()
    return dict(zip(vocab, ids))


def with_layers(folder, copy, change):
    """The folder with config.json's layer count (captionbert's trunk, geolip's memory) changed by `change`: the
    tensors keep their shapes, so only the layers the checkpoint lacks or holds beyond the config tell."""
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    key = "num_hidden_layers" if "num_hidden_layers" in config else "memory_layers"
    config[key] = config.get(key, 2) + change
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def with_header_corrupted(folder, copy):
    shutil.copytree(folder, copy)
    with open(copy / "model.safetensors", "r+b") as handle:
        handle.seek(8)  # past the header's length: its JSON
        handle.write(b'{"broken')
    return copy


def with_weight(folder, copy, value):
    shutil.copytree(folder, copy)
    weights = load_file(copy / "model.safetensors")
    name = sorted(weights)[len(weights) // 2]
    weights[name].view(-1)[0] = value
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


TOKENIZER = "tokenizer of .* has [0-9,]+ tokens, the model's vocabulary [0-9,]+: tokenizer.json is missing or belongs"
BAD_FILES = [  # (id, model, how its folder is broken, error type, message pattern)
    # without tokenizer.json, tokenizer_config.json loads a BertTokenizer of its 5 special tokens
    ("no tokenizer.json", "captionbert", without("tokenizer.json"), ValueError, TOKENIZER),
    *(("another model's tokenizer", name, with_another_tokenizer, ValueError, TOKENIZER)
      for name in ("captionbert", "geolip")),
    *((f"tokens {how} in tokenizer.json", name, lambda folder, copy, move=move: with_ids_moved(folder, copy, move),
       ValueError, "maps tokens to other ids than the model was trained with")
      for how, move in (("swapped", two_tokens_swapped), ("permuted", every_id_permuted))
      for name in ("captionbert", "geolip")),
    *((f"config with {change:+d} layer", name, lambda folder, copy, change=change: with_layers(folder, copy, change),
       ValueError, "the checkpoint's tensors are not the ones its config.json builds")
      for change in (1, -1) for name in ("captionbert", "geolip")),
    *(("corrupted safetensors header", name, with_header_corrupted, ValueError,
       rf"{name}: its weights file \(model.safetensors\) cannot be read") for name in ("captionbert", "geolip")),
    *((f"no {file}", name, without(file), FileNotFoundError,
       rf"{name} has no {file}, a file of the model's remote code \({why}\)")
      for name in ("captionbert", "geolip")
      for file, why in ((f"modeling_{name}.py", "config.json's auto_map names it"),
                        ("shared_identity.py", r"[a-z_]+\.py imports it"))),
    *((f"{value} weight", name, lambda folder, copy, value=value: with_weight(folder, copy, float(value)), ValueError,
       r"weights: non-finite values \(NaN or inf\) in 1 tensors") for value in ("nan", "inf")
      for name in ("captionbert", "geolip")),
]


@pytest.mark.parametrize("name, break_folder, error, message", [row[1:] for row in BAD_FILES],
                         ids=[f"{row[1]}-{row[0]}" for row in BAD_FILES])
def test_broken_folders_are_refused(folders, tmp_path, name, break_folder, error, message):
    broken = break_folder(folders[name], tmp_path / name)
    with pytest.raises(error, match=message):
        AutoModel.from_pretrained(broken, trust_remote_code=True).encode(["a dog", "two men play chess"])


def test_non_finite_embeddings_are_refused(folders):
    model = AutoModel.from_pretrained(folders["captionbert"], trust_remote_code=True).eval()
    with torch.no_grad():
        model.head.projection.weight.fill_(3e38)  # finite weights whose products overflow
    with pytest.raises(RuntimeError, match=r"embeddings of 1 texts are not finite \(first: texts\[0\]\)"):
        model.encode(["a dog"])
