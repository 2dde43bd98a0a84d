"""The STS-8 harness: raw-format loaders, every encoder kind, and the published all-MiniLM-L6-v2 scores."""

import json
import shutil

import numpy as np
import pytest

from tools import encoders, sts
from tools.captionbert import evaluate

# Pairs scored per task (../shared/data/README.md).
PAIRS = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186, "STS-B": 1379,
         "SICK-R": 9927, "BIOSSES": 100}
SCALE = {"SICK-R": (1, 5), "BIOSSES": (0, 4)}

# all-MiniLM-L6-v2's published MTEB scores (Spearman of cosine).
MINILM_PUBLISHED = {"STS12": .7237, "STS13": .8060, "STS14": .7560, "STS15": .8539, "STS16": .7899, "STS-B": .8203,
                    "SICK-R": .7758, "BIOSSES": .8125, "mean": .7923}


@pytest.mark.parametrize("task", sts.TASKS)
def test_loaders_read_every_scored_pair(data_dir, task):
    pairs = sts.load_task(data_dir, task)
    assert len(pairs) == PAIRS[task]
    low, high = SCALE.get(task, (0, 5))
    assert all(low <= gold <= high for _, _, gold in pairs)
    assert all(a.strip() and b.strip() for a, b, _ in pairs)
    # Only BIOSSES has a (quoted) sentence holding a tab; elsewhere a tab would mean a mis-split row.
    assert sum("\t" in a + b for a, b, _ in pairs) == (1 if task == "BIOSSES" else 0)


def test_gauge_captions_are_distinct_test_images(data_dir):
    captions = sts.gauge_captions(data_dir, 1000)
    assert len(captions) == 1000 and len(set(captions)) > 990


def test_flickr8k_splits_hold_five_captions_per_image_and_do_not_share_images(data_dir):
    splits = {split: sts.flickr8k_captions(data_dir, split) for split in ("train", "dev", "test")}
    assert {split: len(images) for split, images in splits.items()} == {"train": 6000, "dev": 1000, "test": 1000}
    assert all(len(captions) == 5 for images in splits.values() for captions in images.values())
    assert not set(splits["dev"]) & set(splits["test"]) and not set(splits["train"]) & set(splits["dev"])
    assert sts.gauge_captions(data_dir, 3) == [captions[0] for captions in list(splits["test"].values())[:3]]


def test_same_image_retrieval_ranks_each_images_own_caption():
    vectors = {"a": [1.0, 0, 0], "b": [0, 1.0, 0], "c": [0, 0, 1.0]}

    class ByImage:  # embeds a caption as its image's one-hot vector, with a2 and b2 swapped when asked
        def __init__(self, swap):
            self.swap = swap

        def encode(self, texts):
            image = {"a2": "b", "b2": "a"} if self.swap else {}
            return np.array([vectors[image.get(text, text[0])] for text in texts])

    captions = {image: [f"{image}1", f"{image}2"] for image in vectors}
    assert sts.same_image_retrieval(ByImage(False), captions) == {"recall@1": 1.0, "mrr": 1.0, "images": 3}
    swapped = sts.same_image_retrieval(ByImage(True), captions)  # a and b rank their own caption last (of 3)
    assert swapped["recall@1"] == pytest.approx(1 / 3) and swapped["mrr"] == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)


def test_two_folders_of_one_name_with_different_code_are_refused_in_one_process(tiny_captionbert, tmp_path):
    """transformers caches remote code by the folder's name: the second folder would silently run the first one's
    code. The same code under one name loads (two builds of one model); other code under that name is refused."""
    folder, _ = tiny_captionbert
    options = encoders.EncodeOptions(show_progress=False)
    encoders.load(str(folder), options)
    same = shutil.copytree(folder, tmp_path / "same" / folder.name)
    encoders.load(str(same), options)
    other = shutil.copytree(folder, tmp_path / "other" / folder.name)
    modeling = other / "modeling_captionbert.py"
    modeling.write_text(modeling.read_text().replace("embedding = l2_normalize(", "embedding = -l2_normalize("))
    with pytest.raises(ValueError, match=f"both named {folder.name!r} but their code differs"):
        encoders.load(str(other), options)


@pytest.mark.slow
def test_encoder_kinds_agree(tiny_captionbert):
    texts = ["A man is playing a guitar.", "A man plays the guitar.", "The stock market fell sharply today.", "x"]
    options = encoders.EncodeOptions(batch_size=2, show_progress=False)
    # The same MiniLM weights as a sentence-transformers folder and as a plain mean-pooled transformers encoder.
    _, st = encoders.load("teacher:all-MiniLM-L6-v2", options)
    plain = encoders.HFEncoder(encoders.teachers.minilm_l6_folder(), options)
    np.testing.assert_allclose(st.encode(texts), plain.encode(texts), atol=1e-5)

    for teacher, width in (("paraphrase-MiniLM-L3-v2", 384), ("all-mpnet-base-v2", 768)):
        _, encoder = encoders.load(f"teacher:{teacher}", options)
        embeddings = encoder.encode(texts)
        assert embeddings.shape == (4, width)
        np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
        assert embeddings[0] @ embeddings[1] > embeddings[0] @ embeddings[2] + 0.3  # paraphrase beats unrelated

    folder, model = tiny_captionbert
    _, remote = encoders.load(str(folder), options)
    assert remote.kind == "remote-code"
    np.testing.assert_allclose(remote.encode(texts), model.encode(texts), atol=1e-6)

    with pytest.raises(ValueError, match="unknown teacher"):
        encoders.load("teacher:bert-base-uncased")
    with pytest.raises(FileNotFoundError):
        encoders.load("no/such/folder/here")


@pytest.mark.slow
def test_all_minilm_l6_v2_reproduces_its_published_scores(data_dir, tmp_path):
    assert evaluate.main(["--encoder", "teacher:all-MiniLM-L6-v2", "--data-dir", str(data_dir),
                          "--out", str(tmp_path), "--gauge-captions", "200"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())["all-MiniLM-L6-v2"]
    for task, published in MINILM_PUBLISHED.items():
        assert metrics[task] == pytest.approx(published, abs=0.003), task
    assert 0 < metrics["self_cos"] < 0.3 and 10 < metrics["erank"] < 200
    assert "| all-MiniLM-L6-v2 | 0.72" in (tmp_path / "results.md").read_text()
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "ok" and run["versions"]["transformers"]


@pytest.mark.slow
def test_model2vec_distills_a_local_teacher_with_the_pinned_transformers(tmp_path, monkeypatch):
    """model2vec.distill (installed without its `distill` extra, which pins transformers<5.4) runs on the local
    all-MiniLM-L6-v2 folder offline, caches the static model by the teacher's weights, and embeds sensibly."""
    monkeypatch.setattr(encoders.teachers, "CACHE", tmp_path)
    texts = ["A man is playing a guitar.", "A man plays the guitar.", "The stock market fell sharply today."]
    name, encoder = encoders.load("model2vec:all-MiniLM-L6-v2", encoders.EncodeOptions(show_progress=False))
    assert name == "model2vec(all-MiniLM-L6-v2)" and encoder.kind == "model2vec"
    assert encoder.source.parent == tmp_path and (encoder.source / "model.safetensors").is_file()
    embeddings = encoder.encode(texts)
    assert embeddings.shape == (3, 256)  # model2vec's PCA to 256 dimensions
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    assert embeddings[0] @ embeddings[1] > embeddings[0] @ embeddings[2] + 0.2
    cached = encoders.load("model2vec:all-MiniLM-L6-v2", encoders.EncodeOptions(show_progress=False))[1]
    np.testing.assert_array_equal(cached.encode(texts), embeddings)  # from the cache: the same table
    with pytest.raises(FileNotFoundError, match="neither a PyPI teacher"):
        encoders.load("model2vec:no-such-teacher")


def test_an_interrupted_evaluation_scores_only_the_encoders_it_had_not_reached(
        tiny_captionbert, data_dir, tmp_path, monkeypatch):
    folder, _ = tiny_captionbert
    out = tmp_path / "eval"
    argv = ["--encoder", f"first={folder}", "--encoder", f"second={folder}", "--data-dir", str(data_dir),
            "--out", str(out), "--tasks", "BIOSSES", "--gauge-captions", "0"]
    scored = []

    def score(encoder, task_pairs, captions, fail_at=None):
        scored.append(encoder)
        if len(scored) == fail_at:
            raise KeyboardInterrupt
        return sts.score(encoder, task_pairs, captions)

    monkeypatch.setattr(evaluate, "score", lambda *args: score(*args, fail_at=2))
    with pytest.raises(KeyboardInterrupt):
        evaluate.main(argv)
    assert list(json.loads((out / "metrics.json").read_text())) == ["first"]

    scored.clear()
    monkeypatch.setattr(evaluate, "score", score)
    assert evaluate.main(argv) == 0
    assert len(scored) == 1  # only "second"
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics) == ["first", "second"] and metrics["first"]["mean"] == metrics["second"]["mean"]

    metrics["first"]["weights_sha256"] = "0" * 64  # as if its weights had been rebuilt since
    (out / "metrics.json").write_text(json.dumps(metrics))
    scored.clear()
    assert evaluate.main(argv) == 0
    rescored = json.loads((out / "metrics.json").read_text())["first"]
    assert len(scored) == 1 and rescored["weights_sha256"] == metrics["second"]["weights_sha256"]
    assert rescored["mean"] == metrics["second"]["mean"]

    with pytest.raises(SystemExit, match="another config"):
        evaluate.main([*argv, "--batch-size", "8"])
