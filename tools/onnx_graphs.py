"""ONNX graphs of the bundle's encoders, shared by tools/captionbert/export_onnx.py and tools/glyph/export_onnx.py:
export through torch.onnx's dynamo exporter (torch.export, then onnxscript), int8 through onnxruntime's dynamic
quantiser, and a graph's parity with the PyTorch model it came from.

Every graph takes `input_ids` and `attention_mask` (int64, (B, T): any batch size, any length up to the model's
limit) and emits `sentence_embedding` (B, E), L2-normalised: what the model's own encode returns. The files go where
sentence-transformers looks for ONNX weights, `<folder>/onnx/model.onnx`, and the int8 graph beside it as
`model_qint8_avx512_vnni.onnx`: QInt8 weights, activations quantised per call, no reduced range (sentence-transformers'
name for that recipe; it runs on any x86 CPU, fastest where the CPU has VNNI). Two choices make int8 hold up on a
trained trunk (quantize_to_cosine): weights get one scale per output channel, and the few MatMuls whose inputs carry
outlier features (peaks a hundred times their RMS, in the feed-forward down projections) stay float32, as few as
keep the mean cosine to PyTorch at the target."""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from tools import runs

INPUT_NAMES = ["input_ids", "attention_mask"]
SENTENCE_OUTPUT = "sentence_embedding"
INT8_SUFFIX = "_qint8_avx512_vnni"
INT8_MIN_COSINE = 0.995  # the int8 graph's mean cosine to PyTorch float32 (quantize_to_cosine), by default


class PooledOutput(nn.Module):
    """A model whose forward(input_ids, attention_mask) returns a pooler_output (captionbert: the normalised sentence
    embedding (B, E)) as a module returning that tensor alone: what its graph computes."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask).pooler_output


def locations(folder, out, record):
    """(where the graphs go, the run record's folder) of an export of `folder`: `out` and `record`, or by default
    <folder>/onnx (where sentence-transformers looks) and runs/onnx/<folder name>."""
    return out or Path(folder) / "onnx", record or runs.ROOT / "runs" / "onnx" / Path(folder).name


def int8_name(graph_name):
    """The file name of the int8 graph quantised from `graph_name` (model.onnx -> model_qint8_avx512_vnni.onnx)."""
    stem = Path(graph_name).stem
    return f"{stem}{INT8_SUFFIX}.onnx"


def export(module, example, path, output_names, max_length):
    """Write the ONNX graph of module(input_ids, attention_mask) -> outputs named `output_names` to `path`, its batch
    size and length left free (length up to max_length). example: (input_ids, attention_mask) of at least 2 rows and
    2 tokens (torch.export fixes a size of 0 or 1 into the graph). Returns the seconds it took."""
    started = time.perf_counter()
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=max_length)
    dims = {name: {0: batch, 1: length} for name in INPUT_NAMES}
    with torch.no_grad():
        program = torch.onnx.export(module.eval(), tuple(example), input_names=INPUT_NAMES, output_names=output_names,
                                    dynamic_shapes=dims, dynamo=True, verbose=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    return time.perf_counter() - started


def prepare(source, target):
    """Write `source` as the quantiser sees it to `target`: onnxruntime's pre-processing (shape inference, constant
    folding and graph optimisation)."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as scratch:
        # The exporter annotates intermediate shapes that ONNX's shape inference (which the quantiser runs on the
        # file) contradicts around the packed tokens; they are optional, so they are dropped and inferred afresh.
        graph = onnx.load(str(source))
        del graph.graph.value_info[:]
        unannotated = Path(scratch) / "unannotated.onnx"
        onnx.save(graph, str(unannotated))
        # onnxruntime's symbolic shape inference cannot follow the data-dependent number of packed tokens.
        quant_pre_process(str(unannotated), str(target), skip_symbolic_shape=True)


def weighted_matmuls(graph):
    """{node name: its activation input} of every MatMul / Gemm of the onnx ModelProto `graph` whose second input
    is a constant weight: the nodes dynamic quantisation turns int8."""
    constants = {initializer.name for initializer in graph.graph.initializer}
    return {node.name: node.input[0] for node in graph.graph.node
            if node.op_type in ("MatMul", "Gemm") and node.input[1] in constants}


def outlier_ratios(prepared, batches):
    """{node name: peak |x| / RMS of x} for the activation x entering each weighted MatMul of the graph at
    `prepared`, over the padded batches [(rows, input_ids, attention_mask)]. Dynamic int8 quantises x with one scale
    per call, set by its peak: where a few outlier features reach a hundred times the typical magnitude, the typical
    values round to a handful of levels."""
    import onnx
    import onnxruntime

    graph = onnx.load(str(prepared))
    inputs = weighted_matmuls(graph)
    watched = sorted(set(inputs.values()))
    outputs = {output.name for output in graph.graph.output}
    graph.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                              for name in watched if name not in outputs)
    probe = onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    peak, squares, count = dict.fromkeys(watched, 0.0), dict.fromkeys(watched, 0.0), dict.fromkeys(watched, 0)
    for _, input_ids, attention_mask in batches:
        for name, value in zip(watched, probe.run(watched, feed(input_ids, attention_mask))):
            peak[name] = max(peak[name], float(np.abs(value).max()))
            squares[name] += float(np.square(value, dtype=np.float64).sum())
            count[name] += value.size
    return {node: peak[x] / max((squares[x] / count[x]) ** 0.5, 1e-12) for node, x in inputs.items()}


def quantize(prepared, target, float_nodes=()):
    """Write the int8 graph of the prepared graph (prepare) to `target`: dynamic quantisation of every weighted
    MatMul (QInt8 weights, one scale per output channel; activations quantised per call) except the nodes named in
    `float_nodes`, which stay float32. ValueError if the quantiser did not do exactly that."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    matmuls = set(weighted_matmuls(onnx.load(str(prepared), load_external_data=False)))
    # The quantiser turns each Gemm into a MatMul named <name>_MatMul and an Add before it quantises the MatMuls, so
    # both names are excluded.
    excluded = [name for node in float_nodes for name in (node, f"{node}_MatMul")]
    quantize_dynamic(Path(prepared), Path(target), op_types_to_quantize=["MatMul"],
                     weight_type=QuantType.QInt8, per_channel=True, reduce_range=False, nodes_to_exclude=excluded)
    # What stayed float is read from the written graph's nodes: a quantised MatMul becomes a MatMulInteger. The
    # exporter stores equal weights once, and where a float node shares its weight with a quantised one, the float
    # node reads that weight dequantised from int8 (its activation, where the outliers are, stays float).
    written = onnx.load(str(target), load_external_data=False)
    kept = {node.name.removesuffix("_MatMul") for node in written.graph.node if node.op_type in ("MatMul", "Gemm")}
    wrong = (kept & matmuls) ^ set(float_nodes)
    if wrong:
        raise ValueError(f"onnxruntime's quantiser did not keep float exactly {sorted(float_nodes)}: {sorted(wrong)}")


def quantize_to_cosine(source, target, batches, reference, min_cosine, max_float_share=0.5):
    """Write the int8 graph of `source` to `target` with the fewest float32 MatMuls that keep its sentence
    embeddings' mean cosine to `reference` (see parity) on `batches` at least `min_cosine`: every weighted MatMul
    int8 first, then, while below, one more kept float, in order of its input's outlier ratio (outlier_ratios), up to
    max_float_share of them. Returns {"seconds", "min_mean_cosine", "met", "float_matmuls" (node: outlier ratio),
    "search" (each try's float count and parity)}."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        prepare(source, prepared)
        ratios = outlier_ratios(prepared, batches)
        ranked = sorted(ratios, key=ratios.get, reverse=True)[:int(len(ratios) * max_float_share)]
        search = []
        for kept in range(len(ranked) + 1):
            quantize(prepared, target, ranked[:kept])
            search.append({"float_matmuls": kept, "parity": parity(session(target), batches, reference)})
            print(f"  int8 with {kept} MatMul(s) float: mean cosine {search[-1]['parity']['mean_cosine']:.5f} "
                  f"(target {min_cosine})", flush=True)
            if search[-1]["parity"]["mean_cosine"] >= min_cosine:
                break
    return {"seconds": time.perf_counter() - started, "min_mean_cosine": min_cosine,
            "met": search[-1]["parity"]["mean_cosine"] >= min_cosine,
            "float_matmuls": {node: ratios[node] for node in ranked[:kept]}, "search": search}


def session(path, threads=None, spinning=True):
    """An onnxruntime CPU session of the graph at `path` (threads: intra-op threads, None = onnxruntime's default;
    spinning False: its idle threads sleep at once instead of spinning for the next call, which matters only where
    several sessions or libraries take turns on the same cores)."""
    import onnxruntime

    if not Path(path).is_file():
        raise FileNotFoundError(f"ONNX graph {path} not found: export it first (make onnx)")
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def feed(input_ids, attention_mask):
    """A graph's inputs for a padded batch (torch or numpy (B, T))."""
    return {"input_ids": np.asarray(input_ids, dtype=np.int64),
            "attention_mask": np.asarray(attention_mask, dtype=np.int64)}


def run(graph, input_ids, attention_mask, output=SENTENCE_OUTPUT):
    """One output of the session `graph` on a padded batch (torch or numpy (B, T)), as a float32 numpy array."""
    return graph.run([output], feed(input_ids, attention_mask))[0]


def parity(graph, batches, reference):
    """How far the graph's sentence embeddings lie from `reference`'s on padded batches [(rows, input_ids,
    attention_mask)] (tools/encoders.padded_batches):
    reference(input_ids, attention_mask) -> (B, E) torch tensor. Returns {"texts", "max_abs_diff", "min_cosine",
    "mean_cosine"} over every row of every batch."""
    differences, cosines = [], []
    for _, input_ids, attention_mask in batches:
        with torch.inference_mode():
            expected = reference(input_ids, attention_mask).float().numpy()
        got = run(graph, input_ids, attention_mask)
        differences.append(np.abs(got - expected).max(axis=1))
        cosines.append((got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1))
    differences, cosines = np.concatenate(differences), np.concatenate(cosines)
    return {"texts": int(len(cosines)), "max_abs_diff": float(differences.max()), "min_cosine": float(cosines.min()),
            "mean_cosine": float(cosines.mean())}


def export_checked(module, example, folder, name, output_names, max_length, batches, min_cosine):
    """Export `module` to folder/name and quantise it beside (int8_name; quantize_to_cosine with `min_cosine`), then
    check both on `batches` (tools/encoders.padded_batches) against module's sentence embedding (its
    `sentence_embedding` output: the only one, or the one of that name). Returns {file name: {"dtype", "bytes",
    "sha256", "seconds", "parity"}, the int8 entry with "quantisation" (quantize_to_cosine's report)}."""
    index = output_names.index(SENTENCE_OUTPUT)

    def reference(input_ids, attention_mask):
        outputs = module(input_ids, attention_mask)
        return outputs[index] if isinstance(outputs, tuple) else outputs

    source, target = Path(folder) / name, Path(folder) / int8_name(name)
    seconds = export(module, example, source, output_names, max_length)
    quantisation = quantize_to_cosine(source, target, batches, reference, min_cosine)
    return {source.name: {"dtype": "float32", "bytes": source.stat().st_size, "sha256": runs.file_sha256(source),
                          "seconds": seconds, "parity": parity(session(source), batches, reference)},
            target.name: {"dtype": "int8", "bytes": target.stat().st_size, "sha256": runs.file_sha256(target),
                          "seconds": quantisation["seconds"], "parity": quantisation["search"][-1]["parity"],
                          "quantisation": quantisation}}


def report(graphs, max_abs_diff):
    """Print a line per graph (export_checked's entries); SystemExit if a float32 graph's embeddings lie farther than
    max_abs_diff from PyTorch's in some component; a warning where an int8 graph missed its mean cosine."""
    for file, entry in graphs.items():
        parity = entry["parity"]
        print(f"{file}: {entry['bytes'] / 1e6:.1f} MB, max |diff| {parity['max_abs_diff']:.2e}, cosine min "
              f"{parity['min_cosine']:.6f} mean {parity['mean_cosine']:.6f} (vs PyTorch float32 on {parity['texts']} "
              "texts)")
        if "quantisation" in entry:
            quantisation = entry["quantisation"]
            print(f"  int8 except {len(quantisation['float_matmuls'])} float32 MatMul(s) (inputs with the largest "
                  f"outliers): {', '.join(quantisation['float_matmuls']) or 'none'}")
            if not quantisation["met"]:
                print(f"WARNING: {file} misses the mean cosine {quantisation['min_mean_cosine']} even with "
                      f"{len(quantisation['float_matmuls'])} MatMuls float (--int8-min-cosine)", file=sys.stderr)
    drifted = {file: entry["parity"]["max_abs_diff"] for file, entry in graphs.items()
               if entry["dtype"] == "float32" and entry["parity"]["max_abs_diff"] > max_abs_diff}
    if drifted:
        raise SystemExit(f"float32 graphs differ from PyTorch beyond --max-abs-diff {max_abs_diff}: {drifted}")
