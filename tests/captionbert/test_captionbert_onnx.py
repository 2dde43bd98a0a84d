"""tools/captionbert/export_onnx.py: the ONNX graphs of captionbert, bare and with arms, against PyTorch on real texts
of mixed length (the tool's gate: 1e-5 per component in float32), and the graphs read back through tools/encoders.py
the way the evaluation scores them."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tools import encoders, registry, runs
from tools.captionbert import export_onnx

INT8 = {"model.onnx": "model_qint8_avx512_vnni.onnx", "model_amoe.onnx": "model_amoe_qint8_avx512_vnni.onnx"}
TEXTS = ["A dog runs across the grass.", "Two children play on a red slide near a river bank in the sun.", "hi"]


@pytest.fixture(scope="module")
def exported(module_model_with_arms, data_dir, tmp_path_factory):
    folder, model = module_model_with_arms
    record = tmp_path_factory.mktemp("record")
    assert export_onnx.main(["--folder", str(folder), "--record", str(record), "--data-dir", str(data_dir),
                             "--parity-texts", "24", "--batch-size", "8"]) == 0
    return folder, model, runs.read_json(record / "metrics.json")


def test_every_graph_is_written_and_the_float32_ones_equal_pytorch(exported):
    folder, _, metrics = exported
    assert set(metrics["graphs"]) == {*INT8, *INT8.values()}
    assert metrics["texts"] == 24 and metrics["max_tokens"] > 128  # the long half of the texts is long
    for name, entry in metrics["graphs"].items():
        assert entry["sha256"] == runs.file_sha256(folder / "onnx" / name)
        assert entry["arms"] == (["paraphrase", "equiv"] if "amoe" in name else [])
        assert entry["parity"]["texts"] == 24
        if entry["dtype"] == "float32":
            assert entry["parity"]["max_abs_diff"] <= 1e-5
        else:
            assert entry["quantisation"]["met"]
            assert entry["parity"]["mean_cosine"] >= entry["quantisation"]["min_mean_cosine"] == 0.995
    assert metrics["graphs"]["model_amoe.onnx"]["embedding_space"] != metrics["graphs"]["model.onnx"]["embedding_space"]


def test_the_graphs_encode_like_the_model_through_the_evaluation_encoders(exported):
    folder, model, _ = exported
    options = encoders.EncodeOptions(batch_size=2, show_progress=False)
    _, bare = encoders.load(str(folder / "onnx" / "model.onnx"), options)  # tokenizer and output found
    _, with_arms = encoders.load(str(folder / "onnx" / "model_amoe.onnx"), options)
    assert bare.pooled and np.abs(bare.encode(TEXTS) - model.encode(TEXTS)).max() < 1e-5
    model.attach_amoe()
    try:
        arms_on = model.encode(TEXTS)
    finally:
        model.detach_amoe()
    assert np.abs(with_arms.encode(TEXTS) - arms_on).max() < 1e-5
    assert np.abs(arms_on - model.encode(TEXTS)).max() > 1e-3  # the arms change the embedding, in both


def test_a_folder_without_weights_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no model.safetensors"):
        export_onnx.main(["--folder", str(tmp_path)])


def test_the_cards_onnx_snippet_runs_on_an_exported_folder(exported, tmp_path):
    """The card's onnxruntime block, run as a user would beside the folder, embeds as the evaluation's encoder of
    the same graph does."""
    folder, _, _ = exported
    card = (registry.CAPTIONBERT.path / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", card, flags=re.S) if "onnxruntime" in block)
    (tmp_path / "captionbert-8192-v2").symlink_to(folder)
    program = "import json\n" + snippet + "print(json.dumps(embeddings.tolist()))"
    result = subprocess.run([sys.executable, "-P", "-c", program], cwd=tmp_path, capture_output=True, text=True,
                            check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    embeddings = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    _, graph = encoders.load(str(folder / "onnx" / "model_qint8_avx512_vnni.onnx"),
                             encoders.EncodeOptions(show_progress=False))
    assert np.abs(embeddings - graph.encode(["a dog runs on the beach"])).max() < 1e-6
