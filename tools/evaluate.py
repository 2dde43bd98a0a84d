"""STS-8 harness: Spearman of cosine vs gold on the eight English STS test sets, plus geometry gauges.

Tasks (MTEB's STS suite, test splits, every genre of a year pooled into one score): STS12, STS13, STS14, STS15,
STS16, STS-B (STSBenchmark test), SICK-R, BIOSSES. Mean = unweighted average of the eight. Gauges on a held-out
caption sample (the first caption of each Flickr8k test image): self_cos (mean cosine between distinct rows) and
erank (participation ratio of the centred embeddings); erank_sts is the same participation ratio out of domain, on
as many STS-8 sentences (a fixed random draw).

Usage:
    python -m tools.evaluate --encoder teacher:all-MiniLM-L6-v2
    python -m tools.evaluate --encoder captionbert-8192-v2 --encoder teacher:all-mpnet-base-v2 --out runs/eval/x
    python -m tools.evaluate --encoder model.onnx --onnx-tokenizer tok_folder --onnx-output last_hidden_state
`--encoder` takes any spec tools/encoders.py understands and may repeat; `NAME=SPEC` names its row NAME
(e.g. `--encoder captionbert-8192-v2=runs/demo/distill/final`). Writes metrics.json and results.md into
the run folder (default runs/eval/<timestamp>/) and prints the table.
"""

import argparse
import csv
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from shared_modeling.geometry import erank, self_cos
from tools import encoders, runs

TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "BIOSSES")


@dataclass
class Config:
    encoders: list[str] = field(default_factory=list)  # encoder specs (tools/encoders.py), scored in order
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    out: Path | None = None  # run folder; default runs/eval/<timestamp>
    tasks: list[str] = field(default_factory=lambda: list(TASKS))  # subset of TASKS to score
    batch_size: int = 64  # texts per forward pass
    max_length: int = 512  # token limit for plain HF / ONNX encoders
    gauge_captions: int = 1000  # held-out captions for self_cos / erank (0 to skip)
    onnx_tokenizer: Path | None = None  # tokenizer folder for an .onnx encoder
    onnx_output: str | None = None  # token-state output name of an .onnx encoder


# ---- the eight test sets, each in its raw release format ----------------------------------------------------------

def _read_lines(path):
    """Lines split on \\n only: str.splitlines would also split inside a sentence on form feeds or U+2028."""
    return path.read_text(encoding="utf-8-sig").removesuffix("\n").split("\n")


def _semeval_year(folder, input_glob, gold_name):
    """SemEval STS 2012-2016: input lines s1<TAB>s2[<TAB>source...], a gold score per line; blank gold = unscored."""
    pairs = []
    inputs = sorted(folder.glob(input_glob))
    if not inputs:
        raise FileNotFoundError(f"no {input_glob} in {folder}")
    for input_path in inputs:
        gold_path = input_path.with_name(gold_name(input_path.name))
        input_lines, gold_lines = _read_lines(input_path), _read_lines(gold_path)
        if len(input_lines) != len(gold_lines):
            raise ValueError(f"{input_path.name}: {len(input_lines)} inputs but {len(gold_lines)} gold lines")
        for line, gold in zip(input_lines, gold_lines):
            if gold.strip():
                first, second = line.split("\t")[:2]
                pairs.append((first, second, float(gold)))
    return pairs


def stsb_split(folder, split="test"):
    """[(s1, s2, score)] of one STS Benchmark split. Rows: genre, file, year, id, score, s1, s2 [, source columns]:
    quoting off, first 7 fields."""
    with open(folder / f"sts-{split}.csv", encoding="utf-8") as handle:
        return [(row[5], row[6], float(row[4])) for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _sick_r(folder):
    with open(folder / "SICK.txt", encoding="utf-8") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [(row["sentence_A"], row["sentence_B"], float(row["relatedness_score"])) for row in rows]


def _biosses(folder):
    """Header row; standard quoting, since one quoted field holds a tab."""
    with open(folder / "all.tsv", encoding="utf-8") as handle:
        return [(row["sentence1"], row["sentence2"], float(row["score"])) for row in csv.DictReader(handle, delimiter="\t")]


def load_task(data_dir, task):
    """[(sentence1, sentence2, gold score)] of one task."""
    sts = Path(data_dir) / "sts"
    if task in ("STS12", "STS13", "STS14", "STS15"):
        return _semeval_year(sts / task, "STS.input.*.txt", lambda name: name.replace("STS.input.", "STS.gs."))
    if task == "STS16":
        return _semeval_year(sts / task, "STS2016.input.*.txt", lambda name: name.replace(".input.", ".gs."))
    if task == "STS-B":
        return stsb_split(sts / "STSBenchmark")
    if task == "SICK-R":
        return _sick_r(sts / "SICK-R")
    if task == "BIOSSES":
        return _biosses(sts / "BIOSSES")
    raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")


def gauge_captions(data_dir, count):
    """The first caption of each Flickr8k test image, in file order (distinct images, so unrelated sentences)."""
    flickr = Path(data_dir) / "captions" / "flickr8k"
    test_images = set((flickr / "Flickr_8k.testImages.txt").read_text().split())
    captions = []
    for line in (flickr / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, caption = line.split("\t", 1)
        image, index = key.split("#")
        if image in test_images and index == "0":
            captions.append(caption)
    return captions[:count]


# ---- scoring ----------------------------------------------------------------------------------------------------

def score(encoder, task_pairs, captions):
    """Encode every distinct sentence once; Spearman per task, the mean, and the gauges."""
    sentences = sorted({s for pairs in task_pairs.values() for a, b, _ in pairs for s in (a, b)} | set(captions))
    started = time.perf_counter()
    embeddings = encoder.encode(sentences)
    seconds = time.perf_counter() - started
    row_of = {s: i for i, s in enumerate(sentences)}
    result = {}
    for task, pairs in task_pairs.items():
        first = embeddings[[row_of[a] for a, _, _ in pairs]]
        second = embeddings[[row_of[b] for _, b, _ in pairs]]
        cosines = (first * second).sum(axis=1)  # rows are L2-normalised
        result[task] = float(spearmanr(cosines, [gold for _, _, gold in pairs]).statistic)
    result["mean"] = float(np.mean([result[task] for task in task_pairs]))
    if captions:
        caption_embeddings = torch.from_numpy(embeddings[[row_of[c] for c in captions]])
        result["gauge_rows"] = len(captions)
        result["self_cos"] = self_cos(caption_embeddings)
        result["erank"] = erank(caption_embeddings)
        # The same gauge out of domain: as many STS-8 sentences (a fixed random draw) as there are captions.
        sts_sentences = sorted({s for pairs in task_pairs.values() for a, b, _ in pairs for s in (a, b)})
        draw = np.random.default_rng(0).choice(len(sts_sentences), min(len(captions), len(sts_sentences)),
                                               replace=False)
        result["erank_sts"] = erank(torch.from_numpy(embeddings[[row_of[sts_sentences[i]] for i in draw]]))
    result["dim"] = int(embeddings.shape[1])
    result["sentences"] = len(sentences)
    result["encode_seconds"] = round(seconds, 1)
    return result


def markdown_table(metrics, tasks):
    gauges = [g for g in ("self_cos", "erank", "erank_sts") if any(g in row for row in metrics.values())]
    header = ["model", *tasks, "mean", *gauges]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in metrics.items():
        cells = [name] + [f"{row[t]:.4f}" for t in (*tasks, "mean")]
        cells += [f"{row[g]:+.3f}" if g == "self_cos" else f"{row[g]:.1f}" for g in gauges]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", dest="encoders", action="append", required=True, help="encoder spec (repeatable)")
    parser.add_argument("--data-dir", type=Path, default=runs.default_data_dir(), help="the shared data folder")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default runs/eval/<timestamp>)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="tasks to score")
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    parser.add_argument("--max-length", type=int, default=Config.max_length, help="token limit (plain HF / ONNX)")
    parser.add_argument("--gauge-captions", type=int, default=Config.gauge_captions, help="0 skips the gauges")
    parser.add_argument("--onnx-tokenizer", type=Path, default=None, help="tokenizer folder for an .onnx encoder")
    parser.add_argument("--onnx-output", default=None, help="token-state output name of an .onnx encoder")
    config = Config(**vars(parser.parse_args(argv)))
    config.out = config.out or runs.timestamped(runs.ROOT / "runs", "eval")
    if not (config.data_dir / "sts").is_dir():
        raise SystemExit(f"no sts/ folder in --data-dir {config.data_dir}")

    task_pairs = {task: load_task(config.data_dir, task) for task in config.tasks}
    captions = gauge_captions(config.data_dir, config.gauge_captions) if config.gauge_captions else []
    print("pairs per task:", {task: len(pairs) for task, pairs in task_pairs.items()})
    options = encoders.EncodeOptions(batch_size=config.batch_size, max_length=config.max_length)

    metrics = {}
    with runs.RunRecord(config.out, config, "evaluate"):
        for entry in config.encoders:
            label, _, spec = entry.rpartition("=")
            name, encoder = encoders.load(spec, options, config.onnx_tokenizer, config.onnx_output)
            name = label or name
            metrics[name] = {"spec": spec, "kind": encoder.kind, "max_length": encoder.max_length,
                             "weights_sha256": encoders.weights_hash(encoder.source),
                             **score(encoder, task_pairs, captions)}
            print(f"{name}: mean {metrics[name]['mean']:.4f} ({metrics[name]['encode_seconds']} s)")
            runs.write_json(config.out / "metrics.json", metrics)  # after each encoder, so a long run shows progress
        table = markdown_table(metrics, config.tasks)
        (config.out / "results.md").write_text(table)
    print(table)
    print(f"wrote {config.out / 'metrics.json'} and {config.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
