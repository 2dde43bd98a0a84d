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

import argparse
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from transformers import AutoModel

from shared_modeling.identity import embedding_space, trunk_hash
from tools import cards, encoders, registry, runs
from tools.glyph import gguf
from tools.glyph.data import read_triples
from tools.glyph.metrics import table_markdown

MODEL = registry.GLYPH.folder  # its row in the evaluation
GENERAL = "all-MiniLM-L6-v2"  # the off-the-shelf general encoder row
HEADLINE = (("win_rate", "accuracy", "win rate (paraphrase closer than mutation)"),  # (key, metric type, name)
            ("mrr_at_10", "mrr", "MRR@10"))
FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
                "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling", "2_Normalize")


@dataclass
class Config:
    corpus: Path  # tools/glyph/corpus.py folder
    train: Path  # tools/glyph/train.py folder (final/ holds the sentence-transformers model)
    eval: Path  # tools/glyph/evaluate.py run that scored the model (row MODEL) on test set (a), the corpus's
    eval_b: Path  # the same on test set (b), a tools/glyph/crosscheck.py folder
    out: Path  # run folder for this export's checks
    to: Path | None = None  # the folder to build (default <out>/<its Hub folder's name>); make release copies it
    #                         into the Hub folder
    parity_strings: int = 300  # held-out test strings the GGUF file is checked on
    min_cosine: float = 0.999  # llama.cpp vs PyTorch, per string (the spec's bar)
    goal_win_rate: float = 0.90  # the goals the card measures the model against: the mutation win rate ...
    goal_mrr_at_10: float = 0.96  # ... and the paraphrase MRR@10


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True, help="evaluate.py run on the corpus (test set (a))")
    parser.add_argument("--eval-b", type=Path, required=True, help="evaluate.py run on crosscheck.py's test set (b)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--to", type=Path, default=None, help="the folder to build (default: <out>/<Hub folder name>)")
    parser.add_argument("--parity-strings", type=int, default=Config.parity_strings)
    parser.add_argument("--min-cosine", type=float, default=Config.min_cosine)
    config = Config(**vars(parser.parse_args(argv)))
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


# ---- the model card ------------------------------------------------------------------------------------------------

def stage_values(stage, learning_rate):
    """A training stage's numbers as the card prints them: steps, epochs, peak lr, final loss and minutes."""
    return {"steps": f"{stage['steps']:,}", "epochs": f"{stage['epochs']:.2f}", "learning_rate": f"{learning_rate:g}",
            "final_loss": f"{stage['final_loss']:.3f}", "minutes": stage["training_minutes"]}


def weakest_family(row):
    """{"family", "win_rate", "triples"} of a row's lowest family."""
    family, weakest = min(row["families"].items(), key=lambda item: item[1]["win_rate"])
    return {"family": family, "win_rate": f"{weakest['win_rate']:.3f}", "triples": weakest["triples"]}


def card_context(corpus, train_config, train, evaluation, export, model_config, evaluation_b=None, crosscheck=None):
    """The values card.md shows, from the run records: the records themselves (for numbers printed as they are)
    and ready-made strings (formatted numbers, tables, the YAML front matter); model_config: the trained model's
    config.json; evaluation_b and crosscheck: test set (b)'s evaluation and generator records (None for a release
    built before test set (b) existed: its card says so)."""
    rows = evaluation["rows"]
    model, general = rows[MODEL], rows[GENERAL]
    tokenizer = corpus["tokenizer"]
    # (name, dataset type, rows) per test set; the Hub groups model-index results by dataset type
    test_sets = [(f"glyph notation, held-out atoms ({evaluation['test_triples']:,} triples)",
                  "glyph-notation-generated", rows)]
    if evaluation_b is not None:
        test_sets.append((f"glyph notation, independent generator ({evaluation_b['test_triples']:,} triples)",
                          "glyph-notation-independent", evaluation_b["rows"]))
    results = [{"task_type": "sentence-similarity", "dataset_type": dataset_type,
                "dataset_name": test_set, "metric_type": metric, "metric_name": name,
                "metric_value": round(set_rows[MODEL][key], 4)}
               for test_set, dataset_type, set_rows in test_sets for key, metric, name in HEADLINE]
    overview = cards.Overview(
        model=MODEL, job="glyph-notation claims: a paraphrase lands near its claim, a meaning-flipping mutation far",
        reads=f"{gguf.context_length(model_config)} tokens", width=model_config["hidden_size"],
        similarity="cosine (the dot product of its unit vectors)", alternative=GENERAL,
        results=[(name, test_set, set_rows[MODEL][key], set_rows[GENERAL][key])
                 for test_set, _, set_rows in test_sets for key, _, name in HEADLINE])
    set_b = None
    if evaluation_b is not None:
        model_b = evaluation_b["rows"][MODEL]
        set_b = {"triples": f"{evaluation_b['test_triples']:,}",
                 **{key: f"{crosscheck[key]:,}" for key in ("excluded_vocabulary", "atoms", "atom_words_used",
                                                            "anchors_with_redundant_brackets")},
                 "table": table_markdown(evaluation_b["rows"]), "weakest": weakest_family(model_b),
                 "win_rate": f"{model_b['win_rate']:.3f}", "mrr_at_10": f"{model_b['mrr_at_10']:.3f}",
                 "win_rate_goal_met": model_b["win_rate"] >= export["goal_win_rate"],
                 "mrr_goal_met": model_b["mrr_at_10"] >= export["goal_mrr_at_10"],
                 "gap_win_rate": f"{model['win_rate'] - model_b['win_rate']:+.3f}",
                 "gap_mrr_at_10": f"{model['mrr_at_10'] - model_b['mrr_at_10']:+.3f}",
                 "general_win_rate": f"{evaluation_b['rows'][GENERAL]['win_rate']:.3f}"}
    return {
        "overview": overview,
        "metadata": cards.front_matter(library_name="sentence-transformers", pipeline_tag="sentence-similarity",
                                       tags=["sentence-transformers", "feature-extraction", "sentence-similarity",
                                             "gguf", "glyph-notation"], datasets=None, model_name=MODEL,
                                       results=results),
        "train_config": train_config, "export": export, "tokenizer": tokenizer,
        "positions": gguf.context_length(model_config),
        "parameters_millions": f"{train['parameters'] / 1e6:.1f}", "parameters": f"{train['parameters']:,}",
        "mlm": stage_values(train["mlm"], train_config["mlm_learning_rate"]),
        "contrastive": stage_values(train["contrastive"], train_config["contrastive_learning_rate"]),
        "embedding_space_paragraph": cards.embedding_space_paragraph(export, "config.json: embedding_space"),
        "gguf_rows": "\n".join(
            f"| `{g['file']}` | {g['bytes'] / 2**20:.1f} MiB | {g['tokens_identical']}/{g['strings']} | "
            f"{g['min_cosine']:.6f} | {g['mean_cosine']:.6f} |" for g in export["gguf"].values()),
        "test_triples": f"{evaluation['test_triples']:,}",
        "retrieval_claims": f"{model['retrieval_gallery'] // 2:,}",
        "retrieval_gallery": f"{model['retrieval_gallery']:,}",
        "evaluation_table": table_markdown(rows),
        "win_rate_goal_met": model["win_rate"] >= export["goal_win_rate"], "win_rate": f"{model['win_rate']:.3f}",
        "mrr_goal_met": model["mrr_at_10"] >= export["goal_mrr_at_10"], "mrr_at_10": f"{model['mrr_at_10']:.3f}",
        "weakest": weakest_family(model), "set_b": set_b,
        "general_encoder": GENERAL, "general_win_rate": f"{general['win_rate']:.3f}",
        "words": {key: f"{count:,}" for key, count in corpus["words"].items()},
        "triples": {key: f"{count:,}" for key, count in corpus["triples"].items()},
        "corpus_strings": f"{corpus['corpus_strings']:,}", "vocab_size": f"{tokenizer['vocab_size']:,}",
        "split_operators": " ".join(op for op, count in tokenizer["operator_token_counts"].items() if count > 1),
        "mask_percent": f"{train_config['mask_probability']:.0%}",
        "validation_win_rate": f"{train['contrastive']['validation']['win_rate']:.3f}",
        "validation_mrr_at_10": f"{train['contrastive']['validation']['mrr_at_10']:.3f}",
    }


def context_from_records(folder, root=runs.ROOT):
    """card_context's values from run records alone: this export run's config.json and metrics.json, and the corpus,
    training and evaluation runs its config names, relative to root."""
    config = runs.read_json(Path(folder) / "config.json")
    corpus, train, evaluation = (root / config[name] for name in ("corpus", "train", "eval"))
    evaluation_b = crosscheck = None
    if config.get("eval_b"):  # a release built before test set (b) has none
        evaluation_b = runs.read_json(root / config["eval_b"] / "metrics.json")
        crosscheck = runs.read_json(root / runs.read_json(root / config["eval_b"] / "config.json")["corpus"]
                                    / "metrics.json")
    return card_context(runs.read_json(corpus / "metrics.json"), runs.read_json(train / "config.json"),
                        runs.read_json(train / "metrics.json"), runs.read_json(evaluation / "metrics.json"),
                        runs.read_json(Path(folder) / "metrics.json"), runs.read_json(train / "final" / "config.json"),
                        evaluation_b, crosscheck)


def card_from_records(folder, root=runs.ROOT):
    """The card's text from run records alone (tools/cards.py regenerates cards with it)."""
    return cards.render(Path(__file__).with_name("card.md"), **context_from_records(folder, root))


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
        path.write_text(card_from_records(config.out))
    print(f"wrote {path}\n")
    print(table_markdown(evaluation["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
