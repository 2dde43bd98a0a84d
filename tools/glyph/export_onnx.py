"""Export glyph-embedder-v2 to ONNX, in float32 and int8, checked against PyTorch on generated glyph strings.

Usage:
    python -m tools.glyph.export_onnx          # the shipped folder: writes glyph-embedder-v2/onnx/
    python -m tools.glyph.export_onnx --folder runs/demo/glyph/export/glyph-embedder-v2

What it writes into <folder>/onnx/ (--out), where sentence-transformers looks: model.onnx and
model_qint8_avx512_vnni.onnx (tools/onnx_graphs.py). Each takes input_ids and attention_mask and emits
last_hidden_state (the token states, what sentence-transformers' ONNX loader pools) and sentence_embedding (the
folder's own pooling: masked mean, L2-normalised). The graphs are not shipped in git (the bundle's size budget); the
card shows how to run them with onnxruntime.

Checks: the float32 graph's embeddings must equal PyTorch's (float32, the same padded batches) within --max-abs-diff
per component on --parity-strings glyph strings (anchors, paraphrases and mutations of triples from the corpus's
claim generator, tools/glyph/generate.py). The int8 graph keeps float32 the fewest MatMuls that hold its mean cosine
to PyTorch at --int8-min-cosine on the same strings (onnx_graphs.quantize_to_cosine); its win-rate cost: python -m
tools.glyph.evaluate --corpus <corpus> --out <run> --encoder glyph-embedder-v2=glyph-embedder-v2
--encoder int8=glyph-embedder-v2/onnx/model_qint8_avx512_vnni.onnx. The run record goes to --record.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

from torch import nn
from transformers import AutoModel, AutoTokenizer

from shared_modeling.pooling import l2_normalize, masked_mean_pool
from tools import encoders, onnx_graphs, registry, runs
from tools.glyph.generate import ClaimGenerator, Lexicon


@dataclass
class Config:
    folder: Path = registry.GLYPH.path  # a glyph folder (the shipped one, or a build)
    out: Path | None = None  # where the graphs go; default <folder>/onnx
    record: Path | None = None  # the run folder; default runs/onnx/<folder name>
    parity_strings: int = 300  # generated strings the graphs are checked on: anchors, paraphrases, mutations
    batch_size: int = 32  # strings per padded batch in the check
    max_abs_diff: float = 1e-5  # float32 graph vs PyTorch, per embedding component
    int8_min_cosine: float = onnx_graphs.INT8_MIN_COSINE  # int8 vs PyTorch: mean cosine to keep (quantize_to_cosine)


class SentenceGraph(nn.Module):
    """The folder's Transformer -> mean Pooling -> Normalize as one module: (input_ids, attention_mask) ->
    (token states (B, T, D), sentence embedding (B, D))."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, D)
        return states, l2_normalize(masked_mean_pool(states, attention_mask))


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if not (config.folder / "model.safetensors").is_file() or not (config.folder / "modules.json").is_file():
        raise SystemExit(f"{config.folder} holds no model.safetensors and modules.json: not a built glyph folder")
    if config.parity_strings < 3 or config.max_abs_diff <= 0 or not 0 < config.int8_min_cosine <= 1:
        raise SystemExit("--parity-strings must be at least 3, --max-abs-diff positive and --int8-min-cosine in "
                         "(0, 1]")
    config.out, config.record = onnx_graphs.locations(config.folder, config.out, config.record)
    return config


def main(argv=None):
    config = parse_config(argv)
    tokenizer = AutoTokenizer.from_pretrained(config.folder)
    graph = SentenceGraph(AutoModel.from_pretrained(config.folder).eval())
    generator = ClaimGenerator(Lexicon.load(), seed=1)
    triples = [generator.triple() for _ in range(-(-config.parity_strings // 3))]
    strings = [text for triple in triples for text in (triple.anchor, triple.positive, triple.negative)]
    strings = strings[:config.parity_strings]
    max_length = graph.encoder.config.max_position_embeddings - graph.encoder.config.pad_token_id - 1
    batches = encoders.padded_batches(tokenizer, strings, max_length, config.batch_size)
    example = encoders.padded_batches(tokenizer, strings[:2], max_length, 2)[0][1:]
    with runs.RunRecord(config.record, config, "glyph.export_onnx"):
        print(f"exporting {config.out / 'model.onnx'}")
        graphs = onnx_graphs.export_checked(graph, example, config.out, "model.onnx",
                                            ["last_hidden_state", onnx_graphs.SENTENCE_OUTPUT], max_length, batches,
                                            config.int8_min_cosine)
        runs.write_json(config.record / "metrics.json", {"texts": len(strings),
                                                         "max_tokens": int(batches[0][1].shape[1]), "graphs": graphs})
    onnx_graphs.report(graphs, config.max_abs_diff)
    return 0


if __name__ == "__main__":
    sys.exit(main())
