"""Score glyph encoders on held-out atoms: mutation win rate (overall and per operator family) and paraphrase MRR@10.

Usage:
    python -m tools.glyph.evaluate --corpus runs/demo/glyph/corpus --out runs/demo/glyph/eval \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final
    python -m tools.glyph.evaluate --corpus C --out O --encoder A=folder --encoder teacher:all-MiniLM-L6-v2

The test triples: test.jsonl of a tools/glyph/corpus.py folder (test set (a): the training generator's held-out
atom words) or of a tools/glyph/crosscheck.py folder (test set (b): an independent generator). A win is
sim(anchor, paraphrase) > sim(anchor, mutation). Paraphrase retrieval: each of the first `retrieval_queries` anchors
searches a gallery of the paraphrases AND the mutations of all of them (so its own surface twin competes); MRR@10
counts 1/rank of its own paraphrase when it is in the top 10.
Two reference rows are always scored in the same table, as sanity checks of the test set: random vectors (a fresh
Gaussian per distinct string: win rate near 0.5) and character 3-gram Jaccard (near 0: a mutation is one edit away
on the surface while a paraphrase is rewritten). Ties count as losses.

The out folder gets metrics.json (every row, per family), table.md and the run record.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import encoders, runs
from tools.glyph.data import read_triples
from tools.glyph.metrics import random_embedder, score_embeddings, score_jaccard, table_markdown


@dataclass
class Config:
    corpus: Path = field(metadata={"help": "tools/glyph/corpus.py or crosscheck.py folder (test.jsonl)"})
    out: Path = field(metadata={"help": "run folder"})
    encoder: list[str] = field(default_factory=list, metadata={
        "action": "extend", "help": "NAME=SPEC or SPEC (tools/encoders.py kinds), one per row; repeat for more rows"})
    retrieval_queries: int = 1000  # anchors used for MRR@10 (their paraphrases form the gallery)
    seed: int = 0  # the random-vector row


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if config.retrieval_queries < 10:
        raise SystemExit("--retrieval-queries must be at least 10")
    return config


def main(argv=None):
    config = parse_config(argv)
    triples = read_triples(config.corpus / "test.jsonl")
    with runs.RunRecord(config.out, config, "glyph.evaluate"):
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
