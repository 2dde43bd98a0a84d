"""ONNX graphs of the bundle's encoders, shared by tools/captionbert/export_onnx.py and tools/glyph/export_onnx.py:
export through torch.onnx's dynamo exporter (torch.export, then onnxscript), int8 through onnxruntime's dynamic
quantiser, and a graph's parity with the PyTorch model it came from.

Every graph takes `input_ids` and `attention_mask` (int64, (B, T): any batch size, any length up to the model's
limit) and emits `sentence_embedding` (B, E), L2-normalised: what the model's own encode returns. The files go where
sentence-transformers looks for ONNX weights, `<folder>/onnx/model.onnx`, and the int8 graph beside it as
`model_qint8_avx512_vnni.onnx`: QInt8 weights, activations quantised per call, no reduced range (sentence-transformers'
name for that recipe; it runs on any x86 CPU, fastest where the CPU has VNNI).
"""

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


def quantize(source, target):
    """Write the int8 graph of `source` to `target`: onnxruntime's pre-processing (shape inference, graph
    optimisation), then dynamic quantisation of every MatMul with a constant weight (QInt8, per tensor). Returns the
    seconds it took."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        # The exporter annotates intermediate shapes that ONNX's shape inference (which the quantiser runs on the
        # file) contradicts around the packed tokens; they are optional, so they are dropped and inferred afresh.
        graph = onnx.load(str(source))
        del graph.graph.value_info[:]
        unannotated, prepared = Path(scratch) / "unannotated.onnx", Path(scratch) / "prepared.onnx"
        onnx.save(graph, str(unannotated))
        # onnxruntime's symbolic shape inference cannot follow the data-dependent number of packed tokens.
        quant_pre_process(str(unannotated), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(prepared, Path(target), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                         per_channel=False, reduce_range=False)
    return time.perf_counter() - started


def session(path, threads=None):
    """An onnxruntime CPU session of the graph at `path` (threads: intra-op threads, None = onnxruntime's default)."""
    import onnxruntime

    if not Path(path).is_file():
        raise FileNotFoundError(f"ONNX graph {path} not found: export it first (make onnx)")
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(graph, input_ids, attention_mask, output=SENTENCE_OUTPUT):
    """One output of the session `graph` on a padded batch (torch or numpy (B, T)), as a float32 numpy array."""
    feed = {"input_ids": np.asarray(input_ids, dtype=np.int64), "attention_mask": np.asarray(attention_mask,
                                                                                            dtype=np.int64)}
    return graph.run([output], feed)[0]


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


def export_checked(module, example, folder, name, output_names, max_length, batches):
    """Export `module` to folder/name and quantise it beside (int8_name), then check both on `batches`
    (tools/encoders.padded_batches) against module's sentence embedding (its `sentence_embedding` output: the only
    one, or the one of that name). Returns {file name: {"dtype", "bytes", "sha256", "seconds", "parity"}}."""
    index = output_names.index(SENTENCE_OUTPUT)

    def reference(input_ids, attention_mask):
        outputs = module(input_ids, attention_mask)
        return outputs[index] if isinstance(outputs, tuple) else outputs

    seconds = {name: export(module, example, Path(folder) / name, output_names, max_length)}
    seconds[int8_name(name)] = quantize(Path(folder) / name, Path(folder) / int8_name(name))
    entries = {}
    for file, dtype in ((name, "float32"), (int8_name(name), "int8")):
        path = Path(folder) / file
        entries[file] = {"dtype": dtype, "bytes": path.stat().st_size, "sha256": runs.file_sha256(path),
                         "seconds": seconds[file], "parity": parity(session(path), batches, reference)}
    return entries


def report(graphs, max_abs_diff):
    """Print a line per graph (export_checked's entries); SystemExit if a float32 graph's embeddings lie farther than
    max_abs_diff from PyTorch's in some component."""
    for file, entry in graphs.items():
        print(f"{file}: {entry['bytes'] / 1e6:.1f} MB, max |diff| {entry['parity']['max_abs_diff']:.2e}, min cosine "
              f"{entry['parity']['min_cosine']:.6f} (vs PyTorch float32 on {entry['parity']['texts']} texts)")
    drifted = {file: entry["parity"]["max_abs_diff"] for file, entry in graphs.items()
               if entry["dtype"] == "float32" and entry["parity"]["max_abs_diff"] > max_abs_diff}
    if drifted:
        raise SystemExit(f"float32 graphs differ from PyTorch beyond --max-abs-diff {max_abs_diff}: {drifted}")
