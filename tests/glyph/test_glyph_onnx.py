"""tools/glyph/export_onnx.py: the glyph encoder's ONNX graphs against PyTorch on held-out glyph strings (the tool's
gate: 1e-5 per component in float32), and read back through tools/encoders.py as the glyph evaluation scores them."""

import numpy as np
import onnx
import pytest
from transformers import AutoModel, AutoTokenizer

from helpers import N_POSITIONS
from tools import encoders, onnx_graphs, runs
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
            entry["parity"]["mean_cosine"] >= onnx_graphs.INT8_MIN_COSINE
    quantisation = metrics["graphs"]["model_qint8_avx512_vnni.onnx"]["quantisation"]
    assert quantisation["met"] and quantisation["search"][-1]["parity"] == \
        metrics["graphs"]["model_qint8_avx512_vnni.onnx"]["parity"]


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


@pytest.fixture(scope="module")
def prepared(exported, tmp_path_factory):
    """(the exported float32 graph as the quantiser sees it, its weighted MatMuls)."""
    path = tmp_path_factory.mktemp("prepared") / "prepared.onnx"
    onnx_graphs.prepare(exported[0] / "onnx" / "model.onnx", path)
    return path, onnx_graphs.weighted_matmuls(onnx.load(str(path)))


def float_matmuls(path):
    return {node.name.removesuffix("_MatMul") for node in onnx.load(str(path)).graph.node
            if node.op_type in ("MatMul", "Gemm")}


def test_quantize_keeps_float_exactly_the_named_matmuls(prepared, tmp_path):
    path, matmuls = prepared
    kept = sorted(matmuls)[:2]
    onnx_graphs.quantize(path, tmp_path / "int8.onnx", kept)
    assert len(matmuls) > 4
    assert float_matmuls(tmp_path / "int8.onnx") & set(matmuls) == set(kept)


def test_quantize_keeps_float_a_matmul_whose_weight_another_shares(tmp_path):
    """The ONNX exporter stores equal weights once (the AMOE graph's two arms' cat_28): keeping one of the two nodes
    float must neither fail nor quantise it."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "shared")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "shared"], ["h"], name="first"),
         helper.make_node("MatMul", ["h", "shared"], ["y"], name="second")], "shared_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "shared.onnx")
    for kept in (["first"], ["second"], []):
        onnx_graphs.quantize(tmp_path / "shared.onnx", tmp_path / "int8.onnx", kept)
        assert float_matmuls(tmp_path / "int8.onnx") == set(kept)


def test_the_search_keeps_the_largest_outliers_float_until_the_target(exported, prepared, tmp_path):
    """An unreachable target: one more float MatMul per try, largest input outliers first, up to half of them, and
    the run says it missed; a target the all-int8 graph meets: one try, nothing float."""
    folder = exported[0]
    module = export_onnx.SentenceGraph(AutoModel.from_pretrained(folder).eval())
    batches = encoders.padded_batches(AutoTokenizer.from_pretrained(folder), STRINGS, N_POSITIONS, 2)
    ratios = onnx_graphs.outlier_ratios(prepared[0], batches)
    assert set(ratios) == set(prepared[1]) and min(ratios.values()) > 1

    def reference(input_ids, attention_mask):
        return module(input_ids, attention_mask)[1]

    missed = onnx_graphs.quantize_to_cosine(folder / "onnx" / "model.onnx", tmp_path / "a.onnx", batches, reference,
                                            min_cosine=2.0)
    half = len(ratios) // 2
    assert not missed["met"] and [step["float_matmuls"] for step in missed["search"]] == list(range(half + 1))
    assert list(missed["float_matmuls"]) == sorted(ratios, key=ratios.get, reverse=True)[:half]
    met = onnx_graphs.quantize_to_cosine(folder / "onnx" / "model.onnx", tmp_path / "b.onnx", batches, reference,
                                         min_cosine=0.5)
    assert met["met"] and met["float_matmuls"] == {} and len(met["search"]) == 1
