"""The glyph corpus on disk: train.jsonl, validation.jsonl and test.jsonl of (anchor, positive, negative, mutation)
triples, one JSON object a line, as tools/glyph/corpus.py writes them and the train, evaluate and export steps read
them.
"""

import dataclasses
import json
from pathlib import Path


def write_triples(path, triples):
    with path.open("w") as handle:
        for triple in triples:
            handle.write(json.dumps(dataclasses.asdict(triple), ensure_ascii=False) + "\n")


def read_triples(path):
    """The triples of a train.jsonl / test.jsonl as dicts."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]
