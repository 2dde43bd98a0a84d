"""The glyph measures: mutation win rate (overall and per operator family) and paraphrase MRR@10, as pure functions
of similarities, for any embedder and for the two reference rows (random vectors, character 3-gram Jaccard); the
table the card shows. tools/glyph/evaluate.py scores encoders with them; tools/glyph/train.py validates with them.
"""

from collections import defaultdict

import numpy as np

from tools.glyph.grammar import is_mirror_against_flip, parse


def win_rates(positive_similarity, negative_similarity, families):
    """{"win_rate": overall, "families": {family: {"win_rate", "triples"}}}; a tie is a loss."""
    wins = np.asarray(positive_similarity) > np.asarray(negative_similarity)
    grouped = defaultdict(list)
    for family, win in zip(families, wins):
        grouped[family].append(win)
    return {"win_rate": float(wins.mean()),
            "families": {family: {"win_rate": float(np.mean(hits)), "triples": len(hits)}
                         for family, hits in sorted(grouped.items())}}


def family_labels(triples):
    """Each triple's row of the per-family tables: its mutation family, and "<family> mirrored" for a direction case
    (grammar.is_mirror_against_flip: the paraphrase mirrors the relation whose operator the mutation flips)."""
    labels = []
    for t in triples:
        anchor, positive, negative = (parse(t[key]) for key in ("anchor", "positive", "negative"))
        labels.append(t["mutation"] + (" mirrored" if is_mirror_against_flip(anchor, positive, negative) else ""))
    return labels


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


def score_embeddings(embed, triples, retrieval_queries):
    """Score an `embed(list_of_str) -> (N, D) L2-normalised` function."""
    anchors, positives, negatives = (embed([t[key] for t in triples]) for key in ("anchor", "positive", "negative"))
    scores = win_rates((anchors * positives).sum(1), (anchors * negatives).sum(1), family_labels(triples))
    n = min(retrieval_queries, len(triples))
    scores["mrr_at_10"] = mrr_at_10(anchors[:n] @ np.concatenate([positives[:n], negatives[:n]]).T)
    scores["retrieval_gallery"] = 2 * n
    return scores


def score_jaccard(triples, retrieval_queries):
    grams = {key: [trigrams(t[key]) for t in triples] for key in ("anchor", "positive", "negative")}
    scores = win_rates([jaccard(a, p) for a, p in zip(grams["anchor"], grams["positive"])],
                       [jaccard(a, n) for a, n in zip(grams["anchor"], grams["negative"])],
                       family_labels(triples))
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
