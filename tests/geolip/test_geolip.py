"""geolip-clip-ctx576 on a tiny random CLIPTextModel (no CLIP weights install from PyPI): the folder's own remote
code end to end, the window and the segments each in one batched base call, an untrained memory adding exactly
nothing to the base on its window, the explicit memory state, and bad inputs."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel

from helpers import ROOT
from shared_modeling.checks import vocabulary_sha256
from tools.glyph.tokenizer import train_tokenizer

GEOLIP = ROOT / "geolip-clip-ctx576"
TINY_BASE = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 3,
             "projection_dim": 32, "max_position_embeddings": 40}
TINY = {"base_window": 24, "fusion_layers": 3, "memory_slots": 8, "memory_heads": 2, "teacher_dim": 48}
TEXTS = ["a dog runs on the beach", "two children play football in a park near a tall building " * 6, "red"]


def published_folder(destination, **overrides):
    """The geolip Hub folder's code with a config.json that names only the code and `overrides`: every other
    hyper-parameter is a GeolipConfig default, the published model (CLIP-L text base, 18/14/32 segments), whichever
    base the folder's own weights were trained on."""
    destination.mkdir()
    for path in GEOLIP.glob("*.py"):
        shutil.copy(path, destination)
    loading = {key: json.loads((GEOLIP / "config.json").read_text())[key]
               for key in ("architectures", "auto_map", "model_type")}
    (destination / "config.json").write_text(json.dumps({**loading, **overrides}, indent=2))
    return destination


def geolip_folder(destination, captions, **overrides):
    """The published config with a tiny random CLIP text base, a BPE tokenizer trained on `captions` (CLIP's is not
    installable offline) and `overrides`; weights saved, loadable by from_pretrained, with the readout's residual
    projection drawn at random (as after training: untrained, the memory adds nothing)."""
    tokenizer = train_tokenizer(captions, vocab_size=400, max_length=77)
    base = {**TINY_BASE, "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    published_folder(destination, **TINY, base_config=base, vocabulary_sha256=vocabulary_sha256(tokenizer),
                     **overrides)
    tokenizer.save_pretrained(destination)
    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.from_pretrained(destination, trust_remote_code=True),
                                  trust_remote_code=True)
    with torch.no_grad():
        model.residual_projection.weight.normal_(std=0.5)
    model.save_pretrained(destination)
    return destination


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, data_dir):
    from tools import corpus

    captions = corpus.build(data_dir, ["flickr8k-train"])[0][:500]
    folder = geolip_folder(tmp_path_factory.mktemp("geolip") / "geolip-tiny", captions)
    return folder, AutoModel.from_pretrained(folder, trust_remote_code=True).eval()


def test_encode_shapes_and_forward_output(tiny):
    _, model = tiny
    one, many = model.encode(TEXTS[0]), model.encode(TEXTS)
    assert one.shape == (32,) and many.shape == (3, 32) and model.encode([]).shape == (0, 32)
    assert np.allclose(np.linalg.norm(many, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(many[0], one, atol=1e-5)  # batching and order do not change a text's embedding
    with torch.no_grad():
        output = model(texts=TEXTS)
    assert output.last_hidden_state.shape == (3, 1, 32)
    np.testing.assert_allclose(output.pooler_output.numpy(), many, atol=1e-5)


def test_the_windows_and_every_segment_go_through_the_base_in_one_call_each(tiny):
    _, model = tiny
    calls = []
    handle = model.base.register_forward_hook(lambda module, args, kwargs, output: calls.append(kwargs["input_ids"]),
                                              with_kwargs=True)
    try:
        model.encode(TEXTS, batch_size=8)
    finally:
        handle.remove()
    windows, segments = sorted(calls, key=len)
    assert len(calls) == 2 and windows.shape == (3, 24)  # every text's window in one call
    assert segments.shape[0] > 3 and segments.shape[1] == 18 + 2  # the long text has several, all in the other


def test_an_untrained_memory_is_exactly_the_base_on_its_window(tiny):
    """Built from the config, the residual projection is zero, so the model's embedding is bit for bit the base's
    own embedding (CLIP's: its state at the closing token) of the text's first base_window tokens, computed here by
    the tokenizer and the base alone. (Not pooler_output: with this tokenizer's closing id, 2, CLIPTextModel takes
    the legacy argmax of the ids, which real CLIP only gets right because its closing id is the largest.)"""
    folder, trained = tiny
    model = AutoModel.from_config(AutoConfig.from_pretrained(folder, trust_remote_code=True),
                                  trust_remote_code=True).eval()
    model.tokenizer = trained.tokenizer
    assert not model.residual_projection.weight.any()  # transformers' post_init kept the zero initialisation
    batch = model.tokenizer(TEXTS, truncation=True, max_length=24, padding="max_length", return_tensors="pt")
    assert batch["attention_mask"][1].all()  # the long text fills the window: the rest is past it
    with torch.no_grad():
        states = model.base(**batch).last_hidden_state
        window = states[torch.arange(3), (batch["input_ids"] == model.tokenizer.eos_token_id).int().argmax(dim=1)]
        output = model(texts=TEXTS)
    assert torch.equal(output.last_hidden_state[:, 0], window)
    with torch.no_grad():  # trained (as the fixture's folder is), the memory adds what lies past the window
        model.residual_projection.weight.copy_(trained.residual_projection.weight)
        assert not torch.allclose(model(texts=TEXTS).last_hidden_state[1, 0], window[1], atol=1e-3)


def test_an_untrained_memory_started_from_the_blend_is_exactly_the_blend_of_window_and_segment_mean(tiny):
    """blend_weight w: the model starts from w x the window embedding + (1 - w) x the mean of its segments' own base
    embeddings, both L2-normalised, computed here from the base's own calls; untrained, that is the output bit for
    bit, and it is the evaluation's blend row (tools/geolip/metrics.py) of the same texts."""
    from tools.geolip.metrics import row_embeddings

    folder, trained = tiny
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True, blend_weight=0.3)
    model = AutoModel.from_config(config, trust_remote_code=True).eval()
    model.tokenizer = trained.tokenizer
    with torch.no_grad():
        ids = model.content_ids(TEXTS)
        window = model.window_embedding(ids)
        _, _, own, counts = model.segments(ids)
        first = 0
        for i, count in enumerate(counts):
            mean = own[first:first + count].mean(dim=0)
            first += count
            start = 0.3 * window[i] / window[i].norm() + 0.7 * mean / mean.norm()
            torch.testing.assert_close(model(texts=[TEXTS[i]]).last_hidden_state[0, 0], start)
        rows = row_embeddings(model, TEXTS, batch_size=8, blend_weight=0.3)
    assert torch.equal(rows["memory"], rows["blend"])  # bit for bit
    assert not torch.allclose(rows["blend"], rows["window"])


def test_a_readout_of_the_segment_anchors_starts_at_the_window_and_reads_only_its_own_text_s(tiny):
    """readout_anchors: the same weights, the readout's keys extended by every segment anchor of the text. Untrained
    it is still exactly the base on its window; trained, it reads something the memory slots alone do not give, and
    a text's embedding does not depend on the other texts of its batch (their anchors are masked)."""
    folder, slots_only = tiny
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, readout_anchors="all").eval()
    assert model.config.readout_anchors == "all" and slots_only.config.readout_anchors == "none"
    with torch.no_grad():
        reading = model(texts=TEXTS).last_hidden_state[:, 0]
        assert not torch.allclose(reading, slots_only(texts=TEXTS).last_hidden_state[:, 0], atol=1e-4)
        for i, text in enumerate(TEXTS):
            torch.testing.assert_close(model(texts=[text]).last_hidden_state[0, 0], reading[i])
        model.residual_projection.weight.zero_()
        ids = model.content_ids(TEXTS)
        assert torch.equal(model(texts=TEXTS).last_hidden_state[:, 0], model.window_embedding(ids))


def test_a_readout_past_the_window_reads_no_anchor_of_a_text_that_fits_its_window(tiny):
    """readout_anchors="past_window": the readout reads only the anchors of segments with tokens past the window, so a
    text that fits its window (TEXTS[0], TEXTS[2]) reads the memory slots alone, as the published readout does,
    and the long text (TEXTS[1]) reads fewer anchors than with "all" (its first segments lie in the window)."""
    folder, slots_only = tiny
    past, every = (AutoModel.from_pretrained(folder, trust_remote_code=True, readout_anchors=which).eval()
                   for which in ("past_window", "all"))
    with torch.no_grad():
        reading, published = past(texts=TEXTS).last_hidden_state[:, 0], slots_only(texts=TEXTS).last_hidden_state[:, 0]
        torch.testing.assert_close(reading[[0, 2]], published[[0, 2]])
        assert not torch.allclose(reading[1], published[1], atol=1e-4)
        assert not torch.allclose(reading[1], every(texts=TEXTS).last_hidden_state[1, 0], atol=1e-4)


def test_a_readout_of_the_segments_own_base_embeddings_reads_them_in_place_of_the_anchors(tiny):
    """readout_source="base": the readout's segment keys are each segment's own base embedding, not its anchor. The
    texts that fit their window read the slots alone either way; the long text reads something else than through the
    anchors, and its embedding still does not depend on the other texts of its batch."""
    folder, _ = tiny
    own, anchors = (AutoModel.from_pretrained(folder, trust_remote_code=True, readout_anchors="past_window",
                                              readout_source=source).eval() for source in ("base", "anchors"))
    with torch.no_grad():
        reading = own(texts=TEXTS).last_hidden_state[:, 0]
        through_anchors = anchors(texts=TEXTS).last_hidden_state[:, 0]
        torch.testing.assert_close(reading[[0, 2]], through_anchors[[0, 2]])
        assert not torch.allclose(reading[1], through_anchors[1], atol=1e-4)
        torch.testing.assert_close(own(texts=[TEXTS[1]]).last_hidden_state[0, 0], reading[1])


def test_from_pretrained_loads_the_trained_residual_projection(tiny):
    from safetensors.torch import load_file

    folder, model = tiny
    saved = load_file(folder / "model.safetensors")["residual_projection.weight"]
    assert saved.any() and torch.equal(model.residual_projection.weight, saved)  # not re-initialised to zero


def test_memory_state_is_explicit_and_starts_from_the_bank(tiny):
    _, model = tiny
    memory = model.memory
    state = memory.initial_state(3)
    assert state.shape == (3, 8, 32) and torch.equal(state[2], memory.bank)
    tokens, anchors = torch.randn(3, 20, 32), torch.randn(3, 2, 32)
    token_mask, anchor_mask = torch.ones(3, 20, dtype=torch.bool), torch.tensor([[True, True]] * 2 + [[True, False]])
    with torch.no_grad():
        after = memory.step(state, tokens, token_mask, anchors, anchor_mask)
        again = memory.step(state, tokens, token_mask, anchors, anchor_mask)
    assert after.shape == state.shape and not torch.equal(after, state)
    assert torch.equal(after, again)  # nothing carried inside the module between steps
    assert not list(memory.buffers())
    # encoding twice gives the same embedding: no state survives a call
    np.testing.assert_array_equal(model.encode(TEXTS[1]), model.encode(TEXTS[1]))


def test_memory_changes_long_texts_and_the_base_stays_frozen(tiny):
    _, model = tiny
    model.train()
    assert model.memory.training and not model.base.training  # the frozen base never drops out
    model.zero_grad(set_to_none=True)
    model(texts=TEXTS).last_hidden_state.sum().backward()
    assert all(p.grad is None for p in model.base.parameters())  # no gradient reaches the frozen base
    assert all(p.grad is not None for p in model.trainable_parameters() if p is not model.projector.weight)
    model.zero_grad(set_to_none=True)
    model.eval()
    trainable = sum(p.numel() for p in model.trainable_parameters())
    assert trainable == sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in model.base.parameters())
    # the text cut after its window is a different input for the memory: the embeddings differ
    long_ids = model.content_ids([TEXTS[1]])[0]
    first_window = model.tokenizer.decode(long_ids[:24 - 2])
    assert not np.allclose(model.encode(TEXTS[1]), model.encode(first_window), atol=1e-4)


def test_bad_inputs_and_over_long_texts(tiny):
    _, model = tiny
    with pytest.raises(ValueError, match=r"texts\[1\] has no content"):
        model.encode(["a dog", ""])
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        model.encode(["a dog", 3])
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["a dog"], batch_size=0)
    words = " ".join(["dog"] * 600)  # more content tokens than the 18 + 31 x 14 = 452 the segments cover
    with pytest.warns(UserWarning, match="exceed the 452 tokens"):
        over = model.encode(words)
    kept = model.tokenizer(words, add_special_tokens=False)["input_ids"][:452]  # the first 452 tokens are kept
    exactly = model.tokenizer.decode(kept)
    np.testing.assert_allclose(over, model.encode(exactly), atol=1e-5)


def test_config_rejects_bad_values(tmp_path):
    for i, (override, message) in enumerate([
            ({"segment_stride": 20}, "skip tokens"), ({"base_pooling": "cls"}, "base_pooling"),
            ({"readout_anchors": "tail"}, "readout_anchors must be"),
            ({"readout_source": "own"}, "readout_source must be"), ({"blend_weight": 1.5}, "blend_weight must be"),
            ({"fusion_layers": 14}, "fusion_layers"), ({"memory_heads": 5}, "memory_heads"),
            ({"segment_size": 80}, "positions"), ({"base_window": 2}, "at least 3"),
            ({"base_window": 78}, r"base_window \(78\) .* the base's 77 positions"),
            ({"segment_size": 20, "segment_stride": 10, "max_segments": 5},
             "cover 60 content tokens, no more than the base_window's 75")]):
        folder = published_folder(tmp_path / f"bad-{i}", **override)
        with pytest.raises(Exception, match=message):
            AutoConfig.from_pretrained(folder, trust_remote_code=True)


def test_a_config_saved_before_base_window_loads_with_clip_s_77(tmp_path):
    config = AutoConfig.from_pretrained(published_folder(tmp_path / "old"), trust_remote_code=True)
    assert "base_window" not in json.loads((tmp_path / "old" / "config.json").read_text())
    assert config.base_window == 77 and config.base.max_position_embeddings == 77


LOAD_AND_ENCODE = textwrap.dedent("""
    import importlib.util, sys
    import numpy as np
    from transformers import AutoModel
    assert importlib.util.find_spec("shared_modeling") is None, "the project must not be importable here"
    model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
    np.save(sys.argv[2], model.encode({texts!r}))
""").format(texts=TEXTS)


def test_fresh_process_loads_the_folder_with_automodel_and_reproduces_embeddings(tiny, tmp_path):
    folder, model = tiny
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="1")
    completed = subprocess.run([sys.executable, "-c", LOAD_AND_ENCODE, str(folder), str(tmp_path / "out.npy")],
                               cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), model.encode(TEXTS))


def test_parameter_counts_at_clip_l_size(capsys, tmp_path):
    """The published shape, built on the meta device (no memory): CLIP-L's text tower is 123.06M parameters, and
    this memory system trains 37.46M (the published one: 34.5M; the spec leaves its inner widths open; the readout's
    residual projection adds 768 x 768)."""
    config = AutoConfig.from_pretrained(published_folder(tmp_path / "published"), trust_remote_code=True)
    with torch.device("meta"):
        model = AutoModel.from_config(config, trust_remote_code=True)
    base = sum(p.numel() for p in model.base.parameters())
    trainable = sum(p.numel() for p in model.trainable_parameters())
    with capsys.disabled():
        print(f"\ngeolip at CLIP-L size: frozen base {base:,}, trainable {trainable:,}")
    assert base == 123_060_480
    assert trainable == 36_868_614 + 768 * 768
