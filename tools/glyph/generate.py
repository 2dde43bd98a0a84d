"""Seeded generation of glyph claims, paraphrase pairs and mutation triples over an English-word atom vocabulary.

Every pair this module returns is checked by the canonical form: a positive means the same as its anchor, a mutation
does not. Atoms are one or two English words joined by '_': the synonym groups of `words.txt` (which renames draw
on) plus, as one-word groups, common whole words of bert-base-uncased's vocabulary (from the installed
all-MiniLM-L6-v2 package), which give the corpus a realistic spread of names. The vocabulary is split by group into
training and held-out words, so evaluation strings share no atom word with training strings. A varied claim
(varied_share) has atoms of up to four words, number parts and made-up code-like names.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tools.glyph.grammar import (
    LEVELS,
    POSTFIX,
    QUANTIFIERS,
    Atom,
    Binary,
    Bottom,
    Node,
    Not,
    Post,
    Quant,
    canonical,
    mirror_against_flip,
    mutations,
    random_edit,
    rewrites,
    to_text,
)

WORDS = Path(__file__).with_name("words.txt")
CHAIN_OPS = LEVELS[0]  # the loosest operators: implication and causal arrows join a claim's two sides
TERM_OPS = LEVELS[1] + LEVELS[2] + LEVELS[3]  # ∨ ∧ and the relations build the sides
VARIABLES = ("x", "y", "z")
VARIED_WORDS = (1, 2, 2, 3, 3, 4)  # words per atom of a varied claim (a house claim's atoms have 1-2)
NUMBERED, MADE_UP = 0.2, 0.2  # shares of a varied claim's atoms with a number part, and with a made-up name
DEEP_ATOMS = (5, 6, 7, 8)  # atoms of a deep claim's chain (binary depth 3-4; a house claim's 2-5 reach 3)
SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")  # of made-up names


@dataclass(frozen=True)
class Lexicon:
    """Synonym groups of English words; the first word of a group is its canonical name."""

    groups: tuple[tuple[str, ...], ...]

    @classmethod
    def load(cls, path: Path = WORDS, extra_words: int = 0) -> Lexicon:
        """The synonym groups of `path`, plus `extra_words` common English words as one-word groups."""
        groups = tuple(
            tuple(line.split()) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
        )
        if extra_words:
            listed = {word for group in groups for word in group}
            groups += tuple((word,) for word in common_english_words(extra_words, exclude=listed))
        words = [word for group in groups for word in group]
        repeated = sorted({word for word in words if words.count(word) > 1})
        if repeated:
            raise ValueError(f"{path}: words in more than one synonym group: {repeated}")
        bad = [word for word in words if not word.isalpha() or not word.islower() or word in VARIABLES]
        if bad:
            raise ValueError(f"{path}: atom words must be lower-case letters only: {bad}")
        return cls(groups)

    @cached_property
    def words(self) -> tuple[str, ...]:
        return tuple(word for group in self.groups for word in group)

    @cached_property
    def synonyms(self) -> dict[str, str]:
        """word -> its group's canonical name (what `grammar.canonical` takes)."""
        return {word: group[0] for group in self.groups for word in group}

    @cached_property
    def renamable(self) -> tuple[str, ...]:
        """Words with at least one synonym."""
        return tuple(word for group in self.groups if len(group) > 1 for word in group)

    @cached_property
    def synonym_groups(self) -> dict[str, tuple[str, ...]]:
        """word -> every word of its group (what `grammar.rewrites` takes for renames)."""
        return {word: group for group in self.groups for word in group}

    def split(self, held_out_fraction: float, seed: int) -> tuple[Lexicon, Lexicon]:
        """(training, held-out) lexicons with disjoint synonym groups."""
        if not 0 < held_out_fraction < 1:
            raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
        order = list(self.groups)
        random.Random(seed).shuffle(order)
        cut = max(1, round(len(order) * held_out_fraction))
        return Lexicon(tuple(sorted(order[cut:]))), Lexicon(tuple(sorted(order[:cut])))


def common_english_words(count: int, exclude: set[str]) -> list[str]:
    """`count` whole lower-case words (3-12 letters) from bert-base-uncased's vocabulary, in its order, skipping
    the first 300 words after the specials (function words such as 'the', 'which')."""
    from tools import teachers

    vocabulary = (teachers.minilm_l6_folder() / "vocab.txt").read_text().splitlines()
    candidates = [token for token in vocabulary[1996 + 300:] if token.isascii() and token.isalpha()
                  and token.islower() and 3 <= len(token) <= 12 and token not in exclude and token not in VARIABLES]
    if len(candidates) < count:
        raise ValueError(f"the vocabulary has only {len(candidates)} candidate words, {count} asked for")
    return candidates[:count]


@dataclass(frozen=True)
class Triple:
    anchor: str
    positive: str
    negative: str
    rewrites: tuple[str, ...]  # the rewrite kinds that made the positive, in order
    mutation: str  # the mutation family that made the negative (e.g. '⇒/⇐', '¬ insert')


class ClaimGenerator:
    """Random claims over one lexicon. Atoms within a claim are distinct (even after synonym renaming), so no
    relation links a thing to itself (which would make a mirror swap meaningless).

    lexicon: the words atoms are made of. known: the synonym groups renames draw on (default: lexicon). For held-out
    atoms, known is the training lexicon: every atom is new (it holds a held-out word), but a rename swaps a word for
    a synonym the model was trained on, since a synonym relation between two never-seen words cannot be inferred.
    direction_share: the share of triples that are direction cases (grammar.mirror_against_flip: the paraphrase
    mirrors a directed relation, the mutation flips its operator in the anchor's order); 0 draws none and leaves the
    random stream as it was before the option existed. hand_share: the share of triples whose three strings are each
    printed with a surface as people vary it (grammar.to_text's hand: spaces beside any operator, spare parentheses)
    instead of the two house styles; 0 likewise leaves the stream as it was. decoy_share: the share of triples
    (direction cases aside) whose rename is a decoy: the paraphrase keeps every atom word (structural rewrites only)
    and the mutation renames one, so that a changed atom word does not tell the paraphrase; 0 leaves the stream as it
    was. varied_share: the share of triples whose atoms are varied (`varied_atom`: up to four words, a number part, a
    made-up name), so that the operators, not the atoms' surface, tell a claim; 0 leaves the stream as it was.
    deep_share: the share of triples whose claim is a chain of five to eight atoms (binary depth 3-4, deeper than any
    other claim); 0 leaves the stream as it was.
    """

    def __init__(self, lexicon: Lexicon, seed: int, known: Lexicon | None = None, direction_share: float = 0.0,
                 hand_share: float = 0.0, decoy_share: float = 0.0, varied_share: float = 0.0,
                 deep_share: float = 0.0):
        for name, share in (("direction_share", direction_share), ("hand_share", hand_share),
                            ("decoy_share", decoy_share), ("varied_share", varied_share), ("deep_share", deep_share)):
            if not 0 <= share <= 1:
                raise ValueError(f"{name} must be within [0, 1], got {share}")
        self.lexicon, self.known, self.rng = lexicon, known or lexicon, random.Random(seed)
        self.direction_share, self.hand_share, self.decoy_share = direction_share, hand_share, decoy_share
        self.varied_share, self.deep_share = varied_share, deep_share
        self.synonyms = {**self.lexicon.synonyms, **self.known.synonyms}  # meaning is decided over all the words

    def atoms(self, count: int, varied: bool = False) -> list[Atom]:
        """`count` atoms; the first one holds a word with a known synonym, so every claim can be renamed. varied: the
        others are `varied_atom`s, and the first gets up to two more words."""
        first = [self.rng.choice(self.known.renamable)]
        if self.known is self.lexicon:
            first += self.rng.sample(self.lexicon.words, self.rng.choice((0, 1, 2) if varied else (0, 1, 1)))
        else:  # and a held-out word, so that no atom of the claim was ever seen
            first.insert(self.rng.randrange(2), self.rng.choice(self.lexicon.words))
        words = [first]
        while len(words) < count:
            words.append(self.varied_atom() if varied
                         else self.rng.sample(self.lexicon.words, self.rng.choice((1, 2, 2))))
            meanings = [tuple(self.synonyms.get(word, word) for word in atom) for atom in words]
            if len(set(meanings)) < len(meanings):
                words.pop()
        return [Atom("_".join(atom)) for atom in self.rng.sample(words, count)]

    def varied_atom(self) -> list[str]:
        """The parts of an atom of a varied claim: one to four lexicon words, and sometimes a number part as the last
        (`layer_12`, `stage_v5`) or a made-up name in place of one of them (`gravel_tobe3li`)."""
        parts = self.rng.sample(self.lexicon.words, self.rng.choice(VARIED_WORDS))
        roll = self.rng.random()
        if roll < NUMBERED:
            parts.append(self.rng.choice(("", "", "v", "n", "k")) + str(self.rng.randrange(1, 1000)))
        elif roll < NUMBERED + MADE_UP:
            parts[self.rng.randrange(len(parts))] = self.made_up_name()
        return parts

    def made_up_name(self) -> str:
        """A code-like name that no word list holds: two or three syllables with a digit after the first (`tobe3li`,
        `kalu7`). Holding a digit, it is no lexicon word, and no word test set (b) draws (its atom words are
        letters only)."""
        syllables = [self.rng.choice(SYLLABLES) for _ in range(self.rng.choice((2, 3, 3)))]
        syllables.insert(self.rng.randrange(1, len(syllables) + 1), str(self.rng.randrange(10)))
        return "".join(syllables)

    def leaf(self, atom: Node) -> Node:
        roll = self.rng.random()
        if roll < 0.3:
            return Post(self.rng.choice(POSTFIX), atom)
        if roll < 0.42:
            return Not(atom)
        return atom

    def side(self, atoms: list[Atom]) -> Node:
        """One side of a claim: a leaf, or two leaves joined by a term operator, sometimes negated or nested."""
        if len(atoms) == 1:
            return self.leaf(atoms[0])
        left, right = self.side(atoms[: len(atoms) // 2]), self.side(atoms[len(atoms) // 2:])
        node = Binary(self.rng.choice(TERM_OPS), left, right)
        roll = self.rng.random()
        if roll < 0.12:
            return Not(node)
        if roll < 0.2:
            return Post(self.rng.choice(POSTFIX), node)
        return node

    def claim(self, varied: bool = False, deep: bool = False) -> Node:
        """A random claim; varied: over varied atoms; deep: a chain of DEEP_ATOMS atoms."""
        shape = 1.0 if deep else self.rng.random()
        if shape < 0.1:  # a quantified rule: ∀x: x∈set ⇒ x↑
            var, (kind, effect) = Atom(self.rng.choice(VARIABLES)), self.atoms(2, varied)
            member = Binary(self.rng.choice(("∈", "∉")), var, kind)
            body = Binary(self.rng.choice(CHAIN_OPS), member, self.rng.choice((Post(self.rng.choice(POSTFIX), var),
                                                                               Binary("⊃", var, effect))))
            return Quant(self.rng.choice(QUANTIFIERS), var.name, body)
        if shape < 0.15:  # a contradiction rule: a∧¬b ⇒ ⊥
            first, second = self.atoms(2, varied)
            return Binary(self.rng.choice(("⇒", "→", "⊢")), Binary("∧", first, Not(second)), Bottom())
        if shape < 0.3:  # a bare relation
            return self.side(self.atoms(2, varied))
        atoms = self.atoms(self.rng.choice(DEEP_ATOMS if deep else (2, 3, 3, 4, 4, 5)), varied)
        cut = self.rng.randint(1, len(atoms) - 1)
        return Binary(self.rng.choice(CHAIN_OPS), self.side(atoms[:cut]), self.side(atoms[cut:]))

    def text(self, node: Node, hand: bool) -> str:
        """Print with a random spacing style (white space carries no meaning, so it must not be a cue); hand: with a
        surface as people vary it."""
        return to_text(node, hand=self.rng) if hand else to_text(node, spaced=self.rng.random() < 0.7)

    def triple(self) -> Triple:
        """An anchor, a paraphrase of it and a one-edit mutation of it, all checked by the canonical form.

        The paraphrase renames one atom word to a known synonym and applies one or two other rewrites, so it is further
        from the anchor on the surface than the mutation is (character 3-gram Jaccard scores near 0 on the triples):
        only meaning can tell them apart. A direction case (direction_share of the triples) mirrors one directed
        relation and renames a word; its mutation flips that relation's operator in place. A decoy (decoy_share of the
        others) gives the rename to the mutation instead, and the paraphrase is one or two structural rewrites.
        """
        direction = self.direction_share > 0 and self.rng.random() < self.direction_share
        hand = self.hand_share > 0 and self.rng.random() < self.hand_share
        decoy = not direction and self.decoy_share > 0 and self.rng.random() < self.decoy_share
        varied = self.varied_share > 0 and self.rng.random() < self.varied_share
        deep = self.deep_share > 0 and self.rng.random() < self.deep_share
        while True:
            anchor = self.claim(varied, deep)
            key = canonical(anchor, self.synonyms)
            case = None  # or (family, mirrored, flipped) of a direction case
            if direction:
                cases = mirror_against_flip(anchor)
                if not cases:  # no directed relation in this claim
                    continue
                case = self.rng.choice(cases)
            start = anchor if case is None else case[1]
            renames = [edit for edit in rewrites(start, self.known.synonym_groups) if edit[0] == "rename"]
            if not renames:  # a quantified rule may leave the renamable atom out
                continue
            if decoy:  # the rename goes to the mutation below
                positive, kinds = start, []
            else:
                kind, positive = random_edit(renames, self.rng)
                kinds = [kind] if case is None else ["mirror", kind]
            for _ in range(self.rng.choice((1, 2)) if case is None else 0):
                kind, positive = random_edit([edit for edit in rewrites(positive) if edit[0] != "rename"], self.rng)
                kinds.append(kind)
            if canonical(positive, self.synonyms) != key:
                raise AssertionError(f"a rewrite changed the meaning: {to_text(anchor)} -> {to_text(positive)}")
            family, negative = random_edit(mutations(anchor), self.rng) if case is None else case[::2]
            if decoy:
                renames = [edit for edit in rewrites(negative, self.known.synonym_groups) if edit[0] == "rename"]
                if not renames:  # the mutation replaced the renamable atom (⊥ inject)
                    continue
                negative = random_edit(renames, self.rng)[1]
            if canonical(negative, self.synonyms) == key:
                raise AssertionError(f"a mutation kept the meaning: {to_text(anchor)} -> {to_text(negative)}")
            return Triple(self.text(anchor, hand), self.text(positive, hand), self.text(negative, hand), tuple(kinds),
                          family)
