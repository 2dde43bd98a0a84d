"""Generate glyph-embedder-v2's data from the reference grammar and train its BPE tokenizer on it.

Usage:
    python -m tools.glyph.corpus --out runs/demo/glyph/corpus
    python -m tools.glyph.corpus --out runs/x --train-triples 2000 --test-triples 200 --vocab-size 800
    python -m tools.glyph.corpus --out runs/x --direction-share 0.25  # a quarter of the training triples: direction
    python -m tools.glyph.corpus --out runs/x --hand-share 0.5  # half of them printed as people vary the surface
    python -m tools.glyph.corpus --out runs/x --decoy-share 0.5  # half: the mutation renames, not the paraphrase
    python -m tools.glyph.corpus --out runs/x --varied-share 0.5  # half: longer atoms, numbers, made-up names
    python -m tools.glyph.corpus --out runs/x --deep-share 0.25  # a quarter: chains of 5-8 atoms (depth 3-4)
    python -m tools.glyph.corpus --out runs/x --spaces-apart  # a BPE whose tokens hold no white space

The atom vocabulary (tools/glyph/words.txt plus common English words) is split by group into training and held-out
words. Training triples (anchor, paraphrase, mutation) use training words only. Every atom of a test triple holds a
held-out word, so no test atom was ever seen by the tokenizer or the model; a test paraphrase's rename swaps a word
for a synonym from the training groups (a synonym relation between two never-seen words could not be inferred).
Every triple is checked by the canonical form as it is generated (a positive means the same as its anchor, a
mutation does not). --direction-share makes that share of the training and validation triples direction cases (the
paraphrase mirrors a directed relation, `b ← a` for `a → b`, and the mutation flips its operator in the anchor's
order, `a ← b`); --hand-share prints that share of them with a surface as people vary it (a space on either side of
any operator or none, spare parentheses: grammar.to_text's hand) instead of the two house styles; --decoy-share
moves that share's rename from the paraphrase (then made of structural rewrites only) to the mutation, so that a
changed atom word does not tell the paraphrase; --varied-share gives that share varied atoms (up to four words, a
number part such as `layer_12`, a made-up code-like name such as `tobe3li`), so that the operators, not the atoms'
surface, must tell the claims apart; --deep-share makes that share chains of five to eight atoms, deeper than the
other claims. The test triples never change with any of them. --spaces-apart trains a BPE that merges no white space
into a token, so `a ⇒ b` and `a⇒b` share every token but the spaces (the triples do not change).

The out folder gets: train.jsonl, validation.jsonl (training atoms, not in the corpus) and test.jsonl (one triple
per line: anchor, positive, negative, rewrites, mutation), corpus.txt (every unique training string, one per line:
the MLM corpus), tokenizer/ (byte-level BPE trained on corpus.txt only, RoBERTa special tokens), metrics.json (counts
per rewrite and mutation kind, direction cases, which operators are single tokens) and the run record.
"""

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from tools import runs
from tools.glyph.data import write_triples
from tools.glyph.generate import ClaimGenerator, Lexicon
from tools.glyph.grammar import OPERATORS
from tools.glyph.metrics import family_labels
from tools.glyph.tokenizer import train_tokenizer


@dataclass
class Config:
    out: Path = field(metadata={"help": "run folder"})
    train_triples: int = 40000  # training (anchor, positive, mutation) triples over training atoms
    validation_triples: int = 1000  # more over training atoms, kept out of the corpus: the training run's monitor
    test_triples: int = 2000  # evaluation triples over held-out atoms
    extra_words: int = 8000  # common English words (one-word groups) added to the synonym groups of words.txt
    held_out_fraction: float = 0.2  # share of word groups whose words only appear in test triples
    vocab_size: int = 6000  # BPE vocabulary, special tokens included
    max_length: int = 256  # the tokenizer's model_max_length (the model's positions)
    seed: int = 0  # the word split and the generators (test triples use seed + 1)
    direction_share: float = 0.0  # share of training and validation triples that are direction cases (0-1)
    hand_share: float = 0.0  # share of training and validation triples printed with a hand-varied surface (0-1)
    decoy_share: float = 0.0  # share of training and validation triples whose mutation renames, not the paraphrase
    varied_share: float = 0.0  # share of training and validation triples with varied atoms (generate.varied_atom)
    deep_share: float = 0.0  # share of training and validation triples whose claim chains 5-8 atoms (depth 3-4)
    spaces_apart: bool = False  # the BPE merges no white space into a token (tools/glyph/tokenizer.py)


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if min(config.train_triples, config.validation_triples, config.test_triples) < 1:
        raise SystemExit("--train-triples, --validation-triples and --test-triples must be positive")
    if not 0 < config.held_out_fraction < 1:
        raise SystemExit("--held-out-fraction must be in (0, 1)")
    for name in ("direction_share", "hand_share", "decoy_share", "varied_share", "deep_share"):
        if not 0 <= getattr(config, name) <= 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be in [0, 1]")
    return config


def generate(lexicon, count, seed, desc, known=None, **shares):
    """`count` triples with unique anchors (ClaimGenerator's lexicon, known synonyms and shares)."""
    generator, triples, anchors = ClaimGenerator(lexicon, seed, known, **shares), [], set()
    with tqdm(total=count, desc=desc, unit="triple") as bar:
        while len(triples) < count:
            triple = generator.triple()
            if triple.anchor not in anchors:
                anchors.add(triple.anchor)
                triples.append(triple)
                bar.update()
    return triples


def word_split(config):
    """(training words, held-out words) of a corpus config: the lexicon split by word group."""
    return Lexicon.load(extra_words=config.extra_words).split(config.held_out_fraction, config.seed)


def held_out_triples(config, words=None):
    """The test triples of a corpus config, over held-out words (seed + 1). They do not depend on the training
    triples, so a check of shipped weights can regenerate them from the corpus's config.json alone."""
    train_words, test_words = words or word_split(config)
    return generate(test_words, config.test_triples, config.seed + 1, "test triples", known=train_words)


def direction_cases(triples):
    """{"<family> mirrored": count} of the direction cases among `triples` (metrics.family_labels)."""
    labels = family_labels([dataclasses.asdict(triple) for triple in triples])
    return dict(Counter(label for label in labels if label.endswith(" mirrored")).most_common())


def operator_token_counts(tokenizer):
    """{operator: how many tokens it takes written alone} for every operator symbol."""
    return {op: len(tokenizer.tokenize(op)) for op in OPERATORS}


def main(argv=None):
    config = parse_config(argv)
    if runs.run_state(config.out, config) == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    train_words, test_words = word_split(config)
    with runs.RunRecord(config.out, config, "glyph.corpus"):
        train = generate(train_words, config.train_triples + config.validation_triples, config.seed, "train triples",
                         direction_share=config.direction_share, hand_share=config.hand_share,
                         decoy_share=config.decoy_share, varied_share=config.varied_share,
                         deep_share=config.deep_share)
        train, validation = train[:config.train_triples], train[config.train_triples:]
        test = held_out_triples(config, (train_words, test_words))
        write_triples(config.out / "train.jsonl", train)
        write_triples(config.out / "validation.jsonl", validation)
        write_triples(config.out / "test.jsonl", test)
        corpus = sorted({text for t in train for text in (t.anchor, t.positive, t.negative)})
        (config.out / "corpus.txt").write_text("\n".join(corpus) + "\n")

        tokenizer = train_tokenizer(corpus, config.vocab_size, config.max_length, config.spaces_apart)
        tokenizer.save_pretrained(config.out / "tokenizer")
        operators = operator_token_counts(tokenizer)
        lengths = [len(ids) for ids in tokenizer(corpus)["input_ids"]]
        metrics = {
            "words": {"train": len(train_words.words), "held_out": len(test_words.words),
                      "held_out_groups": len(test_words.groups)},
            "triples": {"train": len(train), "validation": len(validation), "test": len(test)},
            "test_sha256": runs.file_sha256(config.out / "test.jsonl"),
            "corpus_strings": len(corpus),
            "rewrites": {name: dict(Counter(k for t in rows for k in t.rewrites).most_common())
                         for name, rows in (("train", train), ("test", test))},
            "mutations": {name: dict(Counter(t.mutation for t in rows).most_common())
                          for name, rows in (("train", train), ("test", test))},
            "direction_cases": {name: direction_cases(rows) for name, rows in (("train", train), ("test", test))},
            "tokenizer": {"vocab_size": len(tokenizer), "spaces_apart": config.spaces_apart, "max_tokens": max(lengths),
                          "mean_tokens": round(sum(lengths) / len(lengths), 2),
                          "single_token_operators": sum(count == 1 for count in operators.values()),
                          "operators": len(operators), "operator_token_counts": operators},
        }
        if max(lengths) > config.max_length:
            raise SystemExit(f"a corpus string has {max(lengths)} tokens, more than the model's {config.max_length}")
        runs.write_json(config.out / "metrics.json", metrics)
    split = [op for op, count in operators.items() if count > 1]
    print(f"{len(train)} train / {len(test)} test triples, {len(corpus)} corpus strings; tokenizer of "
          f"{len(tokenizer)}: {metrics['tokenizer']['single_token_operators']} of {len(operators)} operators are "
          f"single tokens (split: {' '.join(split) or 'none'}); wrote {config.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
