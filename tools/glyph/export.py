"""Put a trained glyph encoder into the glyph-embedder-v2 Hub folder, with its GGUF files, and write its model card
from the run records.

Usage (the order make demo runs them in):
    python -m tools.glyph.corpus --out runs/demo/glyph/corpus
    python -m tools.glyph.train --corpus runs/demo/glyph/corpus --out runs/demo/glyph/train
    python -m tools.glyph.evaluate --corpus runs/demo/glyph/corpus --out runs/demo/glyph/eval \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final --encoder teacher:all-MiniLM-L6-v2
    python -m tools.glyph.export --corpus runs/demo/glyph/corpus --train runs/demo/glyph/train \\
        --eval runs/demo/glyph/eval --out runs/demo/glyph/export

What it does:
    1. checks that the evaluation scored exactly the trained weights (same sha256);
    2. copies the sentence-transformers folder (weights, tokenizer, modules) and the training curve into the folder;
    3. in a fresh process with the project NOT importable, loads the folder with SentenceTransformer (no custom code)
       and with plain AutoModel/AutoTokenizer + a manual mean pool, and checks both give the trained embeddings;
    4. writes glyph-embedder-v2-f32.gguf and -f16.gguf (tools/glyph/gguf.py) and runs them in llama.cpp
       (llama-cpp-python) on held-out test strings: tokens must match token for token and every cosine to the
       PyTorch embedding must reach min_cosine;
    5. records the checks in the out folder (metrics.json) and writes README.md from the run records.
"""

import argparse
import shutil
import sys
import textwrap
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

GLYPH = registry.GLYPH.path
MODEL = registry.GLYPH.folder  # its row in the evaluation
GENERAL = "all-MiniLM-L6-v2"  # the off-the-shelf general encoder row
FOLDER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
                "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling", "2_Normalize")


@dataclass
class Config:
    corpus: Path  # tools/glyph/corpus.py folder
    train: Path  # tools/glyph/train.py folder (final/ holds the sentence-transformers model)
    eval: Path  # tools/glyph/evaluate.py run that scored the model (row MODEL)
    out: Path  # run folder for this export's checks
    to: Path = GLYPH  # the Hub folder to fill
    parity_strings: int = 300  # held-out test strings the GGUF files are checked on
    min_cosine: float = 0.999  # llama.cpp vs PyTorch, per string (the spec's bar)
    goal_win_rate: float = 0.90  # the goals the card measures the model against: the mutation win rate ...
    goal_mrr_at_10: float = 0.96  # ... and the paraphrase MRR@10


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--to", type=Path, default=GLYPH, help="the glyph-embedder-v2 Hub folder to fill")
    parser.add_argument("--parity-strings", type=int, default=Config.parity_strings)
    parser.add_argument("--min-cosine", type=float, default=Config.min_cosine)
    config = Config(**vars(parser.parse_args(argv)))
    for path in (config.train / "final" / "model.safetensors", config.train / "metrics.json",
                 config.eval / "metrics.json", config.corpus / "metrics.json"):
        if not path.exists():
            raise SystemExit(f"{path} not found: run the steps in this tool's usage first")
    return config


def fresh_process_embeddings(folder, texts):
    """{"sentence_transformers", "manual"}: embeddings of `texts` from `folder` in a new process whose working
    directory is a temporary folder and whose path excludes the project, so nothing but the folder is used."""
    script = textwrap.dedent("""
        import json, sys
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers import AutoModel, AutoTokenizer
        folder, texts = sys.argv[1], json.loads(sys.stdin.read())
        st = SentenceTransformer(folder, device="cpu")
        tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
        batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        manual = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
        print(json.dumps({"sentence_transformers": st.encode(texts).tolist(), "manual": manual.tolist()}))
    """)
    embeddings = runs.run_isolated(script, Path(folder).resolve(), payload=texts)
    return {key: np.array(value) for key, value in embeddings.items()}

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

def build_card(corpus, train_config, train, evaluation, export):
    rows = evaluation["rows"]
    model, general = rows[MODEL], rows.get(GENERAL)
    tokenizer = corpus["tokenizer"]
    split = [op for op, count in tokenizer["operator_token_counts"].items() if count > 1]
    mlm, contrastive = train["mlm"], train["contrastive"]
    goal_win = "meets" if model["win_rate"] >= export["goal_win_rate"] else "does not meet"
    goal_mrr = "meets" if model["mrr_at_10"] >= export["goal_mrr_at_10"] else "does not meet"
    general_line = (f" The general encoder {GENERAL} scores {general['win_rate']:.3f}: it reads the atoms and not the "
                    "operators." if general else "")
    worst = min(model["families"].items(), key=lambda item: item[1]["win_rate"])
    gguf_lines = "\n".join(
        f"| `{g['file']}` | {g['bytes'] / 2**20:.1f} MiB | {g['tokens_identical']}/{g['strings']} | "
        f"{g['min_cosine']:.6f} | {g['mean_cosine']:.6f} |" for g in export["gguf"].values())
    test_set = f"glyph notation, held-out atoms ({evaluation['test_triples']:,} triples)"
    results = [{"task_type": "sentence-similarity", "dataset_type": "glyph-notation-generated",
                "dataset_name": test_set, "metric_type": metric, "metric_name": name,
                "metric_value": round(model[key], 4)}
               for key, metric, name in (("win_rate", "accuracy", "win rate (paraphrase closer than mutation)"),
                                         ("mrr_at_10", "mrr", "MRR@10"))]
    metadata = cards.front_matter(library_name="sentence-transformers", pipeline_tag="sentence-similarity",
                                  tags=["sentence-transformers", "feature-extraction", "sentence-similarity", "gguf",
                                        "glyph-notation"], datasets=None, model_name=MODEL, results=results)
    return f"""{metadata}
# glyph-embedder-v2

A {train['parameters'] / 1e6:.1f}M-parameter encoder ({train['parameters']:,} parameters) for glyph notation, the
compact operator notation for causal and structural claims (`v5⊃compression↑ ⇒ compression⊖attribution_edges`).
It is a plain `RobertaModel` trained from scratch on a generated corpus whose meaning is decidable, so that a
paraphrase lands near its claim and a one-symbol mutation that flips the meaning lands far from it. Output: a
{train_config['hidden_size']}-d, L2-normalised embedding (mean pooling).

> **These weights** come from the bundle's embedded default (`make demo`, preset `{train_config['preset']}`,
> {mlm['training_minutes']} + {contrastive['training_minutes']} minutes of training on a 2-core CPU). Every
> number below is generated from the run records by `tools/glyph/export.py`.

## Use

No custom code is needed:

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("<org>/glyph-embedder-v2")
embeddings = model.encode(["a ⇒ b", "¬b ⇒ ¬a", "a ⇐ b"])  # (3, {train_config['hidden_size']}), unit rows
```

or with transformers alone (mean over every token, `<s>` and `</s>` included, then L2-normalise):

```python
import torch
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("<org>/glyph-embedder-v2")
model = AutoModel.from_pretrained("<org>/glyph-embedder-v2").eval()
batch = tokenizer(["a ⇒ b", "¬b ⇒ ¬a"], padding=True, return_tensors="pt")
with torch.no_grad():
    states = model(**batch).last_hidden_state
mask = batch["attention_mask"].unsqueeze(-1).float()
embeddings = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
```

or in llama.cpp (and so LM Studio and Ollama) with the GGUF files, e.g. `llama-embedding -m glyph-embedder-v2-f16.gguf
-p "a ⇒ b"` (pooling is mean, written in the file), or `llama_cpp.Llama(model_path=..., embedding=True)`.
Inputs longer than {train_config['max_length']} tokens are truncated (the length training used).

**Inputs and threads.** With no remote code there is nothing of this project between the input and the stock
model: an empty string is not refused, it is embedded as the tokenizer's two special tokens, one fixed vector for
every empty input (drop empty strings before indexing). Concurrent `encode` calls on one model are whatever
sentence-transformers and transformers make of them; this project does not test them: load one model per thread
to be safe.

{cards.embedding_space_paragraph(export['embedding_space'], 'config.json: embedding_space')} Being a stock
`RobertaModel`, this model cannot compute the id itself: it was computed from the weights at export and written into
`config.json`, so a re-saved fine-tune carries a stale one.

| GGUF file | size | tokens identical to the HF tokenizer | min cosine to PyTorch | mean cosine |
|---|---|---|---|---|
{gguf_lines}

(measured on {export['parity_strings']} held-out test strings through llama-cpp-python
{export['llama_cpp_python']}; the files are written by `tools/glyph/gguf.py` with the `gguf` package, since the
stock converter cannot recognise a new tokenizer.)

## Evaluation on held-out atoms

{evaluation['test_triples']:,} test triples (claim, paraphrase, mutation) in which every atom holds a word that never
occurs in training, so no test atom was ever seen. The paraphrase renames an atom word to a synonym from the training
groups (a synonym relation between two unseen words could not be inferred) and applies one or two more rewrites
(mirror reversal, symmetric swap, double negation, De Morgan, contrapositive); the mutation flips the meaning with
one edit (an operator swapped with its inverse, ¬ inserted or removed, ⊥ injected). A win is
cos(claim, paraphrase) > cos(claim, mutation). MRR@10: each of {model['retrieval_gallery'] // 2:,} claims searches
the paraphrases and the mutations of all of them ({model['retrieval_gallery']:,} items). Random vectors (chance) and
character 3-gram Jaccard (a mutation is always closer on the surface) check the test set itself.

{table_markdown(rows)}
The model {goal_win} the {export['goal_win_rate']} win-rate goal ({model['win_rate']:.3f}; published 0.860) and
{goal_mrr} the {export['goal_mrr_at_10']}
MRR@10 goal ({model['mrr_at_10']:.3f}; published 0.956). Its weakest family is {worst[0]}
({worst[1]['win_rate']:.3f} over {worst[1]['triples']} triples).{general_line}

## How these weights were built

**Corpus.** Generated by the project's reference grammar (`tools/glyph/grammar.py`: parser, canonical form,
rewrites and mutations; every pair is checked by the canonical form). Atoms are one or two English words
(synonym groups from `tools/glyph/words.txt` plus common words of bert-base-uncased's vocabulary):
{corpus['words']['train']:,} for training, and {corpus['words']['held_out']:,} more in
{corpus['words']['held_out_groups']:,} groups held out for evaluation. {corpus['triples']['train']:,} training
triples give {corpus['corpus_strings']:,} unique corpus strings; {corpus['triples']['validation']:,} more triples over
training atoms (not in the corpus) monitor training.

**Tokenizer.** Byte-level BPE trained on the corpus only ({tokenizer['vocab_size']:,} tokens, GPT-2 pre-tokeniser,
RoBERTa's `<s> X </s>`): {tokenizer['single_token_operators']} of {tokenizer['operators']} operator symbols are
single tokens{' (split: ' + ' '.join(split) + ')' if split else ''}; corpus strings average
{tokenizer['mean_tokens']} tokens (longest {tokenizer['max_tokens']}).

**Training.** RobertaModel from scratch (hidden {train_config['hidden_size']}, {train_config['num_layers']} layers,
{train_config['num_heads']} heads, FFN {train_config['intermediate_size']}, {train_config['max_length']} positions).
Stage 1, masked-language modelling ({train_config['mask_probability']:.0%} of tokens): {mlm['steps']:,} steps of
{train_config['mlm_batch_size']} ({mlm['epochs']:.2f} epochs), peak lr {train_config['mlm_learning_rate']:g}, final loss
{mlm['final_loss']:.3f}, {mlm['training_minutes']} min. Stage 2, InfoNCE (T = {train_config['temperature']}) of each
claim against every paraphrase and every mutation of the batch: {contrastive['steps']:,} steps of
{train_config['contrastive_batch_size']} triples ({contrastive['epochs']:.2f} epochs), peak lr
{train_config['contrastive_learning_rate']:g}, final loss {contrastive['final_loss']:.3f},
{contrastive['training_minutes']} min; validation win rate {contrastive['validation']['win_rate']:.3f}, MRR@10
{contrastive['validation']['mrr_at_10']:.3f}. AdamW (weight decay {train_config['weight_decay']}), linear warm-up and
decay, {train_config['precision']} forward pass, seed {train_config['seed']}.

![training curve](training_curve.png)

## Limits

- The notation's meaning is the project's reference grammar: the canonical form decides only the rewrites listed
  above (no associativity, no quantifier duality, ↑ is not ¬↓). Other readings of glyph are outside what was trained.
- Synonyms are known only for the listed groups the model trained on; a rename between two words it never saw is
  outside what it can recognise (the test set does not ask for it).
- Direction is the weak spot: a directed relation flipped to its mirror operator (→/←, ⇒/⇐, ∵/∴, ⊢/⊣) holds the
  same tokens as the paraphrase that mirrors it (a←b vs b←a), so only their order tells them apart, and those
  families stay far below the others in the table above.
- One seed of a CPU-sized run; the seed-to-seed spread was not measured.

## Source

Built by `tools/glyph/corpus.py`, `tools/glyph/train.py`, `tools/glyph/evaluate.py`, `tools/glyph/gguf.py` and
`tools/glyph/export.py` in the bundle's source repository.
"""


def card_from_records(folder):
    """(the README.md to write, its text), from run records alone: this export run's config.json and metrics.json,
    and the corpus, training and evaluation runs its config names (tools/cards.py regenerates cards with it)."""
    config = runs.read_json(Path(folder) / "config.json")
    corpus, train, evaluation = (Path(config[name]) for name in ("corpus", "train", "eval"))
    card = build_card(runs.read_json(corpus / "metrics.json"), runs.read_json(train / "config.json"),
                      runs.read_json(train / "metrics.json"), runs.read_json(evaluation / "metrics.json"),
                      runs.read_json(Path(folder) / "metrics.json"))
    return Path(config["to"]) / "README.md", card


def main(argv=None):
    config = parse_config(argv)
    final = config.train / "final"
    evaluation = runs.read_json(config.eval / "metrics.json")
    if MODEL not in evaluation["rows"]:
        raise SystemExit(f"{config.eval} has no row {MODEL!r}: evaluate with --encoder {MODEL}={final}")
    if evaluation["rows"][MODEL]["weights_sha256"] != encoders.weights_hash(final):
        raise SystemExit(f"{config.eval} scored other weights than {final}: evaluate the model again")

    with runs.RunRecord(config.out, config, "glyph.export"):
        config.to.mkdir(parents=True, exist_ok=True)
        for name in FOLDER_FILES:
            target = config.to / name
            if target.is_dir():
                shutil.rmtree(target)
            (shutil.copytree if (final / name).is_dir() else shutil.copy)(final / name, target)
        shutil.copy(config.train / "training_curve.png", config.to / "training_curve.png")

        texts = [t[key] for t in read_triples(config.corpus / "test.jsonl")
                 for key in ("anchor", "positive", "negative")][:config.parity_strings]
        exported, trained = fresh_process_embeddings(config.to, texts), fresh_process_embeddings(final, texts)
        if not np.array_equal(exported["sentence_transformers"], trained["sentence_transformers"]):
            raise SystemExit(f"{config.to} embeds differently from {final} after the copy")
        manual_gap = float(np.abs(exported["manual"] - exported["sentence_transformers"]).max())
        if manual_gap > 1e-5:
            raise SystemExit(f"a manual mean pool differs from SentenceTransformer by {manual_gap}")
        print(f"{config.to} loads in SentenceTransformer with no custom code, in a fresh process; a manual mean pool "
              f"over AutoModel matches it (max gap {manual_gap:.1e})")

        # A stock RobertaModel cannot compute its embedding-space id: it is computed here and written into config.json.
        space = embedding_space(trunk_hash(AutoModel.from_pretrained(config.to)))
        folder_config = runs.read_json(config.to / "config.json")
        runs.write_json(config.to / "config.json", {**folder_config, "embedding_space": space})
        parity = {}  # per GGUF dtype
        for dtype in ("f32", "f16"):
            path = gguf.export_gguf(config.to, config.to / f"{MODEL}-{dtype}.gguf", dtype, name=MODEL)
            parity[dtype] = check_gguf(config.to, path, texts, config.min_cosine)
            print(f"{path.name}: tokens identical on {parity[dtype]['tokens_identical']}/{len(texts)} strings, "
                  f"min cosine to PyTorch {parity[dtype]['min_cosine']:.6f}")
        export = {"parity_strings": len(texts), "manual_mean_pool_max_gap": manual_gap, "gguf": parity,
                  "llama_cpp_python": metadata.version("llama-cpp-python"),
                  "weights_sha256": encoders.weights_hash(config.to), "embedding_space": space,
                  "goal_win_rate": config.goal_win_rate, "goal_mrr_at_10": config.goal_mrr_at_10}
        runs.write_json(config.out / "metrics.json", export)
        path, card = card_from_records(config.out)
        path.write_text(card)
    print(f"wrote {path}\n")
    print(table_markdown(evaluation["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
