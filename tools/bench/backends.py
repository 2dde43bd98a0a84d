"""Inference backends, on the same length-sorted padded batches of the caption sample: captionbert's forward through
PyTorch eager fp32 (and bf16 where measured), ONNX fp32 and ONNX int8 (tools/onnx_graphs.py: graphs exported from
the benchmark's own models, dynamic int8 weights; onnxruntime on every core), and with the arms compiled
(attach_amoe(compiled=True): torch.compile, Inductor's C++ backend), each with a random collective of the shipped
size on and off. Targets: ONNX fp32 >= 1.3x and int8 >= 2x PyTorch eager fp32 throughput; compiled arms <= 1.15x the
bare trunk's latency. Also reported: the int8 graph's lowest cosine to PyTorch fp32.
"""

import copy
import os
import statistics
import tempfile
from pathlib import Path

from transformers import AutoModel

from tools import encoders, onnx_graphs
from tools.bench.common import CAPTIONBERT, in_dtype, race, row, shipped_arm_count, with_random_collectives


def onnx_sessions(models, batches, usable_length, folder):
    """({"onnx <fp32|int8> <bare|arms>": onnxruntime session}, {kind: int8 quantisation record}): each of
    `models` ("bare", "arms") exported to ONNX in `folder`, then quantised to int8 by the export tools' recipe
    (quantize_to_cosine on `batches`)."""
    sessions, quantisations = {}, {}
    example = (batches[0][1][:2], batches[0][2][:2])
    for kind, model in models.items():
        path = folder / f"{kind}.onnx"
        onnx_graphs.export(onnx_graphs.PooledOutput(model), example, path, [onnx_graphs.SENTENCE_OUTPUT],
                           usable_length)
        quantisations[kind] = onnx_graphs.quantize_to_cosine(
            path, folder / onnx_graphs.int8_name(path.name), batches,
            lambda ids, mask, model=model: model(ids, mask).pooler_output, onnx_graphs.INT8_MIN_COSINE)
        for precision, file in (("fp32", path.name), ("int8", onnx_graphs.int8_name(path.name))):
            # Four sessions take turns here: a spinning idle one would steal the cores of the one being timed
            # (measured: ONNX int8 1.87x -> 2.46x eager fp32 with spinning off).
            sessions[f"onnx {precision} {kind}"] = onnx_graphs.session(folder / file, os.cpu_count(), spinning=False)
    return sessions, quantisations


def measure(config, setup):
    """(rows, report part). captionbert's forward over the whole sample on the same length-sorted padded batches
    (tools/encoders.padded_batches), the bare trunk and the trunk with a random collective of the shipped size, through
    each backend: PyTorch eager fp32 (and bf16 where measured), ONNX fp32 and int8 (graphs exported from these very
    models by tools/onnx_graphs.py, the int8 ones by the export tools' recipe, quantize_to_cosine on the sample; run by
    onnxruntime on every core), and the arms through torch.compile (attach_amoe(compiled=True); its bare trunk is the
    eager one, as the trunk is not compiled). The trunk is the shipped one (a copy of setup's random captionbert in
    the tiny smoke test): which MatMuls int8 must keep float depends on its trained weights. The rows: each backend's
    bare throughput vs PyTorch eager fp32 (targets: ONNX fp32 >= 1.3x, int8 >= 2x) and, in each backend, the arms'
    latency vs its own bare trunk (target for the compiled arms: <= 1.15x); the int8 graph's mean cosine to PyTorch
    fp32 on the sample. The part: the seconds under seconds/backends, the int8 quantisations under backends."""
    arms = shipped_arm_count() or config.arms
    bare = (copy.deepcopy(setup.captionbert) if config.tiny
            else AutoModel.from_pretrained(CAPTIONBERT, trust_remote_code=True)).eval()
    models = {"bare": bare, "arms": with_random_collectives(bare, [arms], config.seed)[arms],
              "compiled arms": with_random_collectives(bare, [arms], config.seed, compiled=True)[arms]}
    batches = encoders.padded_batches(setup.tokenizer, setup.texts, bare.usable_length, config.batch_size)

    def torch_forward(model, dtype):
        return in_dtype(lambda: [model(ids, mask) for _, ids, mask in batches], dtype)

    def onnx_forward(graph):
        return lambda: [onnx_graphs.run(graph, ids, mask) for _, ids, mask in batches]

    contenders = {f"eager {dtype} {kind}": torch_forward(models[kind], dtype)
                  for dtype in setup.dtypes for kind in ("bare", "arms")}
    with tempfile.TemporaryDirectory() as folder:
        sessions, quantisations = onnx_sessions({kind: models[kind] for kind in ("bare", "arms")}, batches,
                                                bare.usable_length, Path(folder))
    contenders.update({name: onnx_forward(graph) for name, graph in sessions.items()})
    contenders["compiled fp32 arms"] = torch_forward(models["compiled arms"], "fp32")
    latency = race(contenders, config.repeats, "backends")
    median = {name: statistics.median(times) for name, times in latency.items()}
    reference = median["eager fp32 bare"]
    rows = [row(f"forward: {name.removesuffix(' bare')} vs PyTorch eager fp32 (throughput)", "s", median[name],
                reference, reference / median[name], target)
            for name, target in (("onnx fp32 bare", (">=", 1.3)), ("onnx int8 bare", (">=", 2.0)),
                                 *((("eager bf16 bare", None),) if "bf16" in setup.dtypes else ()))]
    for backend in (*(f"eager {dtype}" for dtype in setup.dtypes), "onnx fp32", "onnx int8", "compiled fp32"):
        on, off = median[f"{backend} arms"], median[f"{backend.replace('compiled', 'eager')} bare"]
        rows.append(row(f"forward {backend}: {arms} arm(s) on vs bare trunk (latency)", "s", on, off, on / off,
                        ("<=", 1.15) if backend == "compiled fp32" else None))
    cosine = quantisations["bare"]["search"][-1]["parity"]["mean_cosine"]
    rows.append(row(f"ONNX int8 vs PyTorch fp32: mean cosine on the sample (bare trunk, "
                    f"{len(quantisations['bare']['float_matmuls'])} MatMuls float)", "cosine", cosine, 1.0, cosine,
                    (">=", onnx_graphs.INT8_MIN_COSINE)))
    return rows, {"backends": {"arms": arms, "int8": quantisations}, "seconds": {"backends": latency}}
