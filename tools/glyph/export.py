"""Build a glyph-embedder-v2 folder from a trained glyph encoder, with its GGUF file, and write its model card from
the run records. The folder is built inside the export run (<out>/glyph-embedder-v2/, starting from the Hub folder's
own files); `make release` (tools/release.py) copies a build into the Hub folder.

Usage (the order make demo runs them in):
    python -m tools.glyph.corpus --out runs/demo/glyph/corpus
    python -m tools.glyph.train --corpus runs/demo/glyph/corpus --out runs/demo/glyph/train
    python -m tools.glyph.evaluate --corpus runs/demo/glyph/corpus --out runs/demo/glyph/eval \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final --encoder teacher:all-MiniLM-L6-v2
    python -m tools.glyph.crosscheck --data-dir ../shared/data --out runs/demo/glyph/crosscheck
    python -m tools.glyph.evaluate --corpus runs/demo/glyph/crosscheck --out runs/demo/glyph/eval-b \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final --encoder teacher:all-MiniLM-L6-v2
    python -m tools.glyph.export --corpus runs/demo/glyph/corpus --train runs/demo/glyph/train \\
        --eval runs/demo/glyph/eval --eval-b runs/demo/glyph/eval-b --out runs/demo/glyph/export

What it does:
    1. checks that the evaluations of both test sets scored exactly the trained weights (same sha256): (a) the
       corpus's held-out atoms, (b) the independent generator's triples (tools/glyph/crosscheck.py);
    2. copies the sentence-transformers folder (weights, tokenizer, modules) and the training curve into it;
    3. in a fresh process with the project NOT importable, loads the folder with SentenceTransformer (no custom code)
       and with plain AutoModel/AutoTokenizer + a manual mean pool, and checks both give the trained embeddings;
    4. writes glyph-embedder-v2-f16.gguf (tools/glyph/gguf.py; the presets store the weights in float16, so an f32
       file would hold the same values in twice the bytes) and runs it in llama.cpp (llama-cpp-python) on held-out
       test strings: tokens must match token for token and every cosine to the PyTorch embedding must reach
       min_cosine;
    5. records the checks in the out folder (metrics.json) and writes README.md from the run records (its template:
       tools/glyph/card.md).
"""

import shutil
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
from transformers import AutoModel

from shared_modeling.identity import embedding_space, trunk_hash
from tools import cards, encoders, registry, runs
from tools.glyph import gguf
from tools.glyph.card import GENERAL, MODEL
from tools.glyph.data import read_triples
from tools.glyph.metrics import table_markdown

FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
                "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling", "2_Normalize")


@dataclass
class Config:
    corpus: Path  # tools/glyph/corpus.py folder
    train: Path  # tools/glyph/train.py folder (final/ holds the sentence-transformers model)
    eval: Path = field(metadata={"help": "tools/glyph/evaluate.py run that scored the model (row MODEL) on test set "
                                         "(a), the corpus's"})
    eval_b: Path = field(metadata={"help": "the same on test set (b), a tools/glyph/crosscheck.py folder"})
    out: Path  # run folder for this export's checks
    to: Path | None = field(default=None, metadata={
        "help": "the folder to build (default: <out>/<its Hub folder's name>); make release copies it into the Hub "
                "folder"})
    parity_strings: int = 300  # held-out test strings the GGUF file is checked on
    min_cosine: float = 0.999  # llama.cpp vs PyTorch, per string (the spec's bar)
    goal_win_rate: float = 0.90  # the goals the card measures the model against: the mutation win rate ...
    goal_mrr_at_10: float = 0.96  # ... and the paraphrase MRR@10


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    config.to = config.to or config.out / MODEL
    for path in (config.train / "final" / "model.safetensors", config.train / "metrics.json",
                 config.eval / "metrics.json", config.eval_b / "metrics.json", config.corpus / "metrics.json"):
        if not path.exists():
            raise SystemExit(f"{path} not found: run the steps in this tool's usage first")
    return config


def check_gguf(folder, path, texts, min_cosine):
    rows = gguf.check_parity(folder, path, texts)
    cosines = np.array([cosine for _, _, cosine in rows])
    result = {"file": path.name, "bytes": path.stat().st_size, "strings": len(rows),
              "tokens_identical": sum(same for _, same, _ in rows), "min_cosine": float(cosines.min()),
              "mean_cosine": float(cosines.mean())}
    if result["tokens_identical"] < len(rows) or result["min_cosine"] < min_cosine:
        raise SystemExit(f"{path} does not reproduce {folder}: {result}")
    return result


def main(argv=None):
    config = parse_config(argv)
    final = config.train / "final"
    evaluation = runs.read_json(config.eval / "metrics.json")
    for folder in (config.eval, config.eval_b):
        rows = runs.read_json(folder / "metrics.json")["rows"]
        if MODEL not in rows:
            raise SystemExit(f"{folder} has no row {MODEL!r}: evaluate with --encoder {MODEL}={final}")
        encoders.require_scored(rows[MODEL]["weights_sha256"], final, folder)
        if GENERAL not in rows:  # the card compares the model with it
            raise SystemExit(f"{folder} has no row {GENERAL!r}: evaluate with --encoder teacher:{GENERAL} too")
    crosscheck = Path(runs.read_json(config.eval_b / "config.json")["corpus"]) / "run.json"
    if not crosscheck.is_file() or runs.read_json(crosscheck)["tool"] != "glyph.crosscheck":
        raise SystemExit(f"--eval-b {config.eval_b} did not score test set (b): its corpus {crosscheck.parent} is no "
                         "finished tools/glyph/crosscheck.py run")

    with runs.RunRecord(config.out, config, "glyph.export"):
        registry.GLYPH.start_build(config.to)
        for name in FOLDER_FILES:
            target = config.to / name
            if target.is_dir():
                shutil.rmtree(target)
            (shutil.copytree if (final / name).is_dir() else shutil.copy)(final / name, target)
        shutil.copy(config.train / "training_curve.png", config.to / "training_curve.png")

        texts = [t[key] for t in read_triples(config.corpus / "test.jsonl")
                 for key in ("anchor", "positive", "negative")][:config.parity_strings]
        exported = runs.load_isolated(config.to, texts, sentence_transformers=True, manual_mean_pool=True)
        trained = runs.load_isolated(final, texts, sentence_transformers=True)
        embeddings = np.array(exported["sentence_transformers"]["embeddings"])
        if not np.array_equal(embeddings, trained["sentence_transformers"]["embeddings"]):
            raise SystemExit(f"{config.to} embeds differently from {final} after the copy")
        manual_gap = float(np.abs(np.array(exported["manual_mean_pool"]["embeddings"]) - embeddings).max())
        if manual_gap > 1e-5:
            raise SystemExit(f"a manual mean pool differs from SentenceTransformer by {manual_gap}")
        print(f"{config.to} loads in SentenceTransformer with no custom code, in a fresh process; a manual mean pool "
              f"over AutoModel matches it (max gap {manual_gap:.1e})")

        # A stock RobertaModel cannot compute its embedding-space id: it is computed here and written into config.json.
        stock = AutoModel.from_pretrained(config.to)
        space = embedding_space(trunk_hash(stock), config=stock.config)
        folder_config = runs.read_json(config.to / "config.json")
        runs.write_json(config.to / "config.json", {**folder_config, "embedding_space": space})
        path = gguf.export_gguf(config.to, config.to / f"{MODEL}-f16.gguf", "f16", name=MODEL)
        parity = {"f16": check_gguf(config.to, path, texts, config.min_cosine)}  # per GGUF dtype, as the card reads it
        print(f"{path.name}: tokens identical on {parity['f16']['tokens_identical']}/{len(texts)} strings, "
              f"min cosine to PyTorch {parity['f16']['min_cosine']:.6f}")
        export = {"parity_strings": len(texts), "manual_mean_pool_max_gap": manual_gap, "gguf": parity,
                  "llama_cpp_python": metadata.version("llama-cpp-python"),
                  "weights_sha256": encoders.weights_hash(config.to),
                  "files_sha256": registry.GLYPH.weights_sha256(config.to), "embedding_space": space,
                  "embedding_space_covers_config": True,
                  "goal_win_rate": config.goal_win_rate, "goal_mrr_at_10": config.goal_mrr_at_10}
        runs.write_json(config.out / "metrics.json", export)
        path = config.to / "README.md"
        path.write_text(cards.card_from_records(config.out))
    print(f"wrote {path}\n")
    print(table_markdown(evaluation["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
