"""Score encoders on STS-8 (tools/sts.py: the eight English STS test sets, Spearman of cosine vs gold, plus the
geometry gauges on held-out captions and the in-domain gauge: same-image retrieval among the Flickr8k test images,
recall@1 and MRR).

Usage:
    python -m tools.captionbert.evaluate --encoder teacher:all-MiniLM-L6-v2
    python -m tools.captionbert.evaluate --encoder captionbert-8192-v2 --encoder teacher:all-mpnet-base-v2 \
        --out runs/eval/x
    python -m tools.captionbert.evaluate --encoder model.onnx --onnx-tokenizer tok_folder \
        --onnx-output last_hidden_state
`--encoder` takes any spec tools/encoders.py understands and may repeat; `NAME=SPEC` names its row NAME
(e.g. `--encoder captionbert-8192-v2=runs/demo/distill/final`). Writes metrics.json and results.md into
the run folder (default runs/eval/<timestamp>/) and prints the table. metrics.json grows by one row per encoder, so
rerunning an interrupted run with the same options into the same --out scores only the encoders it had not reached
(a row is kept only if its encoder's weights still have the sha256 it was scored with).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import encoders, runs
from tools.sts import (TASKS, flickr8k_captions, gauge_captions, load_task, markdown_table,
                       same_image_retrieval, score)


@dataclass
class Config:
    encoders: list[str] = field(default_factory=list, metadata={
        "aliases": ["--encoder"], "action": "extend", "required": True,
        "help": "encoder spec (tools/encoders.py), repeatable; scored in order"})
    data_dir: Path = field(default_factory=runs.default_data_dir, metadata={
        "help": "the shared data folder (../shared/data or BUNDLE_DATA_DIR)"})
    out: Path | None = field(default=None, metadata={"help": "run folder (default runs/eval/<timestamp>)"})
    tasks: list[str] = field(default_factory=lambda: list(TASKS), metadata={
        "choices": TASKS, "help": "tasks to score (default all)"})
    batch_size: int = 64  # texts per forward pass
    max_length: int = field(default=512, metadata={"help": "token limit (plain HF / ONNX encoders)"})
    gauge_captions: int = field(default=1000, metadata={
        "help": "held-out captions for self_cos / erank (0 skips the gauges)"})
    onnx_tokenizer: Path | None = field(default=None, metadata={"help": "tokenizer folder for an .onnx encoder"})
    onnx_output: str | None = field(default=None, metadata={"help": "token-state output name of an .onnx encoder"})


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    config.out = config.out or runs.timestamped(runs.ROOT / "runs", "eval")
    if not (config.data_dir / "sts").is_dir():
        raise SystemExit(f"no sts/ folder in --data-dir {config.data_dir}")

    task_pairs = {task: load_task(config.data_dir, task) for task in config.tasks}
    captions = gauge_captions(config.data_dir, config.gauge_captions) if config.gauge_captions else []
    print("pairs per task:", {task: len(pairs) for task, pairs in task_pairs.items()})
    options = encoders.EncodeOptions(batch_size=config.batch_size, max_length=config.max_length)

    earlier = scored_before(config)
    metrics = {}
    with runs.RunRecord(config.out, config, "captionbert.evaluate"):
        for entry in config.encoders:
            label, _, spec = entry.rpartition("=")
            name, encoder = encoders.load(spec, options, config.onnx_tokenizer, config.onnx_output)
            name = label or name
            identity = {"spec": spec, "kind": encoder.kind, "max_length": encoder.max_length,
                        "weights_sha256": encoders.weights_hash(encoder.source)}
            row = earlier.get(name, {})
            if {key: row.get(key) for key in identity} == identity:
                metrics[name] = row
                print(f"{name}: mean {row['mean']:.4f}, scored earlier by this run (the same weights), kept")
                continue
            metrics[name] = {**identity, **score(encoder, task_pairs, captions)}
            if captions:  # the in-domain gauge: same-image retrieval among the Flickr8k test images
                retrieval = same_image_retrieval(encoder, flickr8k_captions(config.data_dir, "test"))
                metrics[name] |= {"flickr8k_recall@1": retrieval["recall@1"], "flickr8k_mrr": retrieval["mrr"]}
            print(f"{name}: mean {metrics[name]['mean']:.4f} ({metrics[name]['encode_seconds']} s)")
            runs.write_json(config.out / "metrics.json", metrics)  # after each encoder, so a long run shows progress
        table = markdown_table(metrics, config.tasks)
        (config.out / "results.md").write_text(table)
    print(table)
    print(f"wrote {config.out / 'metrics.json'} and {config.out / 'results.md'}")
    return 0


def scored_before(config):
    """{row name: row} of an interrupted run of the same config in config.out (metrics.json written after each
    encoder), or {} when there is none or it ran with other options."""
    return runs.read_json(config.out / "metrics.json") if runs.run_state(config.out, config) == "complete" else {}


if __name__ == "__main__":
    sys.exit(main())
