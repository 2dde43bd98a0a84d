"""tools/glyph/export_onnx.py: the glyph encoder's ONNX graphs against PyTorch on held-out glyph strings (the tool's
gate: 1e-5 per component in float32), and read back through tools/encoders.py as the glyph evaluation scores them."""

import numpy as np
import pytest

from helpers import N_POSITIONS
from tools import encoders, runs
from tools.glyph import export_onnx

STRINGS = ["retrieval_layer⊕compression ⇒ ¬attribution_edges↑", "a→b→c⇒d", "x",
           " ".join(f"node_{i}⊕edge" for i in range(40))]  # the last one is longer than the model's positions


@pytest.fixture(scope="module")
def exported(tiny_roberta, tmp_path_factory):
    """(the tiny sentence-transformers folder, its SentenceTransformer, the export's metrics)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    root = tmp_path_factory.mktemp("glyph-onnx")
    transformer = modules.Transformer(str(tiny_roberta[0]), max_seq_length=N_POSITIONS)
    model = SentenceTransformer(modules=[transformer, modules.Pooling(64, "mean"), modules.Normalize()], device="cpu")
    model.save(str(root / "glyph"))
    assert export_onnx.main(["--folder", str(root / "glyph"), "--record", str(root / "record"), "--parity-strings",
                             "30", "--batch-size", "8"]) == 0
    return root / "glyph", model, runs.read_json(root / "record" / "metrics.json")


def test_both_graphs_are_written_and_the_float32_one_equals_pytorch(exported):
    folder, _, metrics = exported
    assert set(metrics["graphs"]) == {"model.onnx", "model_qint8_avx512_vnni.onnx"}
    assert metrics["texts"] == 30
    for name, entry in metrics["graphs"].items():
        assert entry["sha256"] == runs.file_sha256(folder / "onnx" / name) and entry["parity"]["texts"] == 30
        assert entry["parity"]["max_abs_diff"] <= 1e-5 if entry["dtype"] == "float32" else \
            entry["parity"]["min_cosine"] > 0.9


@pytest.mark.parametrize("output", ["sentence_embedding", "last_hidden_state"])
def test_the_graph_encodes_like_sentence_transformers(exported, output):
    """Either output gives the folder's embedding: the graph's own pooling, or its token states pooled here."""
    folder, model, _ = exported
    options = encoders.EncodeOptions(batch_size=3, show_progress=False)  # max_length: the tokenizer's
    _, graph = encoders.load(str(folder / "onnx" / "model.onnx"), options, onnx_output=output)
    assert graph.pooled == (output == "sentence_embedding")
    assert np.abs(graph.encode(STRINGS) - model.encode(STRINGS)).max() < 1e-5


def test_a_folder_that_is_not_a_sentence_transformers_model_is_refused(tiny_roberta):
    with pytest.raises(SystemExit, match="not a built glyph folder"):
        export_onnx.main(["--folder", str(tiny_roberta[0])])
