"""Benchmark captionbert-8192-v2 on this machine's CPU against a transformers.BertModel of identical shape, and the
other two models' fast paths against their plain ones.

Both captionbert and BertModel get random weights (speed does not depend on them) and the same inputs: a seeded
sample of Flickr8k captions, tokenized by captionbert's tokenizer (tools/bench/common.py builds them once; every
family deep-copies the models it runs, so none depends on what another did). One run measures these families, in
this order (each module's docstring says what it measures and its target):

  throughput   forward and end-to-end encode, captionbert vs BertModel and the naive HF pipeline, fp32 and bf16
               (where the CPU computes bf16), and encode's GFLOP/s vs this machine's matmul peak
  long_input   one 8,192-token input, SDPA vs eager attention: peak extra memory and time, each in a fresh process
  extraction   teacher extraction of a corpus sample, length-bucketed vs naive padded batches
  training     a student training step, captionbert vs BertModel, and fused vs per-tensor Adam
  amoe         encode latency with AMOE arms on (the shipped collective's size, and --arms) and off vs the bare
               trunk, the arms' arithmetic floor, and every-arm-off embeddings equal to the bare trunk's
  glyph        glyph-embedder-v2's embeddings/s in llama.cpp (GGUF f32, f16) vs PyTorch
  geolip       geolip's one batched base call vs a call per segment, and its encode latency vs text length
  backends     captionbert's forward through ONNX fp32 / int8 and compiled arms vs PyTorch eager

The table and report.json (with the raw timings) go to runs/bench/<timestamp>/ beside config.json and run.json.
main builds what the families share once (common.build_setup), then runs each chosen family's measure(config, setup)
in the order of FAMILIES, each returning its table rows and its part of the report, and writes the report.

Usage:
    python -m tools.bench                                                   # the full run, a few minutes
    python -m tools.bench --only amoe backends                              # those families alone
    python -m tools.bench --captions 16 --repeats 1 --long-tokens 256 --corpus-texts 32 --train-steps 1 --tiny \\
        --glyph-texts 32 --geolip-texts 4 --batch-size 8                    # seconds: small shape, smoke test
"""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tools import runs
from tools.bench import (amoe_arms, backends, extraction, geolip_segments, glyph_gguf, long_input, throughput,
                         training_steps)
from tools.bench.common import build_setup

# The families, in the order a run measures them: name -> measure(config, setup) -> (rows, report part).
FAMILIES = {"throughput": throughput.measure, "long_input": long_input.measure, "extraction": extraction.measure,
            "training": training_steps.measure, "amoe": amoe_arms.measure, "glyph": glyph_gguf.measure,
            "geolip": geolip_segments.measure, "backends": backends.measure}


@dataclass
class Config:
    data_dir: Path = field(default=runs.default_data_dir(), metadata={
        "help": "shared data folder (holds captions/flickr8k/Flickr8k.token.txt)"})
    out: Path = field(default=runs.ROOT / "runs", metadata={
        "help": "parent of bench/<timestamp>/, where the report goes"})
    captions: int = field(default=256, metadata={
        "help": "captions to sample (seeded) from Flickr8k for the throughput comparisons"})
    batch_size: int = field(default=64, metadata={"help": "rows per batch, both models, both comparisons"})
    repeats: int = field(default=5, metadata={
        "help": "timed repeats per comparison after one warm-up (the median is reported)"})
    long_tokens: int = field(default=8192, metadata={"help": "length of the single long input (long_input)"})
    peak_size: int = field(default=2048, metadata={
        "help": "side of the square matmul that measures the machine's peak (throughput)"})
    tiny: bool = field(default=False, metadata={
        "help": "small shape for both models (hidden 64, 2 layers, 2 heads, FFN 128): a smoke test in seconds"})
    corpus_texts: int = field(default=1024, metadata={
        "help": "texts sampled (seeded) from the default corpus (extraction, training)"})
    train_steps: int = field(default=4, metadata={"help": "training steps per timed repeat (training)"})
    arms: int = field(default=3, metadata={
        "help": "arms of the second collective (amoe; the first has the shipped roster's size)"})
    glyph_texts: int = field(default=1024, metadata={"help": "generated glyph strings embedded (glyph)"})
    geolip_texts: int = field(default=16, metadata={"help": "long descriptions (geolip)"})
    seed: int = field(default=0, metadata={"help": "caption sample, weights and the long input"})
    only: list[str] = field(default_factory=list, metadata={
        "choices": list(FAMILIES), "metavar": "FAMILY",
        "help": f"run these families alone, e.g. --only amoe backends (default: all; one of {', '.join(FAMILIES)}; "
                "they run in this order)"})


def parse_config(argv):
    """The Config of the command line `argv` (sys.argv when None)."""
    return runs.parse_config(Config, argv, __doc__, prog="python -m tools.bench")


def opening_report(setup):
    """The report's first keys: the load average now, BertModel's attention, the caption sample's token counts,
    captionbert's trunk linear weights and encode GFLOP, an empty "seconds" for the families to fill, the dtypes
    measured and why bf16 was left out (None when it was not)."""
    return {"load_average_at_start": os.getloadavg(),
            "bert_attn_implementation": setup.bert.config._attn_implementation,
            "captions": {"count": len(setup.texts), "real_tokens": sum(setup.lengths),
                         "padded_tokens_given_order": sum(b["input_ids"].numel() for b in setup.batches),
                         "padded_tokens_sorted": sum(len(b) * max(b) for b in setup.sorted_lengths)},
            "trunk_linear_weights": setup.linear_weights, "encode_model_gflop": setup.flops / 1e9, "seconds": {},
            "dtypes": setup.dtypes,
            "bf16_left_out": None if "bf16" in setup.dtypes else "this CPU has neither AVX-512 BF16 nor AMX: emulated"}


def merge(report, part):
    """Adds a family's report part to `report` in place, nested dicts key by key (so seconds/<dtype> can gain amoe
    after forward and encode); returns None."""
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(report.get(key), dict):
            merge(report[key], value)
        else:
            report[key] = value


def format_table(report):
    """The printed table of report["rows"] (ours, reference, ratio, target, verdict), the targets met and the load
    averages at start and end, as one string."""
    rows = report["rows"]
    header = f"{'measurement':<60} {'unit':>10} {'ours':>9} {'reference':>9} {'ratio':>6} {'target':>7}  verdict"
    lines = [header, "-" * len(header)]
    for r in rows:
        verdict = "-" if r["met"] is None else "met" if r["met"] else "MISSED"
        lines.append(f"{r['name']:<60} {r['unit']:>10} {r['ours']:>9.3g} {r['reference']:>9.3g} "
                     f"{r['ratio']:>6.3g} {r['target'] or '':>7}  {verdict}")
    lines.append(f"targets met: {sum(r['met'] is True for r in rows)} of {sum(r['met'] is not None for r in rows)}")
    lines.append(f"load average (1 min): {report['load_average_at_start'][0]:.2f} at start, "
                 f"{report['load_average_at_end'][0]:.2f} at end, on {os.cpu_count()} cores "
                 f"(above the core count, other processes shared the CPU and timings are noisy)")
    return "\n".join(lines)


def main(argv=None):
    """Runs the families of FAMILIES (or --only those) in its order on one shared setup, prints the table and writes
    report.json and table.txt beside the run record; returns 0."""
    config = parse_config(argv)
    torch.set_num_threads(os.cpu_count())
    with runs.RunRecord(runs.timestamped(config.out, "bench"), config, "bench") as record:
        setup = build_setup(config)
        report, rows = opening_report(setup), []
        for name, measure in FAMILIES.items():
            if not config.only or name in config.only:
                family_rows, part = measure(config, setup)
                rows += family_rows
                merge(report, part)
        report.update(load_average_at_end=os.getloadavg(), rows=rows)
        table = format_table(report)
        print(table)
        runs.write_json(record.folder / "report.json", report)
        (record.folder / "table.txt").write_text(table + "\n")
    print(f"wrote {record.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
