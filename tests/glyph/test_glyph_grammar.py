"""The glyph grammar's promises: printing round-trips, rewrites keep the canonical form, mutations change it."""

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.glyph.crosscheck import binary_depth  # the depth (b) reports, as a measure only
from tools.glyph.generate import ClaimGenerator, Lexicon
from tools.glyph.grammar import (
    BINARY,
    POSTFIX,
    QUANTIFIERS,
    Atom,
    Binary,
    Bottom,
    GlyphSyntaxError,
    Not,
    Post,
    Quant,
    canonical,
    is_mirror_against_flip,
    mirror_against_flip,
    mutations,
    parse,
    rewrites,
    same_meaning,
    to_text,
)

LEXICON = Lexicon.load()

atoms = st.sampled_from(["a", "b", "c", "retrieval_layer", "compression", "v5", "signal", "cue", "x"]).map(Atom)
trees = st.recursive(
    atoms | st.just(Bottom()),
    lambda inner: st.one_of(
        inner.map(Not),
        st.builds(Post, st.sampled_from(POSTFIX), inner),
        st.builds(Binary, st.sampled_from(BINARY), inner, inner),
        st.builds(Quant, st.sampled_from(QUANTIFIERS), st.sampled_from(["x", "y"]), inner),
    ),
    max_leaves=8,
)
claims = st.integers(0, 2**32 - 1).map(lambda seed: ClaimGenerator(LEXICON, seed).claim())


@given(trees, st.booleans())
def test_parse_of_print_is_identity(tree, spaced):
    assert parse(to_text(tree, spaced)) == tree


@given(trees, st.integers(0, 2**32 - 1))
def test_a_hand_varied_surface_parses_to_the_same_tree(tree, seed):
    assert parse(to_text(tree, hand=random.Random(seed))) == tree


def test_a_hand_varied_surface_varies_spaces_and_parentheses():
    tree = parse("a ∧ ¬b ⇒ c↑ ∨ d")
    surfaces = {to_text(tree, hand=random.Random(seed)) for seed in range(200)}
    assert to_text(tree) == "a∧¬b ⇒ c↑∨d" and len(surfaces) > 50
    assert any(" ∧ " in text for text in surfaces) and any("⇒c" in text for text in surfaces)  # any operator, or none
    assert any("(a)" in text or "¬(b)" in text for text in surfaces)  # parentheses it does not need


@given(trees)
def test_white_space_carries_no_meaning(tree):
    text = re.sub(r"([^a-z0-9_])", r"  \1 ", to_text(tree, spaced=False))  # spaces around every symbol
    assert parse(text) == tree


@given(trees)
def test_canonical_form_is_idempotent(tree):
    once = canonical(tree, LEXICON.synonyms)
    assert canonical(once, LEXICON.synonyms) == once


@settings(max_examples=200)
@given(trees)
def test_a_rewrite_never_changes_the_canonical_form(tree):
    key = canonical(tree, LEXICON.synonyms)
    for kind, rewritten in rewrites(tree, LEXICON.synonym_groups):
        assert canonical(rewritten, LEXICON.synonyms) == key, (kind, to_text(tree), to_text(rewritten))


@settings(max_examples=300)
@given(claims)
def test_a_mutation_always_changes_the_canonical_form(claim):
    key = canonical(claim, LEXICON.synonyms)
    edits = mutations(claim)
    assert edits
    for family, mutated in edits:
        assert canonical(mutated, LEXICON.synonyms) != key, (family, to_text(claim), to_text(mutated))


@settings(max_examples=100)
@given(claims)
def test_generated_claims_have_every_rewrite_and_mutation_kind_checked(claim):
    renamed = [tree for kind, tree in rewrites(claim, LEXICON.synonym_groups) if kind == "rename"]
    assert all(same_meaning(claim, tree, LEXICON.synonyms) for tree in renamed)
    assert not any(same_meaning(claim, tree, LEXICON.synonyms) for _, tree in mutations(claim))


@pytest.mark.parametrize(
    "a, b, same",
    [
        ("a → b", "b ← a", True),
        ("a → b", "a ← b", False),
        ("a⇒b", "¬b⇒¬a", True),
        ("a⇒b", "b⇒a", False),
        ("a⇒b", "¬a⇒¬b", False),
        ("¬(a∧b)", "¬a∨¬b", True),
        ("¬(a∧b)", "¬a∧¬b", False),
        ("¬¬a↑", "a↑", True),
        ("a↑", "a↓", False),
        ("¬a↑", "a↓", False),  # falling is not the negation of rising in this notation
        ("a≡b", "b≡a", True),
        ("a↔b", "b↔a", True),
        ("a↛b", "b↛a", False),
        ("signal⊕noise", "static⊕cue", True),  # synonyms: cue ~ signal, static ~ noise
        ("signal⊕noise", "signal⊖noise", False),
        ("∀x: x∈a ⇒ x↑", "∃x: x∈a ⇒ x↑", False),
        ("a ⇒ ⊥", "a ⇒ b", False),
    ],
)
def test_meaning_equality_on_known_pairs(a, b, same):
    assert same_meaning(a, b, LEXICON.synonyms) is same


@pytest.mark.parametrize(
    "text, position, message",
    [
        ("a ⇒", 3, "found the end"),
        ("a ⇒ B", 4, "unknown symbol 'B'"),
        ("(a ∧ b", 6, "expected ')'"),
        ("", 0, "empty claim"),
        ("a b", 2, "expected an operator"),
        ("∀: a", 1, "variable name"),
        ("a ⇒ ⇒ b", 4, "expected an atom"),
    ],
)
def test_bad_input_names_the_position(text, position, message):
    with pytest.raises(GlyphSyntaxError, match=re.escape(message)) as error:
        parse(text)
    assert error.value.position == position


def test_precedence_of_the_published_examples():
    tree = parse("v5⊃compression↑ ⇒ compression⊖attribution_edges")
    assert tree == Binary(
        "⇒",
        Binary("⊃", Atom("v5"), Post("↑", Atom("compression"))),
        Binary("⊖", Atom("compression"), Atom("attribution_edges")),
    )
    assert parse("¬a↑") == Not(Post("↑", Atom("a")))
    assert parse("a∨b∧c") == Binary("∨", Atom("a"), Binary("∧", Atom("b"), Atom("c")))


def test_lexicon_split_is_disjoint_by_synonym_group():
    train, held_out = LEXICON.split(0.2, seed=0)
    assert set(train.words).isdisjoint(held_out.words)
    assert set(train.words) | set(held_out.words) == set(LEXICON.words)
    assert all(set(group) <= set(held_out.words) for group in held_out.groups)
    assert LEXICON.split(0.2, seed=0) == (train, held_out) != LEXICON.split(0.2, seed=1)


def test_generator_is_seeded_and_its_triples_are_checked():
    first = [ClaimGenerator(LEXICON, 7).triple() for _ in range(3)]
    assert first == [ClaimGenerator(LEXICON, 7).triple() for _ in range(3)]
    generator = ClaimGenerator(LEXICON, 3)
    for _ in range(200):
        triple = generator.triple()
        assert same_meaning(triple.anchor, triple.positive, LEXICON.synonyms)
        assert not same_meaning(triple.anchor, triple.negative, LEXICON.synonyms)
        assert triple.anchor.replace(" ", "") != triple.positive.replace(" ", "")


def test_a_direction_case_mirrors_the_relation_whose_operator_its_mutation_flips():
    anchor = parse("a → b ∧ c")
    assert mirror_against_flip(anchor) == [("→/←", parse("b ∧ c ← a"), parse("a ← b ∧ c"))]
    assert is_mirror_against_flip(anchor, parse("b ∧ d ← a"), parse("a ← b ∧ c"))  # a renamed atom keeps the case
    assert not is_mirror_against_flip(anchor, parse("b ∧ c ← a"), parse("b ∧ c → a"))  # not that relation flipped
    assert not is_mirror_against_flip(anchor, parse("¬¬(b ∧ c) ← a"), parse("a ← b ∧ c"))  # another rewrite on top
    assert mirror_against_flip(parse("a ∧ b ↔ c")) == []


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_the_direction_share_of_the_generator(share):
    generator = ClaimGenerator(LEXICON, 5, direction_share=share)
    triples = [generator.triple() for _ in range(300)]
    cases = [is_mirror_against_flip(*(parse(text) for text in (t.anchor, t.positive, t.negative))) for t in triples]
    for triple, case in zip(triples, cases):
        assert same_meaning(triple.anchor, triple.positive, LEXICON.synonyms)
        assert not same_meaning(triple.anchor, triple.negative, LEXICON.synonyms)
        if triple.rewrites[0] == "mirror":  # the generator's direction cases, and only they, start with the mirror
            assert case and triple.rewrites == ("mirror", "rename")
    drawn = sum(t.rewrites[0] == "mirror" for t in triples) / len(triples)
    assert drawn == pytest.approx(share, abs=0.08)
    assert sum(cases) / len(cases) < 0.1 if share == 0 else drawn <= sum(cases) / len(cases)
    with pytest.raises(ValueError, match="direction_share"):
        ClaimGenerator(LEXICON, 5, direction_share=1.5)


def assert_meanings_checked(triples):
    """Every paraphrase means what its anchor means, and no mutation does."""
    for triple in triples:
        assert same_meaning(triple.anchor, triple.positive, LEXICON.synonyms)
        assert not same_meaning(triple.anchor, triple.negative, LEXICON.synonyms)


def drawn(count=100, **shares):
    """The first `count` triples of one generator (seed 5) with these shares."""
    generator = ClaimGenerator(LEXICON, 5, **shares)
    return [generator.triple() for _ in range(count)]


def test_the_hand_share_of_the_generator():
    house = drawn()
    assert drawn(hand_share=0.0) == house  # the same stream
    hand = drawn(hand_share=1.0)
    spaced_terms = re.compile(r" [∧∨≡≠⊃⊂≥≤∈∉⊕⊖] ")  # the house styles never space a term operator
    assert not any(spaced_terms.search(text) for t in house for text in (t.anchor, t.positive, t.negative))
    assert sum(bool(spaced_terms.search(t.anchor)) for t in hand) > 15  # a quarter: a space each side, .5 each
    assert_meanings_checked(hand)
    with pytest.raises(ValueError, match="hand_share"):
        ClaimGenerator(LEXICON, 5, hand_share=-0.1)


def test_the_decoy_share_moves_the_rename_from_the_paraphrase_to_the_mutation():
    plain = drawn()
    assert drawn(decoy_share=0.0) == plain  # the same stream
    assert all("rename" in t.rewrites and words(t.negative) == words(t.anchor) for t in plain
               if t.mutation != "⊥ inject")  # a changed word always told the paraphrase
    decoys = drawn(decoy_share=1.0)
    for triple in decoys:
        assert triple.rewrites and "rename" not in triple.rewrites and words(triple.positive) == words(triple.anchor)
        assert words(triple.negative) != words(triple.anchor)
        assert same_meaning(triple.anchor, triple.positive, LEXICON.synonyms)
        assert not same_meaning(triple.anchor, triple.negative, LEXICON.synonyms)
    with pytest.raises(ValueError, match="decoy_share"):
        ClaimGenerator(LEXICON, 5, decoy_share=2.0)


def test_the_varied_share_varies_the_atoms_not_the_meaning_checks():
    plain = drawn()
    assert drawn(varied_share=0.0) == plain  # the same stream
    generator = ClaimGenerator(LEXICON, 5, varied_share=1.0)
    varied = [generator.triple() for _ in range(200)]
    parts = [atom.split("_") for t in varied for atom in words(t.anchor)]
    assert max(map(len, parts)) == 5 and max(len(atom.split("_")) for t in plain for atom in words(t.anchor)) == 2
    new = {part for atom in parts for part in atom} - set(LEXICON.words) - {"x", "y", "z"}
    numbers = {part for part in new if re.fullmatch(r"[vnk]?[0-9]+", part)}
    names = {part for part in new if re.fullmatch(r"[a-z]{2,}[0-9][a-z]*", part)}
    assert len(numbers) > 20 and len(names) > 20 and new == numbers | names  # nothing else is new
    assert_meanings_checked(varied)
    with pytest.raises(ValueError, match="varied_share"):
        ClaimGenerator(LEXICON, 5, varied_share=-1.0)


def test_the_deep_share_makes_deeper_claims():
    plain = drawn()
    assert drawn(deep_share=0.0) == plain  # the same stream
    deep = drawn(deep_share=1.0)
    depth = {name: [binary_depth(parse(t.anchor)) for t in rows] for name, rows in (("plain", plain), ("deep", deep))}
    assert max(depth["plain"]) == 3 and max(depth["deep"]) == 4 and min(depth["deep"]) >= 3
    assert_meanings_checked(deep)
    with pytest.raises(ValueError, match="deep_share"):
        ClaimGenerator(LEXICON, 5, deep_share=1.5)


def words(text):
    return sorted(re.findall(r"[a-z][a-z0-9_]*", text))


def test_a_quantifier_at_the_end_of_a_left_operand_is_parenthesised():
    # found by test_parse_of_print_is_identity: ⊥→∀x:⊥→⊥ reads the quantifier's body as ⊥→⊥
    tree = Binary("→", Binary("→", Bottom(), Quant("∀", "x", Bottom())), Bottom())
    assert to_text(tree, spaced=False) == "(⊥→∀x:⊥)→⊥" and parse(to_text(tree, spaced=False)) == tree
