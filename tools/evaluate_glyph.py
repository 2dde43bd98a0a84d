"""Score glyph encoders on held-out atoms: mutation win rate (overall and per operator family) and paraphrase MRR@10.

Usage:
    python -m tools.evaluate_glyph --corpus runs/demo/glyph/corpus --out runs/demo/glyph/eval \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final
    python -m tools.evaluate_glyph --corpus C --out O --encoder A=folder --encoder teacher:all-MiniLM-L6-v2

The test triples (test.jsonl of tools/build_glyph_corpus.py) use only held-out atom words. A win is
sim(anchor, paraphrase) > sim(anchor, mutation). Paraphrase retrieval: each of the first `retrieval_queries` anchors
searches a gallery of the paraphrases AND the mutations of all of them (so its own surface twin competes); MRR@10
counts 1/rank of its own paraphrase when it is in the top 10.
Two reference rows are always scored in the same table, as sanity checks of the test set: random vectors (a fresh
Gaussian per distinct string: win rate near 0.5) and character 3-gram Jaccard (near 0: a mutation is one edit away
on the surface while a paraphrase is rewritten). Ties count as losses.

The out folder gets metrics.json (every row, per family), table.md and the run record.
"""

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools import encoders, runs
from tools.build_glyph_corpus import read_triples


@dataclass
class Config:
    corpus: Path  # folder of tools/build_glyph_corpus.py (test.jsonl)
    out: Path  # run folder
    encoder: list[str] = field(default_factory=list)  # NAME=SPEC or SPEC (tools/encoders.py kinds), one per row
    retrieval_queries: int = 1000  # anchors used for MRR@10 (their paraphrases form the gallery)
    seed: int = 0  # the random-vector row


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="tools/build_glyph_corpus.py folder")
    parser.add_argument("--out", type=Path, required=True, help="run folder")
    parser.add_argument("--encoder", action="append", default=[], help="NAME=SPEC or SPEC; repeat for more rows")
    parser.add_argument("--retrieval-queries", type=int, default=Config.retrieval_queries)
    parser.add_argument("--seed", type=int, default=Config.seed)
    config = Config(**vars(parser.parse_args(argv)))
    if config.retrieval_queries < 10:
        raise SystemExit("--retrieval-queries must be at least 10")
    return config


# ---- the measures (pure functions of similarity matrices / rows) ---------------------------------------------------

def win_rates(positive_similarity, negative_similarity, families):
    """{"win_rate": overall, "families": {family: {"win_rate", "triples"}}}; a tie is a loss."""
    wins = np.asarray(positive_similarity) > np.asarray(negative_similarity)
    grouped = defaultdict(list)
    for family, win in zip(families, wins):
        grouped[family].append(win)
    return {"win_rate": float(wins.mean()),
            "families": {family: {"win_rate": float(np.mean(hits)), "triples": len(hits)}
                         for family, hits in sorted(grouped.items())}}


def mrr_at_10(similarity):
    """Mean reciprocal rank of item i in row i (query i's own item; similarity is (N, M), M >= N), 0 beyond rank
    10; ties rank below."""
    similarity = np.asarray(similarity)
    own = np.diag(similarity)[:, None]
    ranks = 1 + (similarity > own).sum(axis=1) + ((similarity == own).sum(axis=1) - 1)
    return float(np.where(ranks <= 10, 1.0 / ranks, 0.0).mean())


def trigrams(text):
    text = text.replace(" ", "")  # white space carries no meaning
    return {text[i:i + 3] for i in range(max(1, len(text) - 2))}


def jaccard(a, b):
    return len(a & b) / len(a | b)


# ---- rows ---------------------------------------------------------------------------------------------------------

def score_embeddings(embed, triples, retrieval_queries):
    """Score an `embed(list_of_str) -> (N, D) L2-normalised` function."""
    anchors, positives, negatives = (embed([t[key] for t in triples]) for key in ("anchor", "positive", "negative"))
    scores = win_rates((anchors * positives).sum(1), (anchors * negatives).sum(1), [t["mutation"] for t in triples])
    n = min(retrieval_queries, len(triples))
    scores["mrr_at_10"] = mrr_at_10(anchors[:n] @ np.concatenate([positives[:n], negatives[:n]]).T)
    scores["retrieval_gallery"] = 2 * n
    return scores


def score_jaccard(triples, retrieval_queries):
    grams = {key: [trigrams(t[key]) for t in triples] for key in ("anchor", "positive", "negative")}
    scores = win_rates([jaccard(a, p) for a, p in zip(grams["anchor"], grams["positive"])],
                       [jaccard(a, n) for a, n in zip(grams["anchor"], grams["negative"])],
                       [t["mutation"] for t in triples])
    n = min(retrieval_queries, len(triples))
    gallery = grams["positive"][:n] + grams["negative"][:n]
    similarity = np.array([[jaccard(a, item) for item in gallery] for a in grams["anchor"][:n]])
    scores["mrr_at_10"] = mrr_at_10(similarity)
    scores["retrieval_gallery"] = 2 * n
    return scores


def random_embedder(seed, width=256):
    """A fresh Gaussian unit vector per distinct string (the same string always gets the same vector)."""
    rng, table = np.random.default_rng(seed), {}

    def embed(texts):
        for text in texts:
            if text not in table:
                vector = rng.standard_normal(width)
                table[text] = vector / np.linalg.norm(vector)
        return np.stack([table[text] for text in texts])

    return embed


def table_markdown(rows):
    """Overall rows, then win rate per family (columns) for each row."""
    families = sorted({family for row in rows.values() for family in row["families"]})
    lines = ["| encoder | win rate | MRR@10 |", "|---|---|---|"]
    lines += [f"| {name} | {row['win_rate']:.3f} | {row['mrr_at_10']:.3f} |" for name, row in rows.items()]
    counts = next(iter(rows.values()))["families"]
    lines += ["", "| family (triples) | " + " | ".join(rows) + " |", "|---|" + "---|" * len(rows)]
    for family in families:
        cells = " | ".join(f"{row['families'][family]['win_rate']:.3f}" for row in rows.values())
        lines.append(f"| {family} ({counts[family]['triples']}) | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    config = parse_config(argv)
    triples = read_triples(config.corpus / "test.jsonl")
    with runs.RunRecord(config.out, config, "evaluate_glyph"):
        rows = {"random vectors": score_embeddings(random_embedder(config.seed), triples, config.retrieval_queries),
                "character 3-gram Jaccard": score_jaccard(triples, config.retrieval_queries)}
        sources = {}
        for spec in config.encoder:
            label, _, target = spec.rpartition("=")
            default_name, encoder = encoders.load(target)
            name = label or default_name
            rows[name] = score_embeddings(encoder.encode, triples, config.retrieval_queries)
            rows[name]["weights_sha256"] = encoders.weights_hash(encoder.source)
            sources[name] = str(encoder.source)
        table = table_markdown(rows)
        (config.out / "table.md").write_text(table)
        runs.write_json(config.out / "metrics.json", {"test_triples": len(triples), "rows": rows, "sources": sources})
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
