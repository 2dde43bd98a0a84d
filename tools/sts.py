"""The STS-8 suite, read from ../shared/data, and its scoring: Spearman of cosine vs gold on the eight English STS
test sets, plus geometry gauges. tools/captionbert/evaluate.py runs it on encoders; the AMOE arms are selected and
scored by it; tools/corpus.py keeps its sentences out of every training corpus.

Tasks (MTEB's STS suite, test splits, every genre of a year pooled into one score): STS12, STS13, STS14, STS15,
STS16, STS-B (STSBenchmark test), SICK-R, BIOSSES. Mean = unweighted average of the eight. Gauges on a held-out
caption sample (the first caption of each Flickr8k test image): self_cos (mean cosine between distinct rows) and
erank (participation ratio of the centred embeddings); erank_sts is the same participation ratio out of domain, on
as many STS-8 sentences (a fixed random draw).
"""

import csv
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from shared_modeling.geometry import erank, self_cos

TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "BIOSSES")


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
        rows = csv.DictReader(handle, delimiter="\t")
        return [(row["sentence1"], row["sentence2"], float(row["score"])) for row in rows]


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


def flickr8k_captions(data_dir, split):
    """{image: [its captions in #0..#4 order]} of one official Flickr8k image split ("train", "dev" or "test"), the
    images in file order."""
    flickr = Path(data_dir) / "captions" / "flickr8k"
    images = set((flickr / f"Flickr_8k.{split}Images.txt").read_text().split())
    captions = {}
    for line in (flickr / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, caption = line.split("\t", 1)
        image, index = key.split("#")
        if image in images:
            captions.setdefault(image, {})[int(index)] = caption
    return {image: [by_index[i] for i in sorted(by_index)] for image, by_index in captions.items()}


def gauge_captions(data_dir, count):
    """The first caption of each Flickr8k test image, in file order (distinct images, so unrelated sentences)."""
    return [captions[0] for captions in flickr8k_captions(data_dir, "test").values()][:count]


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


def same_image_retrieval(encoder, captions_by_image):
    """Same-image caption retrieval: each image's first caption queries the second captions of every image; recall@1
    and MRR of finding its own (ties count against it). captions_by_image: {image: [captions]}, two or more each."""
    images = [captions for captions in captions_by_image.values() if len(captions) >= 2]
    if len(images) < 2:
        raise ValueError("same-image retrieval needs at least two images with two captions each")
    queries = encoder.encode([captions[0] for captions in images])  # (N, D), rows L2-normalised
    gallery = encoder.encode([captions[1] for captions in images])
    similarity = queries @ gallery.T  # (N, N)
    ranks = (similarity >= similarity.diagonal()[:, None]).sum(axis=1)  # 1 = the own caption ranks first
    return {"recall@1": float(np.mean(ranks == 1)), "mrr": float(np.mean(1.0 / ranks)), "images": len(images)}


def markdown_table(metrics, tasks):
    gauges = [g for g in ("self_cos", "erank", "erank_sts") if any(g in row for row in metrics.values())]
    header = ["model", *tasks, "mean", *gauges]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in metrics.items():
        cells = [name] + [f"{row[t]:.4f}" for t in (*tasks, "mean")]
        cells += [f"{row[g]:+.3f}" if g == "self_cos" else f"{row[g]:.1f}" for g in gauges]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
