"""tools/train_geolip.py, tools/evaluate_geolip.py and tools/export_geolip.py end to end on a tiny frozen BERT base
and a tiny teacher (real long descriptions); the retrieval measures on known cases."""

import dataclasses
import json
import shutil

import pytest
import torch
from transformers import AutoModel

from conftest import ROOT, assert_card_from_records, tiny_teacher
from tools import evaluate_geolip, export_geolip, train_geolip


def test_tiny_run_trains_evaluates_and_exports_a_loadable_folder(tmp_path, data_dir):
    base, teacher = tiny_teacher(tmp_path / "base", 32, seed=3), tiny_teacher(tmp_path / "teacher", 48, seed=4)
    out = tmp_path / "run"
    argv = ["--out", str(out), "--data-dir", str(data_dir), "--base", str(base), "--teacher", str(teacher),
            "--validation-texts", "24", "--flickr-captions", "16", "--steps", "4", "--batch-size", "4",
            "--validate-every", "2", "--checkpoint-every", "2", "--log-every", "1", "--init-texts", "16",
            "--cv-target-texts", "3", "--cv-samples", "4", "--fusion-layers", "2", "--memory-slots", "4",
            "--memory-heads", "2"]
    assert train_geolip.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["validation_texts"] >= 24 and metrics["m_acc"]["gallery"] == metrics["validation_texts"]
    for row in ("memory", "truncated", "segment_mean"):
        assert 0 <= metrics["m_acc"][row] <= 1
    init = metrics["projector_init"]
    assert init["cosine_after"] > init["cosine_before"]  # Procrustes beats a random projector
    assert metrics["cv_target"]["texts"] == 3 and metrics["cv_target"]["value"] > 0
    assert [p["step"] for p in metrics["history"]["validation"]] == [2, 4]
    assert all(set(p) >= {"info_nce", "procrustes", "cv", "loss"} for p in metrics["history"]["train"])
    assert (out / "training_curve.png").stat().st_size > 0 and list((out / "tensorboard").iterdir())
    checkpoint = torch.load(out / "checkpoint-memory.pt", weights_only=False)
    assert checkpoint["step"] == 4 and not any(key.startswith("base.") for key in checkpoint["model"])
    model = AutoModel.from_pretrained(out / "final", trust_remote_code=True)
    assert model.encode(["a dog runs on the beach"]).shape == (1, 32)
    base_weights = AutoModel.from_pretrained(base).state_dict()
    assert all(torch.equal(value, model.base.state_dict()[key]) for key, value in base_weights.items())  # frozen
    assert train_geolip.main(argv) == 0  # complete: nothing to do

    # the evaluation scores final/ against both baselines on the same held-out gallery
    assert evaluate_geolip.main(["--train", str(out), "--out", str(tmp_path / "eval")]) == 0
    evaluation = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluation["gallery"] == metrics["validation_texts"] and set(evaluation["rows"]) == set(train_geolip.ROWS)
    assert evaluation["rows"]["memory"]["m_acc"] == pytest.approx(metrics["m_acc"]["memory"], abs=1e-6)
    assert evaluation["covered_tokens"] == 452 and evaluation["held_out_segments"]["mean"] > 1

    # the export fills a Hub folder that holds only the folder's own code, then writes the card from the records
    folder = tmp_path / "hub"
    folder.mkdir()
    for path in (ROOT / "geolip-clip-ctx576").glob("*.py"):
        shutil.copy(path, folder)
    assert export_geolip.main(["--train", str(out), "--eval", str(tmp_path / "eval"), "--out",
                               str(tmp_path / "export"), "--to", str(folder), "--parity-texts", "4"]) == 0
    export = json.loads((tmp_path / "export" / "metrics.json").read_text())
    assert export["max_difference"] <= 1e-5 and export["hidden_size"] == 32 and export["teacher_dim"] == 48
    assert export["clip_l_trainable"] == 36_868_614 + 768 * 768  # the readout's residual projection
    card = (folder / "README.md").read_text()
    assert f"| {evaluation['rows']['memory']['m_acc']:.3f} |" in card and "not the CLIP-L model" in card
    assert "452 distinct tokens" in card and (folder / "model.safetensors").exists()
    assert_card_from_records(tmp_path / "export", folder)
    assert export["embedding_space"] == AutoModel.from_pretrained(folder, trust_remote_code=True).embedding_space
    (tmp_path / "eval" / "metrics.json").write_text(json.dumps({**evaluation, "weights_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="other weights"):
        export_geolip.main(["--train", str(out), "--eval", str(tmp_path / "eval"), "--out", str(tmp_path / "x"),
                            "--to", str(folder)])


def test_retrieval_measures_on_known_cases():
    gallery = torch.eye(4)
    perfect = evaluate_geolip.retrieval(gallery * 3, gallery)
    assert perfect == {"m_acc": 1.0, "recall_at_5": 1.0, "mrr": 1.0, "mean_cosine": pytest.approx(1.0)}
    shifted = evaluate_geolip.retrieval(gallery.roll(1, dims=0), gallery)  # every query finds another row first
    assert shifted["m_acc"] == 0 and shifted["recall_at_5"] == 1.0 and shifted["mean_cosine"] == 0
    assert shifted["mrr"] == pytest.approx(0.5)  # its own row ties with the other two zeros: rank 2


def test_the_model_is_built_in_eval_mode(tmp_path):
    """The projector's Procrustes initialisation and the baselines' maps embed before the loop sets modes: the
    base's dropout must already be off then."""
    config = train_geolip.Config(out=tmp_path, base=str(tiny_teacher(tmp_path / "base", 32, seed=3)),
                                 fusion_layers=2, memory_slots=4, memory_heads=2)
    model = train_geolip.build_model(config, teacher_dim=48)
    assert not any(module.training for module in model.modules())


def test_the_teacher_cache_is_used_only_for_the_same_teacher_precision_and_texts(tmp_path):
    calls = []

    class CountingTeacher:
        def encode(self, texts):
            calls.append(list(texts))
            return torch.randn(len(texts), 4).numpy()

    shared = tmp_path / "shared" / "teacher.npy"
    config = train_geolip.Config(out=tmp_path / "a", teacher="t", teacher_cache=shared)
    first = train_geolip.teacher_embeddings(config, CountingTeacher(), ["one", "two"])
    other_run = train_geolip.Config(out=tmp_path / "b", teacher="t", teacher_cache=shared)
    assert (train_geolip.teacher_embeddings(other_run, CountingTeacher(), ["one", "two"]) == first).all()
    assert len(calls) == 1  # the second run read the shared cache
    for changed in (dataclasses.replace(config, teacher_bf16=False), dataclasses.replace(config, teacher="u")):
        train_geolip.teacher_embeddings(changed, CountingTeacher(), ["one", "two"])
    train_geolip.teacher_embeddings(config, CountingTeacher(), ["one", "three"])
    assert len(calls) == 4  # another precision, teacher or text list is embedded again
    assert train_geolip.cached_teacher_embeddings(config, ["one", "two"]) is None  # the file now holds the last
