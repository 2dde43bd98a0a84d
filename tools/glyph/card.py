"""glyph-embedder-v2's model card: CARD, its Markdown template (card.md, Jinja), and card_context, the values that
fill it, computed from run records alone (tools/cards.py renders them: `make cards`, and the export's card)."""

from pathlib import Path


from tools import card_engine, registry
from tools.glyph import gguf
from tools.glyph.metrics import table_markdown


MODEL = registry.GLYPH.folder  # its row in the evaluation


CARD = Path(__file__).with_name("card.md")  # the Markdown template (Jinja) card_context fills
GENERAL = "all-MiniLM-L6-v2"  # the off-the-shelf general encoder row


HEADLINE = (("win_rate", "accuracy", "win rate (paraphrase closer than mutation)"),  # (key, metric type, name)
            ("mrr_at_10", "mrr", "MRR@10"))


def stage_values(stage, learning_rate):
    """A training stage's numbers as the card prints them: steps, epochs, peak lr, final loss and minutes."""
    return {"steps": f"{stage['steps']:,}", "epochs": f"{stage['epochs']:.2f}", "learning_rate": f"{learning_rate:g}",
            "final_loss": f"{stage['final_loss']:.3f}", "minutes": stage["training_minutes"]}


def weakest_family(row):
    """{"family", "win_rate", "triples"} of a row's lowest family."""
    family, weakest = min(row["families"].items(), key=lambda item: item[1]["win_rate"])
    return {"family": family, "win_rate": f"{weakest['win_rate']:.3f}", "triples": weakest["triples"]}


def card_context(records):
    """The values card.md shows, from the run records (a card_engine.Records of the export run): the records themselves
    (for numbers printed as they are) and ready-made strings (formatted numbers, tables, the YAML front matter). Read:
    the corpus, training and evaluation runs the export names, the trained model's config.json, and test set (b)'s
    evaluation and generator records (None for a release built before test set (b) existed: its card says so)."""
    corpus, evaluation, export = records.read("corpus"), records.read("eval"), records.own()
    train, train_config = records.read("train"), records.read("train", "config.json")
    model_config = records.read("train", "final/config.json")
    evaluation_b, crosscheck = records.read("eval_b"), records.follow("eval_b", "corpus")
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
    overview = card_engine.Overview(
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
        "metadata": card_engine.front_matter(library_name="sentence-transformers", pipeline_tag="sentence-similarity",
                                       tags=["sentence-transformers", "feature-extraction", "sentence-similarity",
                                             "gguf", "glyph-notation"], datasets=None, model_name=MODEL,
                                       results=results),
        "train_config": train_config, "export": export, "tokenizer": tokenizer,
        "positions": gguf.context_length(model_config),
        "parameters_millions": f"{train['parameters'] / 1e6:.1f}", "parameters": f"{train['parameters']:,}",
        "mlm": stage_values(train["mlm"], train_config["mlm_learning_rate"]),
        "contrastive": stage_values(train["contrastive"], train_config["contrastive_learning_rate"]),
        "embedding_space_paragraph": card_engine.embedding_space_paragraph(export, "config.json: embedding_space"),
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
