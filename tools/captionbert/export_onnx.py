"""Export captionbert-8192-v2 to ONNX: the bare trunk, and the trunk with its shipped AMOE collective (every arm on)
as a second graph, each in float32 and int8, checked against PyTorch on real texts of mixed length.

Usage:
    python -m tools.captionbert.export_onnx          # the shipped folder: writes captionbert-8192-v2/onnx/
    python -m tools.captionbert.export_onnx --folder runs/demo/captionbert/export/captionbert-8192-v2 --no-arms

What it writes (tools/onnx_graphs.py: inputs input_ids and attention_mask, output sentence_embedding, the
L2-normalised embedding model.encode returns), into <folder>/onnx/ (--out), where sentence-transformers looks:
    model.onnx, model_qint8_avx512_vnni.onnx                the bare trunk
    model_amoe.onnx, model_amoe_qint8_avx512_vnni.onnx      the trunk with the collective in <folder>/amoe/
The graphs are not shipped in git (the bundle's size budget); the card shows how to run them with onnxruntime.

Checks: each float32 graph's embeddings must equal PyTorch eager's (float32, the same padded batches) within
--max-abs-diff per component on --parity-texts real texts (half STS-B test sentences, half held-out ImageInWords
descriptions up to the model's trained length). Each int8 graph keeps float32 the fewest MatMuls (those whose inputs
carry the largest outliers) that hold its mean cosine to PyTorch at --int8-min-cosine on the same texts
(onnx_graphs.quantize_to_cosine; a warning if even half of them float cannot); its STS-8 cost:
    python -m tools.captionbert.evaluate --encoder captionbert-8192-v2 \
        --encoder int8=captionbert-8192-v2/onnx/model_qint8_avx512_vnni.onnx --gauge-captions 0
The run record (config, run, metrics with each file's bytes and sha256, the int8 search) goes to --record.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoModel

from tools import corpus, encoders, onnx_graphs, registry, runs
from tools.sts import load_task


@dataclass
class Config:
    folder: Path = registry.CAPTIONBERT.path  # a captionbert folder (the shipped one, or a build)
    out: Path | None = None  # where the graphs go; default <folder>/onnx
    record: Path | None = None  # the run folder; default runs/onnx/<folder name>
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    arms: bool = True  # also export the trunk with the collective in <folder>/amoe/ (when there is one)
    parity_texts: int = 256  # real texts the graphs are checked on: half short, half long
    batch_size: int = 32  # texts per padded batch in the check
    max_abs_diff: float = 1e-5  # float32 graph vs PyTorch eager, per embedding component
    int8_min_cosine: float = onnx_graphs.INT8_MIN_COSINE  # int8 vs PyTorch: mean cosine to keep (quantize_to_cosine)


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if not (config.folder / "model.safetensors").is_file():
        raise SystemExit(f"{config.folder} holds no model.safetensors: not a built captionbert folder")
    if config.parity_texts < 4 or config.max_abs_diff <= 0 or not 0 < config.int8_min_cosine <= 1:
        raise SystemExit("--parity-texts must be at least 4, --max-abs-diff positive and --int8-min-cosine in (0, 1]")
    config.out, config.record = onnx_graphs.locations(config.folder, config.out, config.record)
    return config


def parity_texts(config):
    """Half STS-B test sentences, half held-out ImageInWords descriptions (long: most run past 128 tokens)."""
    sentences = sorted({text for pair in load_task(config.data_dir, "STS-B") for text in pair[:2]})
    long_texts = corpus.split_imageinwords(config.data_dir)[1]
    half = config.parity_texts // 2
    return sentences[:half] + long_texts[:config.parity_texts - half]


def main(argv=None):
    config = parse_config(argv)
    model = AutoModel.from_pretrained(config.folder, trust_remote_code=True).eval()
    has_collective = any((config.folder / "amoe").glob("*/dispatch.safetensors"))
    graphs = {"model.onnx": False, **({"model_amoe.onnx": True} if config.arms and has_collective else {})}
    texts = parity_texts(config)
    batches = encoders.padded_batches(model.tokenizer, texts, model.usable_length, config.batch_size)
    example = encoders.padded_batches(model.tokenizer, texts[:2], model.usable_length, 2)[0][1:]
    metrics = {"texts": len(texts), "max_tokens": int(batches[0][1].shape[1]), "graphs": {}}
    with runs.RunRecord(config.record, config, "captionbert.export_onnx"):
        for name, with_arms in graphs.items():
            roster = model.attach_amoe()._amoe.dispatch.roster if with_arms else []
            print(f"exporting {config.out / name} (arms: {', '.join(roster) or 'none'})")
            written = onnx_graphs.export_checked(onnx_graphs.PooledOutput(model), example, config.out, name,
                                                 [onnx_graphs.SENTENCE_OUTPUT], model.usable_length, batches,
                                                 config.int8_min_cosine)
            for entry in written.values():
                entry.update(arms=roster, embedding_space=model.embedding_space)
            metrics["graphs"].update(written)
            if with_arms:
                model.detach_amoe()
        runs.write_json(config.record / "metrics.json", metrics)
    onnx_graphs.report(metrics["graphs"], config.max_abs_diff)
    return 0


if __name__ == "__main__":
    sys.exit(main())
