"""A second glyph test set (b), written independently of the training generator, to check that glyph-embedder-v2
generalises past its own generator (the held-out test set (a) comes from tools/glyph/corpus.py).

Usage:
    python -m tools.glyph.crosscheck --data-dir ../shared/data --out runs/demo/glyph/crosscheck --triples 2000 --seed 0
    python -m tools.glyph.evaluate --corpus runs/demo/glyph/crosscheck --out runs/demo/glyph/crosscheck-eval \\
        --encoder glyph-embedder-v2=runs/demo/glyph/train/final

Nothing here comes from the training generator but the vocabulary it must avoid (`Lexicon.load(...).words`): the
atoms, the claim shapes, the paraphrases and the mutations are this file's own code; only the reference grammar
(tools/glyph/grammar.py: parse, LEVELS, MIRROR, INVERSE, canonical form) is shared, and it judges every triple.

Atoms: 2- and 3-word phrases (`shirtless_man`, `lush_greenery`, `snowboarder_jumps_high`) read as runs of adjacent
words in the Flickr8k captions and the ImageInWords descriptions of the data folder. A word qualifies when it is
lower-case ascii letters only, 3+ letters, occurs at least `min_word_count` times, is no English function word
(STOPWORDS) and no word of the training vocabulary (tools.glyph.generate.Lexicon.load(extra_words=8000).words), so
the variables x, y, z and every training word are out. Each claim draws distinct atoms, 2-word phrases 70% of the
time and 3-word phrases 30%.

Claims (own shape and operator frequencies, not a uniform draw): binary nesting depth 1 / 2 / 3 / 4 with weights
2 / 4 / 3 / 1 (a quantifier's guard adds one or two; metrics.json counts the depths drawn); a child stays at its
parent's binding level 35% of the time, binds tighter 50% and looser 15% (so brackets are needed); causal and
implication arrows (→ ⇒) outweigh their mirrors and the rarer ∵ ∴ ⊢ ⊣ ↔ ↛ (OPERATOR_WEIGHTS); leaves take a
postfix ↑/↓ 25% of the time and a ¬ 15%, a group 10% / 5%; ⊥ is a leaf 3% of the time; 15% of claims are
quantified (`∀x: x∈shirtless_man ⇒ x↑`), and a chain's right operand is quantified 5%. A claim lacking a site for
its family gets one (an operator of the pair at a random group, a ↑/↓ on an atom, a ¬ on a node, a quantifier).

Surface (white space and redundant brackets carry no meaning): each string gets a spacing style (tight `a→b`,
spaced `a → b` everywhere, hand-written `a∧b ⇒ c`, mixed per operator, one-sided gaps included) and, 40% of the time,
redundant brackets around a quarter of its groups (`(a)∧b`, `((a∧b)) ⇒ c`). A negative keeps its anchor's surface,
so it is one edit away on the surface; a paraphrase gets a fresh one. Every string is checked to parse back to the
tree it was printed from.

Paraphrases (the positive): 1 to 3 structural rewrites (mirror a directed relation `b ← a` for `a → b`, swap a
symmetric relation's sides, add or remove a double negation, De Morgan, contrapositive of ⇒), drawn by kind first,
then by site, plus the new surface; `rewrites` names them, then "spacing" when the positive's spacing style is not
the anchor's and "brackets" when either string has redundant brackets. Every positive has the anchor's canonical
form (grammar.same_meaning), or it is drawn again.

Mutations (the negative): one meaning-flipping edit, labelled by family: swap an operator with its inverse (each
pair of grammar.INVERSE_PAIRS is a family, named as grammar names them: '→/←', '⇒/⇐', ...), '¬ insert', '¬ remove'
and '⊥ inject'. Every negative has a canonical form other than the anchor's, or it is drawn again. For each
directional family (→ ⇒ ⊃ ≥ ∴ ⊢ and their mirrors) a `hard_share` of its triples is the hard case: the positive
mirrors exactly the mutated relation (atoms reordered, operator mirrored: `b ← a`) and the negative flips its
operator in place (`a ← b` for `a → b`), so the negative keeps the anchor's word order and the positive does not.

Balance: the 15 families get `triples // 15` triples each and the first `triples % 15` of them one more (so counts
differ by at most one); the file is shuffled. Anchors are unique by canonical form. The same seed gives the same
file, byte for byte.

The out folder gets test.jsonl (anchor, positive, negative, rewrites, mutation: the fields of the project's
triples, so tools/glyph/evaluate.py scores it as it is), metrics.json (counts per family, hard cases, atoms,
vocabulary sizes, depths, operators, surfaces, test_sha256) and the run record.
"""

import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tools import runs
from tools.glyph.crosscheck_parts import (FLICKR8K, VARIABLES, Surface, atom_names, atom_source, binary_depth, mutate,
                                         mutation_sites, negatable, node_at, positions, replace, rewrite,
                                         rewrite_sites, weighted)
from tools.glyph.data import write_triples
from tools.glyph.generate import Lexicon  # the one thing taken from the training generator: the words to avoid
from tools.glyph.grammar import (
    INVERSE_PAIRS,
    LEVELS,
    MIRROR,
    NOT,
    Atom,
    Binary,
    Bottom,
    Not,
    Post,
    Quant,
    canonical,
    parse,
    same_meaning,
    to_text,
)

FAMILIES = tuple(f"{a}/{b}" for a, b in INVERSE_PAIRS) + ("¬ insert", "¬ remove", "⊥ inject")
DIRECTIONAL = tuple(f"{a}/{b}" for a, b in INVERSE_PAIRS if a in MIRROR)  # the hard case's families
TRAINING_EXTRA_WORDS = 8000  # the training vocabulary to avoid: Lexicon.load(extra_words=8000).words
IMAGEINWORDS = Path("captions") / "imageinwords"

DEPTH_WEIGHTS = {1: 2, 2: 4, 3: 3, 4: 1}  # binary nesting depth of a claim
OPERATOR_WEIGHTS = (  # per binding level of grammar.LEVELS, loosest first
    {"→": 5, "⇒": 5, "←": 2, "⇐": 2, "↔": 2, "↛": 1, "∵": 1, "∴": 1, "⊢": 1, "⊣": 1},
    {"∨": 1},
    {"∧": 1},
    {"≡": 2, "≠": 1, "⊃": 2, "⊂": 1, "≥": 2, "≤": 1, "∈": 2, "∉": 1, "⊕": 1, "⊖": 1},
)
LEVEL_MOVES = {"same": 0.35, "tighter": 0.5, "looser": 0.15}  # a child's binding level against its parent's
LEAF_POSTFIX, LEAF_NOT, LEAF_BOTTOM = 0.25, 0.15, 0.03  # leaf decorations
GROUP_NOT, GROUP_POSTFIX = 0.10, 0.05  # decorations of a binary group
QUANTIFIED, NESTED_QUANTIFIER = 0.15, 0.05  # claims wrapped in ∀/∃; a chain's right operand quantified
THREE_WORD_ATOMS = 0.3  # share of atoms drawn from the 3-word phrases
STYLES = {"tight": 0.25, "spaced": 0.3, "hand": 0.2, "mixed": 0.25}  # spacing style of a string
BRACKETED, BRACKET_RATE = 0.4, 0.25  # strings with redundant brackets; the share of groups they bracket
REWRITE_COUNTS = {1: 0.55, 2: 0.35, 3: 0.10}  # structural rewrites per paraphrase
ATTEMPTS = 200  # draws per triple before giving up (a bug, not bad luck)


@dataclass
class Config:
    out: Path = field(metadata={"help": "run folder: test.jsonl, metrics.json, the run record"})
    data_dir: Path = field(default_factory=runs.default_data_dir, metadata={
        "help": "shared data folder (captions/flickr8k, imageinwords): ../shared/data or BUNDLE_DATA_DIR"})
    triples: int = 2000  # test triples, balanced over FAMILIES (at least one each)
    seed: int = 0  # every draw: atoms, claims, rewrites, mutations, surfaces, order
    hard_share: float = 0.5  # share of each directional family's triples that are the mirrored-vs-flipped case
    min_word_count: int = 3  # a caption word is an atom word when it occurs at least this often (typos drop out)

    def __post_init__(self):
        self.out, self.data_dir = Path(self.out), Path(self.data_dir)
        if self.triples < len(FAMILIES):
            raise ValueError(f"--triples must be at least {len(FAMILIES)} (one per family), got {self.triples}")
        if not 0 <= self.hard_share <= 1:
            raise ValueError(f"--hard-share must be within [0, 1], got {self.hard_share}")
        if self.min_word_count < 1:
            raise ValueError(f"--min-word-count must be positive, got {self.min_word_count}")
        for needed in (FLICKR8K, IMAGEINWORDS):
            if not (self.data_dir / needed).exists():
                raise ValueError(f"{self.data_dir} has no {needed}: point --data-dir at the shared data "
                                 f"(../shared/data or BUNDLE_DATA_DIR)")


# ---------------------------------------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------------------------------------


class ClaimBuilder:
    """Random claims with this file's depth and operator frequencies; atoms distinct within a claim."""

    def __init__(self, source, rng):
        self.source, self.rng = source, rng

    def atom(self, used):
        while True:
            size = 3 if self.rng.random() < THREE_WORD_ATOMS else 2
            name = self.rng.choice(self.source.phrases[size])
            if name not in used:
                used.add(name)
                return Atom(name)

    def leaf(self, used):
        if self.rng.random() < LEAF_BOTTOM:
            return Bottom()
        node = self.atom(used)
        if self.rng.random() < LEAF_POSTFIX:
            node = Post(self.rng.choice("↑↑↑↓↓"), node)
        if self.rng.random() < LEAF_NOT:
            node = Not(node)
        return node

    def level(self, parent_level):
        move = weighted(self.rng, LEVEL_MOVES)
        if move == "tighter" and parent_level < len(LEVELS) - 1:
            return self.rng.randint(parent_level + 1, len(LEVELS) - 1)
        if move == "looser" and parent_level > 0:
            return self.rng.randint(0, parent_level - 1)
        return parent_level

    def group(self, depth, level, used, variables):
        if depth == 0:
            return self.leaf(used)
        op = weighted(self.rng, OPERATOR_WEIGHTS[level])
        deep, shallow = depth - 1, self.rng.randint(0, depth - 1)
        sides = (deep, shallow) if self.rng.random() < 0.5 else (shallow, deep)
        left = self.group(sides[0], self.level(level), used, variables)
        right = self.group(sides[1], self.level(level), used, variables)
        if level == 0 and self.rng.random() < NESTED_QUANTIFIER:
            right = self.quantified(right, used, variables)
        node = Binary(op, left, right)
        if self.rng.random() < GROUP_POSTFIX:
            node = Post(self.rng.choice("↑↓"), node)
        if self.rng.random() < GROUP_NOT:
            node = Not(node)
        return node

    def quantified(self, body, used, variables):
        """∀/∃ over a fresh variable that the body uses: `∀x: x∈atom ⇒ body` or a body leaf renamed to it (the body
        as it is when every variable is taken)."""
        free = [v for v in VARIABLES if v not in variables]
        if not free:
            return body
        var = free[0]
        variables.add(var)
        leaves = [path for path, n, _ in positions(body) if isinstance(n, Atom) and n.name not in VARIABLES]
        if leaves and self.rng.random() < 0.5:
            body = replace(body, self.rng.choice(leaves), Atom(var))
        else:
            guard = Binary(self.rng.choice("∈∈∉"), Atom(var), self.atom(used))
            body = Binary(self.rng.choice("⇒⇒→∧"), guard, body)
        return Quant(self.rng.choice("∀∃"), var, body)

    def claim(self, family):
        """A claim with at least one site for `family`'s mutation."""
        used, variables = set(), set()
        tree = self.group(weighted(self.rng, DEPTH_WEIGHTS), 0, used, variables)
        if self.rng.random() < QUANTIFIED:
            tree = self.quantified(tree, used, variables)
        return self.ensure_site(tree, family, used, variables)

    def ensure_site(self, tree, family, used, variables):
        if mutation_sites(tree, family):
            return tree
        nodes = list(positions(tree))
        if family == "∀/∃":
            return self.quantified(tree, used, variables)
        if family == "↑/↓":
            atoms = [path for path, n, _ in nodes if isinstance(n, Atom)]
            if not atoms:
                return tree
            path = self.rng.choice(atoms)
            return replace(tree, path, Post(self.rng.choice("↑↓"), node_at(tree, path)))
        if family == "¬ remove":
            path, node, _ = self.rng.choice([p for p in nodes if negatable(p[1], p[2])])
            return replace(tree, path, Not(node))
        if family in FAMILIES[:len(INVERSE_PAIRS)]:  # a binary operator pair: put one of them at a binary node
            a, b = family.split("/")
            path, node, _ = self.rng.choice([p for p in nodes if isinstance(p[1], Binary)])
            return replace(tree, path, Binary(self.rng.choice((a, b)), node.left, node.right))
        return tree  # ¬ insert or ⊥ inject without a site (¬ everywhere, or ⊥ only): drawn again


# ---------------------------------------------------------------------------------------------------------------
# Surface: spacing and redundant brackets
# ---------------------------------------------------------------------------------------------------------------


def draw_surface(rng):
    return Surface(weighted(rng, STYLES), BRACKET_RATE if rng.random() < BRACKETED else 0.0, rng.getrandbits(32))


# ---------------------------------------------------------------------------------------------------------------
# Triples
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Triple:
    anchor: str
    positive: str
    negative: str
    rewrites: list  # rewrite kinds that made the positive from the anchor
    mutation: str  # the family of the negative's edit


def paraphrase(tree, rng, avoid=None):
    """(tree, kinds): 1-3 rewrites drawn by kind, then site; never a mirror at `avoid` (the hard case's site)."""
    kinds = []
    for _ in range(weighted(rng, REWRITE_COUNTS)):
        sites = [s for s in rewrite_sites(tree) if s != ("mirror", avoid)]
        kind = rng.choice(sorted({k for k, _ in sites}))
        path = rng.choice([p for k, p in sites if k == kind])
        tree = rewrite(tree, kind, path)
        kinds.append(kind)
    return tree, list(dict.fromkeys(kinds))


def draw_triple(builder, rng, family, hard, seen):
    """One triple of `family` (the hard mirrored-vs-flipped case when `hard`), or None to draw again."""
    tree = builder.claim(family)
    key = to_text(canonical(tree), spaced=False)
    if key in seen:
        return None
    sites = mutation_sites(tree, family)
    if not sites:
        return None
    path = rng.choice(sites)
    negative = mutate(tree, path, family)
    if hard:
        positive, kinds = rewrite(tree, "mirror", path), ["mirror"]
    else:
        positive, kinds = paraphrase(tree, rng, avoid=path if family in DIRECTIONAL else None)
        if family in DIRECTIONAL and positive == rewrite(tree, "mirror", path):  # the hard case by another route
            return None
    if positive == tree:
        return None
    surface, fresh = draw_surface(rng), draw_surface(rng)
    (anchor_text, anchor_brackets), (negative_text, _) = surface.render(tree), surface.render(negative)
    positive_text, positive_brackets = fresh.render(positive)
    if not same_meaning(anchor_text, positive_text) or same_meaning(anchor_text, negative_text):
        return None
    kinds += ["spacing"] * (fresh.style != surface.style) + ["brackets"] * bool(positive_brackets or anchor_brackets)
    seen.add(key)
    return Triple(anchor_text, positive_text, negative_text, kinds, family), tree, surface.style, anchor_brackets


def family_counts(triples):
    """Balanced: triples // len(FAMILIES) each, the first triples % len(FAMILIES) families one more."""
    share, extra = divmod(triples, len(FAMILIES))
    return {family: share + (i < extra) for i, family in enumerate(FAMILIES)}


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__, allow_abbrev=False)  # Config's ValueError: a usage error
    excluded = Lexicon.load(extra_words=TRAINING_EXTRA_WORDS).words
    with runs.RunRecord(config.out, config, "glyph.crosscheck"):
        source = atom_source(config.data_dir, excluded, config.min_word_count)
        rng = random.Random(config.seed)
        builder = ClaimBuilder(source, rng)
        plan = []
        for family, count in family_counts(config.triples).items():
            hard = round(config.hard_share * count) if family in DIRECTIONAL else 0
            plan += [(family, i < hard) for i in range(count)]
        rng.shuffle(plan)
        triples, seen = [], set()
        depths, operators, styles, bracketed, hard_cases = Counter(), Counter(), Counter(), 0, Counter()
        for family, hard in plan:
            for _ in range(ATTEMPTS):
                drawn = draw_triple(builder, rng, family, hard, seen)
                if drawn:
                    break
            else:
                raise RuntimeError(f"no {family} triple in {ATTEMPTS} draws")
            triple, tree, style, brackets = drawn
            triples.append(triple)
            depths[binary_depth(tree)] += 1
            operators.update(n.op for _, n, _ in positions(tree) if isinstance(n, (Binary, Post, Quant)))
            operators.update(NOT for _, n, _ in positions(tree) if isinstance(n, Not))
            styles[style] += 1
            bracketed += brackets > 0
            hard_cases[family] += hard
        write_triples(config.out / "test.jsonl", triples)
        atoms = sorted({name for t in triples for text in (t.anchor, t.positive, t.negative)
                        for name in atom_names(parse(text))})
        metrics = {
            "triples": len(triples), "families": dict(Counter(t.mutation for t in triples)),
            "hard_cases": {family: hard_cases[family] for family in DIRECTIONAL},
            "atoms": len(atoms), "atom_words_used": len({w for a in atoms for w in a.split("_")}),
            "atom_words": len(source.words), "atom_phrases": {str(k): len(v) for k, v in source.phrases.items()},
            "excluded_vocabulary": source.excluded_vocabulary,
            "caption_words_excluded": source.caption_words_excluded,
            "binary_depths": {str(k): depths[k] for k in sorted(depths)},
            "anchor_operators": dict(operators.most_common()), "anchor_styles": dict(styles),
            "anchors_with_redundant_brackets": bracketed,
            "rewrites": dict(Counter(k for t in triples for k in t.rewrites).most_common()),
            "test_sha256": runs.file_sha256(config.out / "test.jsonl"),
        }
        runs.write_json(config.out / "metrics.json", metrics)
    print(f"{len(triples)} triples over {len(atoms)} atoms -> {config.out / 'test.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
