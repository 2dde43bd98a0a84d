"""captionbert-8192-v2 in Sentence Transformers: the folder's modules.json pipeline, loaded with trust_remote_code,
gives the embeddings of the model's own `encode` (truncation, padding, batching, a save round trip, a fresh process
without the project); the shipped arms are off at load, as with AutoModel, and follow attach_amoe on the underlying
model; and the same holds for the real weights when `make demo` has built them."""

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

from helpers import CAPTIONBERT, TINY_CAPTIONBERT, build_from_folder, captionbert_copy
from tools import corpus, runs, sts
from tools.captionbert import export as captionbert_export

TOLERANCE = 1e-5  # the same forward either way; only the batching differs
POSITIONS = 32  # the tiny folder's learned positions, so that truncation is cheap to reach
LONG = ("A crowded street market at dusk, with stalls selling oranges, figs and bread, paper lanterns hanging "
        "overhead, people in heavy coats haggling over prices, a musician playing an accordion beside a fountain, "
        "children chasing pigeons across the wet cobblestones, and a tram passing slowly behind the crowd.")
TEXTS = ["A dog runs across the grass.", "two men play chess in a park", "a", LONG, "Ein Hund läuft."]


def sentence_transformer(folder):
    return SentenceTransformer(str(folder), trust_remote_code=True, local_files_only=True, device="cpu")


def test_the_shipped_files_are_what_export_writes():
    config = json.loads((CAPTIONBERT / "config.json").read_text())
    written = captionbert_export.sentence_transformers_files(config)
    for name, payload in written.items():
        assert json.loads((CAPTIONBERT / name).read_text()) == payload, name
    # every position, or the length the exported weights were trained to (encode caps there too)
    assert written["sentence_bert_config.json"]["max_seq_length"] == (config.get("trained_length") or 8192)
    module, name = written["modules.json"][0]["type"].split(".")
    assert f"class {name}(" in (CAPTIONBERT / f"{module}.py").read_text()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A saved tiny captionbert with 64 positions and the sentence-transformers files export writes for it."""
    folder = captionbert_copy(tmp_path_factory.mktemp("st") / "captionbert-st",
                              **{**TINY_CAPTIONBERT, "max_position_embeddings": POSITIONS})
    build_from_folder(folder).save_pretrained(folder)
    captionbert_export.write_sentence_transformers_files(folder)
    return folder


def test_sentence_transformers_gives_the_models_encode(tiny_folder):
    model = AutoModel.from_pretrained(tiny_folder, trust_remote_code=True).eval()
    st = sentence_transformer(tiny_folder)
    assert st.max_seq_length == POSITIONS and st.get_embedding_dimension() == TINY_CAPTIONBERT["output_dim"]
    assert len(model.tokenizer(LONG)["input_ids"]) > POSITIONS  # LONG is truncated on both paths
    with pytest.warns(UserWarning, match="truncated"):
        expected = model.encode(TEXTS)
    for batch_size in (len(TEXTS), 4, 1):  # one padded batch, batches of mixed lengths, no padding at all
        np.testing.assert_allclose(st.encode(TEXTS, batch_size=batch_size), expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(st.encode(TEXTS[0]), expected[0], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(expected, axis=1), 1.0, atol=1e-6)
    # The comparisons could fail: distinct texts give distinct rows, and what lies past the positions is dropped.
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
    longer = st.encode([LONG, LONG + " A second tram follows it."])
    np.testing.assert_allclose(longer[0], longer[1], atol=1e-6, rtol=0)


def test_save_and_reload_keep_the_embeddings(tiny_folder, tmp_path):
    st = sentence_transformer(tiny_folder)
    st.save(str(tmp_path / "saved"))
    reloaded = sentence_transformer(tmp_path / "saved")
    assert reloaded.max_seq_length == POSITIONS
    assert reloaded.get_embedding_dimension() == TINY_CAPTIONBERT["output_dim"]
    np.testing.assert_allclose(reloaded.encode(TEXTS), st.encode(TEXTS), atol=TOLERANCE, rtol=0)


def test_a_fresh_process_without_the_project_gets_the_same_embeddings(tiny_folder):
    loaded = runs.load_isolated(tiny_folder, TEXTS, auto_model=True, sentence_transformers=True)
    st = loaded["sentence_transformers"]
    np.testing.assert_allclose(st["embeddings"], loaded["auto_model"]["embeddings"], atol=TOLERANCE, rtol=0)
    assert st["dimension"] == TINY_CAPTIONBERT["output_dim"]


def test_shipped_arms_are_off_at_load_and_follow_attach_on_the_underlying_model(model_with_arms):
    folder, model = model_with_arms
    st = sentence_transformer(folder)
    texts = TEXTS[:3]
    bare = model.encode(texts)
    np.testing.assert_allclose(st.encode(texts), bare, atol=TOLERANCE, rtol=0)  # amoe/ ships; neither turns it on
    model.attach_amoe()
    st[0].auto_model.attach_amoe()
    arms = model.encode(texts)
    assert np.abs(arms - bare).max() > 1e-3
    np.testing.assert_allclose(st.encode(texts), arms, atol=TOLERANCE, rtol=0)
    with st[0].auto_model.amoe_off():
        np.testing.assert_allclose(st.encode(texts), bare, atol=TOLERANCE, rtol=0)


# ---- the shipped weights (committed; `make release` writes them) ---------------------------------------------------

@pytest.fixture(scope="module")
def shipped(data_dir):
    """(model, SentenceTransformer, 8 real texts) of the committed folder with its shipped weights."""
    texts = sts.gauge_captions(data_dir, 4)  # Flickr8k test captions
    texts += list(sts.load_task(data_dir, "STS-B")[0][:2])  # an STS Benchmark test pair
    texts += corpus.build(data_dir, ["imageinwords"])[0][:2]  # two long descriptions
    model = AutoModel.from_pretrained(CAPTIONBERT, trust_remote_code=True).eval()
    return model, sentence_transformer(CAPTIONBERT), texts


def test_the_shipped_model_in_sentence_transformers(shipped):
    model, st, texts = shipped
    assert st.get_embedding_dimension() == 768 and st.max_seq_length == (model.config.trained_length or 8192)
    expected = model.encode(texts)
    np.testing.assert_allclose(st.encode(texts, batch_size=3), expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(st.encode(texts), expected, atol=TOLERANCE, rtol=0)


def test_the_shipped_arms_in_sentence_transformers(shipped):
    """The shipped collective, or when select shipped none (attach_amoe() then raises naming the solo arms), the
    first shipped solo arm: on in the model and in the SentenceTransformer alike."""
    model, st, texts = shipped
    library = json.loads((CAPTIONBERT / "amoe" / "arms" / "ARMS.json").read_text())
    arms = None if library["roster"] else [min(library["arms"])]
    if arms:
        with pytest.raises(FileNotFoundError, match=f"ships no collective.*{arms[0]}"):
            model.attach_amoe()
    model.attach_amoe(arms)
    st[0].auto_model.attach_amoe(arms)
    try:
        arms = model.encode(texts)
        with model.amoe_off():
            assert np.abs(arms - model.encode(texts)).max() > 1e-3
        np.testing.assert_allclose(st.encode(texts, batch_size=3), arms, atol=TOLERANCE, rtol=0)
    finally:
        model.detach_amoe()
        st[0].auto_model.detach_amoe()
