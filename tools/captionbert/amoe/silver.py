"""Teacher-scored ("silver") sentence pairs for an AMOE arm: corpus texts paired and scored by a teacher's cosine.

Usage (as `make demo` runs it):
    python -m tools.captionbert.amoe.silver --extract runs/demo/extract --out runs/demo/amoe/silver
    python -m tools.captionbert.amoe.solo --data runs/demo/amoe/silver/silver.tsv \
        --out runs/demo/amoe/solo/silver-seed0

The texts and embeddings are those of a finished tools/captionbert/extract.py run, so held-out text (STS-8 test
sentences, Flickr8k test captions) is already gone. Each of `anchors` seeded random short texts is paired with one
text drawn from its `neighbours` nearest texts by the teacher's cosine, and with one random text, so the scores span
near-paraphrases to unrelated pairs; the score is the teacher's cosine (Augmented SBERT's silver data, labelled by a
bi-encoder teacher). An arm trained on them with CoSENT learns the teacher's ranking of pairs. Writes silver.tsv
(text1, text2, score) beside the run record and a summary of the score distribution in metrics.json.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools import corpus, runs
from tools.captionbert.amoe import pairs


@dataclass
class Config:
    extract: Path  # tools/captionbert/extract.py folder (manifest.json, texts.jsonl, <teacher>/shard-*.safetensors)
    out: Path  # run folder; silver.tsv goes here
    teacher: str = ""  # the scoring teacher; default the extraction's reference
    anchors: int = 6000  # anchor texts (two pairs each)
    neighbours: int = 10  # the near pair's partner is drawn from this many nearest texts
    max_words: int = 40  # texts longer than this are neither anchors nor partners
    seed: int = 0


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    if (config.out / "metrics.json").is_file():
        print(f"{config.out} is finished already; delete it to rebuild")
        return 0
    manifest_path = config.extract / "manifest.json"
    if not manifest_path.is_file():
        raise SystemExit(f"{manifest_path} not found: run tools.captionbert.extract to the end first")
    manifest = runs.read_json(manifest_path)
    name = config.teacher or manifest["reference"]
    teacher = next((t for t in manifest["teachers"] if t["name"] == name), None)
    if teacher is None:
        raise SystemExit(f"teacher {name!r} was not extracted; have {[t['name'] for t in manifest['teachers']]}")
    if config.anchors < 1 or config.neighbours < 1:
        raise SystemExit("--anchors and --neighbours must be positive")

    with runs.RunRecord(config.out, config, "captionbert.amoe.silver"):
        texts = corpus.read_texts(config.extract / manifest["corpus"]["file"])
        short = np.array([i for i, text in enumerate(texts) if len(text.split()) <= config.max_words])
        embeddings = pairs.load_embeddings(config.extract, teacher)[short]  # (S, D)
        rng = np.random.default_rng(config.seed)
        anchors = rng.choice(len(short), min(config.anchors, len(short)), replace=False)
        similarity = embeddings[anchors] @ embeddings.T  # (A, S)
        similarity[np.arange(len(anchors)), anchors] = -np.inf  # never a text with itself
        nearest = np.argpartition(-similarity, config.neighbours, axis=1)[:, :config.neighbours]  # (A, k)
        near = nearest[np.arange(len(anchors)), rng.integers(0, config.neighbours, len(anchors))]
        far = rng.integers(0, len(short), len(anchors))
        far = np.where(far == anchors, (far + 1) % len(short), far)
        rows = []
        for a, partner in [*zip(anchors, near), *zip(anchors, far)]:
            first, second = texts[short[a]], texts[short[partner]]
            rows.append((first, second, float(embeddings[a] @ embeddings[partner])))
        with open(config.out / "silver.tsv", "w", encoding="utf-8") as handle:
            for first, second, score in rows:
                handle.write(f"{' '.join(first.split())}\t{' '.join(second.split())}\t{score:.4f}\n")
        scores = np.array([score for _, _, score in rows])
        metrics = {"teacher": name, "pairs": len(rows), "short_texts": len(short),
                   "score_quantiles": dict(zip(("min", "q25", "median", "q75", "max"),
                                               np.quantile(scores, [0, 0.25, 0.5, 0.75, 1]).round(4).tolist()))}
        runs.write_json(config.out / "metrics.json", metrics)
    print(f"wrote {len(rows):,} pairs scored by {name} to {config.out / 'silver.tsv'}: {metrics['score_quantiles']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
