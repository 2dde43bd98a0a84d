"""tools/train_geolip.py end to end on a tiny frozen BERT base and a tiny teacher (real long descriptions), and its
resume."""

import json

import torch
from transformers import AutoModel

from conftest import tiny_teacher
from tools import train_geolip


def test_tiny_training_run_records_m_acc_and_writes_a_loadable_folder(tmp_path, data_dir):
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
