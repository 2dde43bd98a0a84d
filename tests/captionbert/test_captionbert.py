"""captionbert-8192-v2 as a Hub folder: size, loading through remote code (folder and Hub cache), encode contract."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoConfig, AutoModel

from helpers import CAPTIONBERT, TINY_CAPTIONBERT, build_from_folder, captionbert_copy

TEXTS = ["A dog runs across the grass.", "two men play chess in a park", "a",
         "A very long caption about a crowded street market at dusk, with stalls selling fruit, lanterns hanging "
         "overhead, and people in coats haggling over prices while a musician plays an accordion.",
         "Ein Hund läuft."]


def test_full_size_parameter_count():
    model = build_from_folder(CAPTIONBERT)
    count = sum(p.numel() for p in model.parameters())
    print(f"captionbert-8192-v2 parameters: {count:,}")
    assert abs(count - 58.3e6) <= 0.1e6
    assert model.config.max_position_embeddings == 8192 and model.config.output_dim == 768


@pytest.mark.parametrize("override, message", [
    ({"num_attention_heads": 7}, "multiple of num_attention_heads"),
    ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ({"output_dim": 0}, "output_dim must be positive"),
    ({"pad_token_id": 40000}, "pad_token_id"),
    ({"trained_length": 9000}, "trained_length"),
])
def test_config_rejects_bad_values(tmp_path, override, message):
    folder = captionbert_copy(tmp_path / "bad", **override)
    with pytest.raises(StrictDataclassClassValidationError, match=message):
        AutoConfig.from_pretrained(folder, trust_remote_code=True)


def test_forward_outputs(tiny_captionbert):
    folder, model = tiny_captionbert
    batch = model.tokenizer(TEXTS[:3], padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "attention_mask"}  # single-segment: no token_type_ids
    with torch.no_grad():
        output = model(**batch)
    assert output.last_hidden_state.shape == (3, batch["input_ids"].shape[1], 32)
    assert output.pooler_output.shape == (3, 24)
    torch.testing.assert_close(output.pooler_output.norm(dim=-1), torch.ones(3))


def test_sdpa_and_eager_give_the_same_embeddings(tiny_captionbert):
    folder, model = tiny_captionbert
    eager = AutoModel.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager").eval()
    assert model.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    np.testing.assert_allclose(model.encode(TEXTS), eager.encode(TEXTS), atol=1e-5)


def test_padding_batching_and_order_do_not_change_embeddings(tiny_captionbert):
    _, model = tiny_captionbert
    together = model.encode(TEXTS, batch_size=64)
    one_by_one = np.stack([model.encode(text) for text in TEXTS])
    in_pairs = model.encode(TEXTS, batch_size=2)
    reversed_order = model.encode(TEXTS[::-1], batch_size=3)[::-1]
    for other in (one_by_one, in_pairs, reversed_order):
        np.testing.assert_allclose(together, other, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-6)
    # Distinct texts give distinct rows, so an order mix-up could not pass the comparisons above.
    assert np.abs(together[0] - together[1]).max() > 1e-3


def test_encode_from_several_threads_at_once_gives_the_one_thread_embeddings(tiny_captionbert):
    """What the card promises: encode may run from several threads on one model in eval mode (the tokenizer, the
    padding and the forward pass are shared), each call getting what one thread alone gets."""
    import threading

    _, model = tiny_captionbert
    expected = model.encode(TEXTS, batch_size=2)
    failures = []

    def work(offset):
        for _ in range(10):
            try:
                got = model.encode(TEXTS[offset:], batch_size=2)
                np.testing.assert_allclose(got, expected[offset:], atol=1e-5, rtol=0)
            except Exception as error:  # collected: an exception in a thread would not fail the test by itself
                failures.append(repr(error))

    threads = [threading.Thread(target=work, args=(k % len(TEXTS),)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_encode_return_types(tiny_captionbert):
    _, model = tiny_captionbert
    single = model.encode("a dog")
    assert single.shape == (24,) and single.dtype == np.float32
    tensor = model.encode(["a dog", "a cat"], convert_to_numpy=False)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (2, 24)
    np.testing.assert_allclose(tensor.numpy()[0], single, atol=1e-6)
    empty = model.encode([])
    assert empty.shape == (0, 24) and empty.dtype == np.float32


@pytest.mark.parametrize("bad, message", [
    (None, "texts must be a str or a list of str, got NoneType"),
    (5, "got int"),
    (["fine", None], r"texts\[1\] must be a str, got NoneType"),
    (["fine", "also fine", 3.5], r"texts\[2\] must be a str, got float"),
])
def test_bad_inputs_raise_type_errors_naming_the_item(tiny_captionbert, bad, message):
    _, model = tiny_captionbert
    with pytest.raises(TypeError, match=message):
        model.encode(bad)


def test_longest_input_runs_and_longer_is_truncated_with_one_warning(tiny_captionbert):
    _, model = tiny_captionbert
    exact = "a " * 8190  # [CLS] + 8190 + [SEP] = 8192 tokens
    assert len(model.tokenizer(exact)["input_ids"]) == 8192
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at exactly the limit
        at_limit = model.encode(exact)
    with pytest.warns(UserWarning, match="exceed the model's 8192 usable positions and were truncated") as caught:
        over = model.encode([exact + "a", exact + "a b c", "short"])
    assert len(caught) == 1
    # Truncation keeps the first 8191 tokens and the closing [SEP]: identical ids, identical embedding.
    np.testing.assert_allclose(over[0], at_limit, atol=1e-6)
    np.testing.assert_allclose(over[1], at_limit, atol=1e-6)


def _reference_embeddings(tmp_path):
    """Save a full-size random captionbert with its code and tokenizer; return (folder, its embeddings)."""
    folder = captionbert_copy(tmp_path / "captionbert-8192-v2")
    model = build_from_folder(folder, seed=1)
    model.save_pretrained(folder)
    return folder, model.encode(TEXTS)


LOAD_AND_ENCODE = textwrap.dedent("""
    import importlib.util, sys
    import numpy as np
    from transformers import AutoModel, AutoTokenizer
    assert importlib.util.find_spec("shared_modeling") is None, "the project must not be importable here"
    source, out = sys.argv[1], sys.argv[2]
    texts = {texts!r}
    model = AutoModel.from_pretrained(source, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(source)
    assert tokenizer(texts[0])["input_ids"] == model.tokenizer(texts[0])["input_ids"]
    np.save(out, model.encode(texts))
""").format(texts=TEXTS)


def _run_isolated(source, out, cwd, hf_home):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    completed = subprocess.run([sys.executable, "-c", LOAD_AND_ENCODE, str(source), str(out)], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return np.load(out)


@pytest.mark.slow
def test_fresh_process_loads_the_folder_and_reproduces_embeddings_exactly(tmp_path):
    folder, expected = _reference_embeddings(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    loaded = _run_isolated(folder, tmp_path / "out.npy", elsewhere, tmp_path / "hf-home")
    np.testing.assert_array_equal(loaded, expected)


@pytest.mark.slow
def test_hub_cache_snapshot_loads_by_repo_id_offline(tmp_path):
    folder, expected = _reference_embeddings(tmp_path)
    hf_home = tmp_path / "hf-home"
    repo = hf_home / "hub" / "models--bundle-org--captionbert-8192-v2"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    shutil.copytree(folder, repo / "snapshots" / revision, ignore=shutil.ignore_patterns("__pycache__"))
    loaded = _run_isolated("bundle-org/captionbert-8192-v2", tmp_path / "out.npy", tmp_path, hf_home)
    np.testing.assert_array_equal(loaded, expected)


def test_shipped_folder_holds_what_a_hub_repo_needs():
    config = json.loads((CAPTIONBERT / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_captionbert.CaptionBertConfig",
                                  "AutoModel": "modeling_captionbert.CaptionBertModel"}
    for name in ("configuration_captionbert.py", "modeling_captionbert.py", "shared_layers.py", "shared_pooling.py",
                 "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (CAPTIONBERT / name).is_file(), name


def test_untrained_positions_are_cut_off_with_one_warning(tmp_path):
    folder = captionbert_copy(tmp_path / "trained16", **{**TINY_CAPTIONBERT, "trained_length": 16})
    model = build_from_folder(folder)
    model.save_pretrained(folder)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert model.config.trained_length == 16 and model.usable_length == 16
    ids = model.tokenizer("one two three four five six seven eight nine ten")["input_ids"]  # 12 tokens
    long_text = " ".join(["word"] * 40)
    with pytest.warns(UserWarning, match="usable positions") as caught:
        embeddings = model.encode([long_text, long_text + " more", "short"])
    assert len(caught) == 1
    cut = model.tokenizer(" ".join(["word"] * 14))["input_ids"]  # [CLS] + 14 + [SEP] = 16 tokens
    assert len(cut) == 16
    np.testing.assert_allclose(embeddings[0], model.encode(" ".join(["word"] * 14)), atol=1e-6)
    np.testing.assert_allclose(embeddings[1], embeddings[0], atol=1e-6)
    # forward cuts at the trained length too, with one warning, as encode does: each longer row keeps its first 15
    # tokens and its closing [SEP]; a shorter row of the padded batch is read whole.
    texts = [" ".join(["one two three four five six seven eight nine ten"] * 2), "short"]  # 22 tokens, 3
    batch = model.tokenizer(texts, padding=True, return_tensors="pt")
    with pytest.warns(UserWarning, match="untrained vectors") as caught:
        output = model(batch["input_ids"], batch["attention_mask"])
    assert len(caught) == 1 and output.last_hidden_state.shape[1] == 16 and len(ids) == 12
    with pytest.warns(UserWarning, match="usable positions"):
        np.testing.assert_allclose(output.pooler_output.detach().numpy(), model.encode(texts), atol=1e-6)


def test_forward_rejects_more_tokens_than_positions_and_encode_takes_a_device(tiny_captionbert):
    _, model = tiny_captionbert
    with pytest.raises(ValueError, match="8193 tokens exceeds the 8192 learned positions"):
        model(torch.ones(1, 8193, dtype=torch.long))
    np.testing.assert_allclose(model.encode(TEXTS[:2], device="cpu"), model.encode(TEXTS[:2]), atol=1e-6)
