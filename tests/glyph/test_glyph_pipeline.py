"""glyph-embedder-v2's build steps end to end on tiny configurations: corpus and tokenizer, two-stage training
(resumable after kill -9), the sentence-transformers folder, and the evaluation table's measures."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from helpers import assert_card_from_records, finish, kill_when, run_tool
from shared_modeling.identity import embedding_space, trunk_hash
from tools import runs
from tools.glyph import corpus as glyph_corpus
from tools.glyph import crosscheck as glyph_crosscheck
from tools.glyph import evaluate as glyph_evaluate
from tools.glyph import metrics as glyph_metrics
from tools.glyph import data as glyph_data
from tools.glyph import train as glyph_train
from tools.glyph.data import read_triples
from tools.glyph.generate import Lexicon
from tools.glyph.grammar import OPERATORS

TINY_CORPUS = ["--train-triples", 600, "--validation-triples", 60, "--test-triples", 300, "--vocab-size", 500,
               "--extra-words", 300]
TINY_MODEL = ["--hidden-size", 32, "--num-layers", 2, "--num-heads", 2, "--intermediate-size", 64,
              "--mlm-steps", 12, "--mlm-batch-size", 16, "--contrastive-steps", 12, "--contrastive-batch-size", 16,
              "--validate-every", 6, "--checkpoint-every", 4, "--log-every", 4]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("glyph") / "corpus"
    assert glyph_corpus.main(["--out", str(out), *map(str, TINY_CORPUS)]) == 0
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("glyph") / "train"
    assert glyph_train.main(["--corpus", str(corpus), "--out", str(out), *map(str, TINY_MODEL)]) == 0
    return out


def test_the_test_triples_regenerate_from_the_corpus_config_alone(corpus, tmp_path):
    """What the shipped-weights check relies on to recompute the win rate without the (git-ignored) corpus."""
    config = glyph_corpus.Config(**{**runs.read_json(corpus / "config.json"), "out": tmp_path})
    glyph_data.write_triples(tmp_path / "test.jsonl", glyph_corpus.held_out_triples(config))
    assert runs.file_sha256(tmp_path / "test.jsonl") == runs.read_json(corpus / "metrics.json")["test_sha256"]
    assert (tmp_path / "test.jsonl").read_bytes() == (corpus / "test.jsonl").read_bytes()


def words_of(text):
    return {word for atom in "".join(c if c.isalpha() or c == "_" else " " for c in text).split()
            for word in atom.split("_")}


def test_held_out_words_never_reach_the_corpus_and_every_test_atom_is_new(corpus):
    train_words, held_out = Lexicon.load(extra_words=300).split(0.2, seed=0)
    variables = {"x", "y", "z"}
    corpus_words = set().union(*map(words_of, (corpus / "corpus.txt").read_text().splitlines()))
    assert corpus_words - variables <= set(train_words.words)
    for triple in read_triples(corpus / "test.jsonl"):
        for text in (triple["anchor"], triple["positive"], triple["negative"]):
            for atom in set(re.findall(r"[a-z][a-z0-9_]*", text)) - variables:
                words = atom.split("_")
                assert any(word in held_out.words for word in words), (atom, text)  # never seen in training
                assert set(words) <= set(held_out.words) | set(train_words.renamable), (atom, text)
    validation = {t["anchor"] for t in read_triples(corpus / "validation.jsonl")}
    assert validation.isdisjoint((corpus / "corpus.txt").read_text().splitlines())


def test_corpus_records_its_counts_and_operator_tokens(corpus):
    metrics = json.loads((corpus / "metrics.json").read_text())
    assert metrics["triples"] == {"train": 600, "validation": 60, "test": 300}
    assert set(metrics["tokenizer"]["operator_token_counts"]) == set(OPERATORS)
    assert metrics["tokenizer"]["vocab_size"] == 500
    assert sum(metrics["mutations"]["test"].values()) == 300


def test_tokenizer_round_trips_glyph_text_it_never_saw(corpus):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    for text in ["∀x: x∈vaccine ⇒ x↑", "a   ⇒b", "ünïcode_ok ⊕ é", "(¬(a∧b))↓ ∴ ⊥", "🙂 ↛ 日本"]:
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
        assert tokenizer.unk_token_id not in ids  # byte-level: nothing is unknown
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_a_spaces_apart_tokenizer_shares_every_token_but_the_spaces(corpus, tmp_path):
    from tokenizers import Regex, pre_tokenizers

    from tools.glyph.gguf import read_tokenizer
    from tools.glyph.tokenizer import train_tokenizer

    texts = (corpus / "corpus.txt").read_text().splitlines()
    default, apart = (train_tokenizer(texts, 500, spaces_apart=flag) for flag in (False, True))
    def holds_space(tokenizer):  # the tokens that decode to something with white space in it
        return [token for token in tokenizer.get_vocab()
                if any(ch.isspace() for ch in tokenizer.convert_tokens_to_string([token]))]

    assert "Ġ" in holds_space(apart) and all(len(token) == 1 for token in holds_space(apart))  # one byte each
    assert any(len(token) > 1 for token in holds_space(default))  # the default merges spaces

    spaced = [text for text in texts if " " in text][:200] + ["a  ⇒\tb\n", "x∈red_car ⇒ ¬(fast ∧loud)"]
    for text in spaced:
        assert [t for t in apart.tokenize(text) if t not in "ĠĊĉ"] == apart.tokenize(re.sub(r"\s", "", text)), text
    # The saved pre-tokeniser is GPT-2's (the GGUF export accepts it, llama.cpp's gpt-2 splits alike), and it
    # tokenises as the space-isolating one the BPE was trained under
    apart.save_pretrained(tmp_path)
    read_tokenizer(tmp_path / "tokenizer.json", 500, "the spaces-apart tokenizer")  # the GGUF export's checks
    backend = apart.backend_tokenizer
    gpt2 = [encoding.tokens for encoding in backend.encode_batch(spaced)]
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\s"), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert [encoding.tokens for encoding in backend.encode_batch(spaced)] == gpt2


def test_real_size_model_has_the_published_parameter_count():
    from transformers import RobertaModel

    class SixThousandTokens:  # the real tokenizer's size and RoBERTa's special ids
        pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

        def __len__(self):
            return 6000

    config = glyph_data.Config(corpus=Path("corpus"), out=Path("out"))  # the defaults are the published shape
    model = RobertaModel(glyph_data.model_config(config, SixThousandTokens()))
    assert sum(p.numel() for p in model.parameters()) == 6_407_168


def test_trained_folder_loads_in_sentence_transformers_and_equals_a_manual_mean_pool(trained, corpus):
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    texts = [t["anchor"] for t in read_triples(corpus / "test.jsonl")[:12]]
    final = trained / "final"
    assert not list(final.glob("*.py"))  # no custom code anywhere
    assert not set(runs.LOAD_LOCATION) & set(runs.read_json(final / "tokenizer_config.json"))  # nothing of this machine
    st = SentenceTransformer(str(final), device="cpu")
    expected = st.encode(texts, convert_to_numpy=True)
    tokenizer, model = AutoTokenizer.from_pretrained(final), AutoModel.from_pretrained(final).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    manual = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(manual, expected, atol=1e-5)
    assert np.allclose(np.linalg.norm(expected, axis=1), 1, atol=1e-5)
    # What the card says of an empty string: not refused (no remote code), embedded as the two special tokens, one
    # fixed vector whatever batch it is in.
    assert tokenizer("")["input_ids"] == [tokenizer.bos_token_id, tokenizer.eos_token_id]
    empty = st.encode(["", texts[0], ""], convert_to_numpy=True)
    np.testing.assert_allclose(empty[0], empty[2], atol=1e-6)
    np.testing.assert_allclose(empty[0], st.encode([""])[0], atol=1e-5)
    assert np.isfinite(empty).all() and np.abs(empty[0] - empty[1]).max() > 1e-3


def test_training_records_itself(trained):
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["mlm"]["steps"] == 12 and metrics["contrastive"]["steps"] == 12
    assert [p["step"] for p in metrics["history"]["contrastive"]["validation"]] == [6, 12]
    assert all(0 <= metrics["contrastive"]["validation"][key] <= 1 for key in ("win_rate", "mirror_flip_win_rate"))
    # The cpu preset stores float16 (half the file) and says float32, what the model computes in; the record keeps
    # the validation of the weights as stored.
    assert metrics["save_dtype"] == "float16" and 0 <= metrics["stored_validation"]["win_rate"] <= 1
    stored = load_file(trained / "final" / "model.safetensors").values()
    assert {array.dtype for array in stored if array.dtype.kind == "f"} == {np.dtype("float16")}
    assert runs.read_json(trained / "final" / "config.json")["dtype"] == "float32"
    assert (trained / "training_curve.png").stat().st_size > 0
    assert list((trained / "tensorboard").iterdir())


def test_a_finished_run_is_not_redone_and_another_config_is_refused(trained, corpus, capsys):
    before = (trained / "final" / "model.safetensors").read_bytes()
    assert glyph_train.main(["--corpus", str(corpus), "--out", str(trained), *map(str, TINY_MODEL)]) == 0
    assert "complete" in capsys.readouterr().out
    assert (trained / "final" / "model.safetensors").read_bytes() == before
    with pytest.raises(SystemExit, match="another config"):
        glyph_train.main(["--corpus", str(corpus), "--out", str(trained), *map(str, TINY_MODEL), "--seed", "3"])
    with pytest.raises(SystemExit, match="has no corpus.txt"):
        glyph_train.main(["--corpus", str(trained), "--out", str(trained / "other")])


@pytest.mark.slow
def test_training_resumes_exactly_after_kill_in_either_stage(tmp_path, corpus):
    common = ["--corpus", corpus, *TINY_MODEL]
    finish(run_tool("glyph.train", "--out", tmp_path / "straight", *common))
    killed = tmp_path / "killed"
    kill_when(run_tool("glyph.train", "--out", killed, *common), killed / "checkpoint-mlm.pt")
    kill_when(run_tool("glyph.train", "--out", killed, *common), killed / "checkpoint-contrastive.pt")
    output = finish(run_tool("glyph.train", "--out", killed, *common))
    assert "resuming contrastive" in output and "stage 1" not in output  # the finished stage is not redone
    straight = load_file(str(tmp_path / "straight" / "final" / "model.safetensors"))
    resumed = load_file(str(killed / "final" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)


def test_win_rate_and_mrr_on_hand_made_scores():
    scores = glyph_metrics.win_rates([0.9, 0.2, 0.5, 0.5], [0.1, 0.3, 0.4, 0.5], ["a", "a", "b", "b"])
    assert scores["win_rate"] == 0.5  # a tie is a loss
    assert scores["families"] == {"a": {"win_rate": 0.5, "triples": 2}, "b": {"win_rate": 0.5, "triples": 2}}
    similarity = np.array([[0.9, 0.1, 0.5, 0.0],   # own item first: rank 1
                           [0.8, 0.7, 0.9, 0.0],   # two above it: rank 3
                           [0.0, 0.0, 0.0, 0.0]])  # all tied: ranked below the ties, rank 4
    assert glyph_metrics.mrr_at_10(similarity) == pytest.approx((1 + 1 / 3 + 1 / 4) / 3)
    eleven_above = np.concatenate([[[0.0]], np.ones((1, 11))], axis=1)
    assert glyph_metrics.mrr_at_10(eleven_above) == 0.0


def test_evaluation_table_has_its_sanity_rows(tmp_path, corpus, trained):
    out = tmp_path / "eval"
    assert glyph_evaluate.main(["--corpus", str(corpus), "--out", str(out), "--retrieval-queries", "100",
                                "--encoder", f"tiny={trained / 'final'}"]) == 0
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    assert list(rows) == ["random vectors", "character 3-gram Jaccard", "tiny"]
    assert 0.4 < rows["random vectors"]["win_rate"] < 0.6  # chance
    assert rows["character 3-gram Jaccard"]["win_rate"] < 0.05  # a mutation is always closer on the surface
    assert rows["tiny"]["retrieval_gallery"] == 200
    assert "| ⇒/⇐ (" in (out / "table.md").read_text()


def test_corpus_is_not_rebuilt_and_other_options_are_refused(corpus, capsys):
    before = (corpus / "train.jsonl").stat().st_mtime_ns
    assert glyph_corpus.main(["--out", str(corpus), *map(str, TINY_CORPUS)]) == 0
    assert "complete" in capsys.readouterr().out and (corpus / "train.jsonl").stat().st_mtime_ns == before
    with pytest.raises(SystemExit, match="another config"):
        glyph_corpus.main(["--out", str(corpus), *map(str, TINY_CORPUS), "--seed", "5"])


@pytest.mark.slow
def test_export_fills_a_folder_that_loads_without_custom_code_and_in_llama_cpp(tmp_path, corpus, trained, data_dir):
    from tools.glyph import export as glyph_export

    evaluation, evaluation_b, hub = tmp_path / "eval", tmp_path / "eval-b", tmp_path / "glyph-embedder-v2"
    assert glyph_crosscheck.main(["--data-dir", str(data_dir), "--out", str(tmp_path / "b"), "--triples", "60"]) == 0
    assert glyph_evaluate.main(["--corpus", str(corpus), "--out", str(evaluation), "--retrieval-queries", "50",
                                "--encoder", f"glyph-embedder-v2={trained / 'final'}"]) == 0
    assert glyph_evaluate.main(["--corpus", str(tmp_path / "b"), "--out", str(evaluation_b), "--retrieval-queries",
                                "50", "--encoder", f"glyph-embedder-v2={trained / 'final'}",
                                "--encoder", "teacher:all-MiniLM-L6-v2"]) == 0
    export = ["--corpus", str(corpus), "--train", str(trained), "--eval", str(evaluation), "--eval-b",
              str(evaluation_b), "--out", str(tmp_path / "export"), "--to", str(hub)]
    with pytest.raises(SystemExit, match="has no row 'all-MiniLM-L6-v2'"):  # the card compares with it
        glyph_export.main(export)
    assert glyph_evaluate.main(["--corpus", str(corpus), "--out", str(evaluation), "--retrieval-queries", "50",
                                "--encoder", f"glyph-embedder-v2={trained / 'final'}",
                                "--encoder", "teacher:all-MiniLM-L6-v2"]) == 0
    wrong_b = [str(evaluation) if arg == str(evaluation_b) else arg for arg in export]  # test set (a) as (b)
    with pytest.raises(SystemExit, match="did not score test set"):
        glyph_export.main(wrong_b)
    assert glyph_export.main([*export, "--parity-strings", "40"]) == 0
    record = json.loads((tmp_path / "export" / "metrics.json").read_text())
    assert sorted(path.name for path in hub.glob("*.gguf")) == ["glyph-embedder-v2-f16.gguf"]  # f32 adds nothing
    assert record["gguf"]["f16"]["tokens_identical"] == 40 and record["gguf"]["f16"]["min_cosine"] >= 0.999
    assert record["files_sha256"] == {name: runs.file_sha256(hub / name)  # what a shipped copy is checked against
                                      for name in ("glyph-embedder-v2-f16.gguf", "model.safetensors")}
    card = (hub / "README.md").read_text()
    for folder in (evaluation, evaluation_b):  # test sets (a) and (b), each with its table and model-index results
        rows = json.loads((folder / "metrics.json").read_text())["rows"]
        assert f"| glyph-embedder-v2 | {rows['glyph-embedder-v2']['win_rate']:.3f} |" in card
        assert f"value: {round(rows['glyph-embedder-v2']['mrr_at_10'], 4)}" in card
    assert "independent generator (60 triples)" in card and "before the project had a second test set" not in card
    assert card.count("type: glyph-notation-independent") == 1  # (b) is a dataset of its own in the model-index
    assert "library_name: sentence-transformers" in card and "(training_curve.png)" in card
    assert f"`{record['embedding_space']}`** (`config.json: embedding_space`), a hash of these weights and of the " \
           "config fields that run them" in card  # the id covers the config (identity.config_hash), and says so
    assert (hub / "training_curve.png").is_file() and not list(hub.glob("*.py"))
    assert_card_from_records(tmp_path / "export", hub)
    from transformers import AutoModel

    stock = AutoModel.from_pretrained(hub)
    assert record["embedding_space"] == embedding_space(trunk_hash(stock), config=stock.config)
    assert json.loads((hub / "config.json").read_text())["embedding_space"] == record["embedding_space"]


def test_export_refuses_an_evaluation_of_other_weights(tmp_path, corpus, trained):
    from tools.glyph import export as glyph_export

    evaluation = tmp_path / "eval"
    assert glyph_evaluate.main(["--corpus", str(corpus), "--out", str(evaluation), "--retrieval-queries", "50",
                                "--encoder", "glyph-embedder-v2=teacher:all-MiniLM-L6-v2"]) == 0
    with pytest.raises(SystemExit, match="scored other weights"):
        glyph_export.main(["--corpus", str(corpus), "--train", str(trained), "--eval", str(evaluation), "--eval-b",
                           str(evaluation), "--out", str(tmp_path / "export"), "--to", str(tmp_path / "hub")])


def test_levers_score_every_lever_on_the_same_three_sets(tmp_path, monkeypatch):
    from tools.glyph import levers

    monkeypatch.setattr(levers, "LEVERS", {"recipe": ("recipe", "tiny", list(map(str, TINY_CORPUS))),
                                           "hand50": ("surface", "hand", ["--hand-share", "0.5"])})
    monkeypatch.setattr(levers, "CROSSCHECK", ["--triples", "60"])
    monkeypatch.setattr(levers, "STEP_SHARES", {"hand50": 0.5})  # half the contrastive steps of the options
    out = tmp_path / "levers"
    args = ["--out", str(out), *map(str, TINY_MODEL)]
    assert levers.main(args) == 0
    record = json.loads((out / "levers.json").read_text())
    assert record["complete"] and [row["name"] for row in record["rows"]] == ["recipe", "hand50"]
    assert [row["contrastive_steps"] for row in record["rows"]] == [12, 6]
    assert levers.contrastive_steps(["--preset", "paper"]) == 1250 and levers.contrastive_steps([]) == 1500
    assert json.loads((out / "hand50" / "corpus" / "config.json").read_text())["hand_share"] == 0.5
    assert json.loads((out / "hand50" / "corpus" / "config.json").read_text())["train_triples"] == 600
    sizes = {"validation": 60, "a": 300, "b": 60}  # every lever scored on the same sets
    for row in record["rows"]:
        for key, triples in sizes.items():
            evaluation = json.loads((out / row["name"] / f"eval-{key}" / "metrics.json").read_text())
            assert evaluation["test_triples"] == triples
            assert row[key]["win_rate"] == evaluation["rows"][row["name"]]["win_rate"]
            assert row[key]["weakest_family"]["win_rate"] <= row[key]["win_rate"]

    finished = {p: p.stat().st_mtime_ns for p in out.glob("*/*/metrics.json")}
    assert levers.main(args) == 0  # the same command again trains and scores nothing
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/metrics.json")} == finished
