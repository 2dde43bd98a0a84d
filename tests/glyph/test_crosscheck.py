"""The independent glyph test set (b) of tools/glyph/crosscheck.py: its atoms avoid the training vocabulary, its
paraphrases keep and its mutations change the canonical form, every directional family has the hard
mirrored-paraphrase-vs-flipped-operator case, it is seeded, its surfaces vary, and evaluate scores it as it is."""

import json
import re
from collections import Counter

import pytest

from tools import runs
from tools.glyph import crosscheck, crosscheck_parts, evaluate
from tools.glyph.data import read_triples
from tools.glyph.generate import ClaimGenerator, Lexicon
from tools.glyph.grammar import (
    INVERSE,
    INVERSE_PAIRS,
    MIRROR,
    Atom,
    Binary,
    Not,
    Post,
    Quant,
    is_mirror_against_flip,
    parse,
    same_meaning,
    to_text,
)

TRIPLES = 450  # 30 per family
VOCABULARY = set(Lexicon.load(extra_words=8000).words)
DIRECTIONAL = [f"{a}/{b}" for a, b in INVERSE_PAIRS if a in MIRROR]


def generate(folder, data_dir, seed=0, triples=TRIPLES):
    assert crosscheck.main(["--data-dir", str(data_dir), "--out", str(folder), "--triples", str(triples),
                            "--seed", str(seed)]) == 0
    return read_triples(folder / "test.jsonl")


@pytest.fixture(scope="module")
def made(tmp_path_factory, data_dir):
    """(folder, triples) of seed 0."""
    folder = tmp_path_factory.mktemp("crosscheck") / "seed0"
    return folder, generate(folder, data_dir)


def nodes(tree):
    yield tree
    match tree:
        case Not(operand) | Post(_, operand):
            yield from nodes(operand)
        case Quant(_, _, body):
            yield from nodes(body)
        case Binary(_, left, right):
            yield from nodes(left)
            yield from nodes(right)


def atoms(text):
    tree = parse(text)
    variables = {n.var for n in nodes(tree) if isinstance(n, Quant)}
    return {n.name for n in nodes(tree) if isinstance(n, Atom) and n.name not in variables}


def mirrored_vs_flipped(triple):
    return is_mirror_against_flip(*(parse(triple[key]) for key in ("anchor", "positive", "negative")))


def symbols(text):
    return Counter(char for char in text if not (char.isalnum() or char in "_():" or char.isspace()))


def test_atoms_avoid_the_training_vocabulary(made, data_dir):
    _, triples = made
    names = set().union(*(atoms(t[key]) for t in triples for key in ("anchor", "positive", "negative")))
    words = {word for name in names for word in name.split("_")}
    assert len(names) > 500
    assert not names & VOCABULARY
    assert not words & VOCABULARY, sorted(words & VOCABULARY)[:10]
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+){1,2}", name) for name in names)  # 2-3 words of a-z
    assert not words & {"x", "y", "z"}
    caption_words = set(re.findall(r"[a-z]+", " ".join(crosscheck_parts.caption_texts(data_dir))))
    assert words <= caption_words  # every atom word is a word of the captions


def test_the_varied_training_atoms_hold_no_word_b_could_draw():
    """The varied-atoms lever (corpus --varied-share) adds number parts and made-up names to training: each holds a
    digit, so none is a word (b) draws, and (b) still shares no atom word with training."""
    train_words, _ = Lexicon.load(extra_words=8000).split(0.2, 0)
    generator = ClaimGenerator(train_words, 0, varied_share=1.0)
    added = set()
    for _ in range(500):
        triple = generator.triple()
        added |= {word for text in (triple.anchor, triple.negative) for name in atoms(text)
                  for word in name.split("_") if word not in VOCABULARY}
    assert len(added) > 100
    assert not any(crosscheck_parts.ATOM_WORD.fullmatch(word) for word in added), sorted(added)[:10]


def test_paraphrases_keep_and_mutations_change_the_meaning(made):
    _, triples = made
    for t in triples:
        assert same_meaning(t["anchor"], t["positive"]), t
        assert not same_meaning(t["anchor"], t["negative"]), t
        assert t["positive"] != t["anchor"] and t["rewrites"]
        assert parse(t["positive"]) != parse(t["anchor"])  # a structural rewrite, not only a new surface


def test_every_family_is_covered_and_balanced(made):
    _, triples = made
    counts = Counter(t["mutation"] for t in triples)
    expected = {f"{a}/{b}" for a, b in INVERSE_PAIRS} | {"¬ insert", "¬ remove", "⊥ inject"}
    assert set(counts) == expected
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == TRIPLES


def test_each_mutation_is_one_edit_of_its_family(made):
    _, triples = made
    for t in triples:
        before, after = symbols(t["anchor"]), symbols(t["negative"])
        change = {s: after[s] - before[s] for s in before | after if after[s] != before[s]}
        family = t["mutation"]
        if family == "¬ insert":
            assert change == {"¬": 1}, t
        elif family == "¬ remove":
            assert change == {"¬": -1}, t
        elif family == "⊥ inject":
            assert change == {"∧": 1, "⊥": 1}, t
        else:
            a, b = family.split("/")
            assert change in ({a: 1, b: -1}, {a: -1, b: 1}), t
        # the negative keeps the anchor's atoms in the anchor's order
        assert re.sub(r"[^a-z0-9_]", "", t["anchor"]) == re.sub(r"[^a-z0-9_]", "", t["negative"]), t


def test_directional_families_have_the_mirrored_vs_flipped_case(made):
    _, triples = made
    hard = Counter(t["mutation"] for t in triples if mirrored_vs_flipped(t))
    assert set(hard) == set(DIRECTIONAL)
    assert all(hard[family] >= 10 for family in DIRECTIONAL), hard  # hard_share 0.5 of 30


def test_surface_variants_occur(made):
    _, triples = made
    texts = [t[key] for t in triples for key in ("anchor", "positive", "negative")]
    binary = re.compile("[" + "".join(op for op in INVERSE if op not in "↑↓∀∃") + "≡⊕⊖∈∉]")
    tight = [t for t in texts if binary.search(t) and " " not in t]
    spaced = [t for t in texts if re.search(rf" {binary.pattern} ", t)]
    redundant = [t for t in texts if t.count("(") > to_text(parse(t), spaced=False).count("(")]
    assert len(tight) > 50 and len(spaced) > 50 and len(redundant) > 50
    for t in texts:  # every string is glyph notation
        parse(t)


def test_same_seed_same_file_other_seed_other_set(made, data_dir, tmp_path):
    folder, triples = made
    generate(tmp_path / "again", data_dir, seed=0)
    assert (tmp_path / "again" / "test.jsonl").read_bytes() == (folder / "test.jsonl").read_bytes()
    other = generate(tmp_path / "other", data_dir, seed=1)
    assert len({t["anchor"] for t in other} & {t["anchor"] for t in triples}) < 5
    metrics = runs.read_json(folder / "metrics.json")
    assert metrics["test_sha256"] == runs.file_sha256(folder / "test.jsonl")
    assert metrics["excluded_vocabulary"] == len(VOCABULARY) and metrics["atom_words"] > 1000


def test_evaluate_scores_it_unchanged(made, tmp_path):
    folder, _ = made
    assert evaluate.main(["--corpus", str(folder), "--out", str(tmp_path / "eval")]) == 0
    scores = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert scores["test_triples"] == TRIPLES
    random_row = scores["rows"]["random vectors"]
    assert 0.35 < random_row["win_rate"] < 0.65
    # 15 families, and the mirrored-vs-flipped case of each directional family in a row of its own
    assert set(random_row["families"]) == {*crosscheck.FAMILIES, *(f"{family} mirrored" for family in DIRECTIONAL)}


@pytest.mark.parametrize("argv, message", [
    (["--triples", "0"], "--triples must be at least 15"),
    (["--hard-share", "1.5"], "--hard-share"),
    (["--min-word-count", "0"], "--min-word-count"),
])
def test_bad_config_is_refused(argv, message, tmp_path, data_dir, capsys):
    with pytest.raises(SystemExit):
        crosscheck.main(["--data-dir", str(data_dir), "--out", str(tmp_path / "out"), *argv])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_data_dir_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        crosscheck.main(["--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert "nowhere" in error and "captions/flickr8k" in error
    with pytest.raises(SystemExit):  # no abbreviated flags
        crosscheck.main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--trip", "20"])
    assert "unrecognized arguments: --trip" in capsys.readouterr().err
