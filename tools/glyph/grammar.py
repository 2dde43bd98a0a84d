"""The glyph notation: syntax tree, parser, printer, canonical form, rewrites and mutations.

Glyph is a compact operator notation for causal and structural claims (`v5⊃compression↑ ⇒ compression⊖attribution`).
This module is the project's reference grammar (../shared/specs/glyph.md). Meaning is decidable: `canonical(tree)`
normalises every meaning-preserving rewrite the spec lists, so two strings mean the same exactly when their canonical
forms are equal. Every generated training pair and test triple is checked against it.

Grammar (loosest binding first; binary operators associate to the left; white space carries no meaning):
    claim   := '∀' var ':' claim | '∃' var ':' claim | chain
    chain   := alt    (( '→' | '←' | '⇒' | '⇐' | '↔' | '↛' | '∵' | '∴' | '⊢' | '⊣' ) alt)*
    alt     := both   ('∨' both)*
    both    := rel    ('∧' rel)*
    rel     := unary  (( '≡' | '≠' | '⊃' | '⊂' | '≥' | '≤' | '∈' | '∉' | '⊕' | '⊖' ) unary)*
    unary   := '¬' unary | postfix
    postfix := primary ('↑' | '↓')*
    primary := atom | '⊥' | '(' claim ')'
    atom    := [a-z][a-z0-9_]*
So `¬a↑` is `¬(a↑)` and a quantifier's scope runs to the end of its group.

Canonical form, applied bottom-up: atoms are renamed word by word to their synonym group's first word; a directed
relation is written with its forward operator (B←A becomes A→B); negation is pushed through ∧/∨ (De Morgan) and
double negations cancel; the operands of a symmetric operator are sorted; an implication takes the smaller of itself
and its contrapositive. The printed canonical tree is the key that decides equality.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------------------------------

LEVELS = (  # binary operators by binding strength, loosest first
    ("→", "←", "⇒", "⇐", "↔", "↛", "∵", "∴", "⊢", "⊣"),
    ("∨",),
    ("∧",),
    ("≡", "≠", "⊃", "⊂", "≥", "≤", "∈", "∉", "⊕", "⊖"),
)
LEVEL = {op: level for level, ops in enumerate(LEVELS) for op in ops}
BINARY = tuple(LEVEL)
MIRROR = {"←": "→", "⇐": "⇒", "⊂": "⊃", "≤": "≥", "∵": "∴", "⊣": "⊢"}  # backward form -> forward form
MIRROR.update({forward: backward for backward, forward in list(MIRROR.items())})
FORWARD = ("→", "⇒", "⊃", "≥", "∴", "⊢")  # the form a directed relation takes in the canonical form
SYMMETRIC = ("∧", "∨", "≡", "≠", "↔", "⊕")
POSTFIX = ("↑", "↓")
QUANTIFIERS = ("∀", "∃")
NOT, BOTTOM = "¬", "⊥"
# Meaning-flipping operator swaps (the spec's inversion pairs), each a family in the per-operator tables.
INVERSE_PAIRS = (
    ("→", "←"), ("⇒", "⇐"), ("∧", "∨"), ("≡", "≠"), ("⊃", "⊂"), ("↑", "↓"),
    ("≥", "≤"), ("∀", "∃"), ("∈", "∉"), ("∵", "∴"), ("⊢", "⊣"), ("↔", "↛"),
)
INVERSE = {a: b for a, b in INVERSE_PAIRS} | {b: a for a, b in INVERSE_PAIRS}
OPERATORS = BINARY + POSTFIX + QUANTIFIERS + (NOT, BOTTOM)  # every operator symbol of the notation
HAND_GAP, HAND_BRACKETS = 0.5, 0.1  # to_text(hand=...): the chance of a space beside an operator, of spare parentheses


# ---------------------------------------------------------------------------------------------------------------
# Syntax tree (frozen dataclasses: hashable, compared by value)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Atom:
    name: str


@dataclass(frozen=True)
class Bottom:
    pass


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Post:
    op: str  # ↑ or ↓
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Quant:
    op: str  # ∀ or ∃
    var: str
    body: Node


Node = Atom | Bottom | Not | Post | Binary | Quant


# ---------------------------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------------------------


class GlyphSyntaxError(ValueError):
    """A string that is not glyph notation; `position` is the character offset of the problem."""

    def __init__(self, message: str, text: str, position: int):
        self.text, self.position = text, position
        super().__init__(f"{message} at position {position}:\n  {text}\n  {' ' * position}^")


_TOKEN = re.compile(r"\s*(?:([a-z][a-z0-9_]*)|(.))", re.DOTALL)


def _tokens(text: str) -> list[tuple[str, int]]:
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match.group(0).strip():  # only white space is left
            break
        start = match.start(1) if match.group(1) else match.start(2)
        symbol = match.group(1) or match.group(2)
        if match.group(2) and symbol not in OPERATORS + ("(", ")", ":"):
            raise GlyphSyntaxError(f"unknown symbol {symbol!r}", text, start)
        tokens.append((symbol, start))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.index = text, _tokens(text), 0

    def peek(self) -> str | None:
        return self.tokens[self.index][0] if self.index < len(self.tokens) else None

    def position(self) -> int:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else len(self.text)

    def fail(self, expected: str):
        found = "the end" if self.peek() is None else repr(self.peek())
        raise GlyphSyntaxError(f"expected {expected}, found {found}", self.text, self.position())

    def take(self, symbol: str):
        if self.peek() != symbol:
            self.fail(repr(symbol))
        self.index += 1

    def claim(self) -> Node:
        if self.peek() in QUANTIFIERS:
            op = self.peek()
            self.index += 1
            var = self.peek()
            if var is None or not var[0].isalpha():
                self.fail("a variable name")
            self.index += 1
            self.take(":")
            return Quant(op, var, self.claim())
        return self.binary(0)

    def binary(self, level: int) -> Node:
        if level == len(LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in LEVELS[level]:
            op = self.peek()
            self.index += 1
            if self.peek() in QUANTIFIERS:  # a quantified right operand runs to the end of the group
                node = Binary(op, node, self.claim())
            else:
                node = Binary(op, node, self.binary(level + 1))
        return node

    def unary(self) -> Node:
        if self.peek() == NOT:
            self.index += 1
            return Not(self.unary())
        node = self.primary()
        while self.peek() in POSTFIX:
            node = Post(self.peek(), node)
            self.index += 1
        return node

    def primary(self) -> Node:
        symbol = self.peek()
        if symbol is not None and symbol[0].isalpha():
            self.index += 1
            return Atom(symbol)
        if symbol == BOTTOM:
            self.index += 1
            return Bottom()
        if symbol == "(":
            self.index += 1
            node = self.claim()
            self.take(")")
            return node
        self.fail("an atom, '⊥', '¬' or '('")


def parse(text: str) -> Node:
    """Parse one glyph claim; raises GlyphSyntaxError (with the position) on anything else."""
    parser = _Parser(text)
    if parser.peek() is None:
        raise GlyphSyntaxError("empty claim", text, 0)
    node = parser.claim()
    if parser.peek() is not None:
        parser.fail("an operator or the end")
    return node


# ---------------------------------------------------------------------------------------------------------------
# Printer
# ---------------------------------------------------------------------------------------------------------------


def _ends_in_quantifier(node: Node) -> bool:
    """Whether the printed node ends in an unparenthesised quantifier (`a → ∀x: b`), whose body reaches to the end."""
    if isinstance(node, Quant):
        return True
    if isinstance(node, Binary):
        right_parenthesised = isinstance(node.right, Binary) and LEVEL[node.right.op] <= LEVEL[node.op]
        return not right_parenthesised and _ends_in_quantifier(node.right)
    return False


def to_text(node: Node, spaced: bool = True, hand: random.Random | None = None) -> str:
    """Print with the fewest parentheses that parse back to the same tree.

    spaced=True puts spaces around the loosest operators (implication and causal arrows), as written by hand
    (`a⊕b ⇒ c`); spaced=False prints no spaces at all. hand: a random stream for a surface as people vary it instead
    (`a ⊕ (b) ⇒c`): each binary operator is spaced on each side at random (HAND_GAP) and each operand gets a pair of
    parentheses it does not need with probability HAND_BRACKETS. Every surface parses back to the same tree.
    """

    def group(text: str, needed: bool) -> str:
        return f"({text})" if needed or (hand is not None and hand.random() < HAND_BRACKETS) else text

    def gap(default: bool) -> str:
        return " " if (hand.random() < HAND_GAP if hand is not None else default) else ""

    match node:
        case Atom(name):
            return name
        case Bottom():
            return BOTTOM
        case Not(operand):
            inner = to_text(operand, spaced, hand)
            return NOT + group(inner, not isinstance(operand, (Atom, Bottom, Not, Post)))
        case Post(op, operand):
            inner = to_text(operand, spaced, hand)
            return group(inner, not isinstance(operand, (Atom, Bottom, Post))) + op
        case Quant(op, var, body):
            return f"{op}{var}:{gap(spaced)}{to_text(body, spaced, hand)}"
        case Binary(op, left, right):
            level = LEVEL[op]
            left_text, right_text = to_text(left, spaced, hand), to_text(right, spaced, hand)
            looser = isinstance(left, Binary) and LEVEL[left.op] < level
            left_text = group(left_text, _ends_in_quantifier(left) or looser)  # a quantifier's body swallows the rest
            right_text = group(right_text, isinstance(right, Binary) and LEVEL[right.op] <= level)
            return f"{left_text}{gap(spaced and level == 0)}{op}{gap(spaced and level == 0)}{right_text}"
    raise TypeError(f"not a glyph node: {node!r}")


# ---------------------------------------------------------------------------------------------------------------
# Canonical form
# ---------------------------------------------------------------------------------------------------------------


def _key(node: Node) -> str:
    return to_text(node, spaced=False)


def negate(node: Node) -> Node:
    """¬node in canonical form, for a node already in canonical form (De Morgan, double negation)."""
    match node:
        case Not(operand):
            return operand
        case Binary("∧" | "∨" as op, left, right):
            return _symmetric("∨" if op == "∧" else "∧", negate(left), negate(right))
    return Not(node)


def _symmetric(op: str, left: Node, right: Node) -> Binary:
    return Binary(op, *sorted((left, right), key=_key))


def canonical(node: Node, synonyms: Mapping[str, str] | None = None) -> Node:
    """The normal form of `node` under every meaning-preserving rewrite; `synonyms` maps a word to its group's
    representative (atoms are renamed word by word, words split at '_')."""
    synonyms = synonyms or {}

    def walk(node: Node) -> Node:
        match node:
            case Atom(name):
                return Atom("_".join(synonyms.get(word, word) for word in name.split("_")))
            case Bottom():
                return node
            case Not(operand):
                return negate(walk(operand))
            case Post(op, operand):
                return Post(op, walk(operand))
            case Quant(op, var, body):
                return Quant(op, var, walk(body))
            case Binary(op, left, right):
                left, right = walk(left), walk(right)
                if op in MIRROR and op not in FORWARD:
                    op, left, right = MIRROR[op], right, left
                if op in SYMMETRIC:
                    return _symmetric(op, left, right)
                if op == "⇒":  # A⇒B = ¬B⇒¬A: take the smaller of the two
                    return min(Binary(op, left, right), Binary(op, negate(right), negate(left)), key=_key)
                return Binary(op, left, right)
        raise TypeError(f"not a glyph node: {node!r}")

    return walk(node)


def same_meaning(a: str | Node, b: str | Node, synonyms: Mapping[str, str] | None = None) -> bool:
    """Whether two claims mean the same (equal canonical forms)."""
    a, b = (parse(x) if isinstance(x, str) else x for x in (a, b))
    return canonical(a, synonyms) == canonical(b, synonyms)


# ---------------------------------------------------------------------------------------------------------------
# Rewrites and mutations: every single-site edit of a tree
# ---------------------------------------------------------------------------------------------------------------

Edit = tuple[str, Node]  # (kind, the edited whole tree)


def _sites(node: Node, rebuild: Callable[[Node], Node] = lambda n: n, parent: Node | None = None):
    """Every subtree as (subtree, its parent or None, a function that puts a replacement back into the whole tree)."""
    yield node, parent, rebuild
    match node:
        case Not(operand):
            yield from _sites(operand, lambda n: rebuild(Not(n)), node)
        case Post(op, operand):
            yield from _sites(operand, lambda n, op=op: rebuild(Post(op, n)), node)
        case Quant(op, var, body):
            yield from _sites(body, lambda n, op=op, var=var: rebuild(Quant(op, var, n)), node)
        case Binary(op, left, right):
            yield from _sites(left, lambda n, op=op, right=right: rebuild(Binary(op, n, right)), node)
            yield from _sites(right, lambda n, op=op, left=left: rebuild(Binary(op, left, n)), node)


def _unique(edits: list[Edit]) -> list[Edit]:
    return list(dict.fromkeys(edits))


def rewrites(tree: Node, synonym_groups: Mapping[str, tuple[str, ...]] | None = None) -> list[Edit]:
    """Every meaning-preserving single-site rewrite of `tree`, labelled by kind.

    synonym_groups maps a word to every word of its group (itself included) for the rename rewrite.
    """
    edits = []
    for node, _, put in _sites(tree):
        edits.append(("double negation", put(Not(Not(node)))))
        match node:
            case Not(Not(inner)):
                edits.append(("double negation", put(inner)))
            case Not(Binary("∧" | "∨" as op, left, right)):
                edits.append(("De Morgan", put(Binary("∨" if op == "∧" else "∧", Not(left), Not(right)))))
            case Binary("∧" | "∨" as op, Not(left), Not(right)):
                edits.append(("De Morgan", put(Not(Binary("∨" if op == "∧" else "∧", left, right)))))
        match node:
            case Binary(op, left, right) if op in MIRROR:
                edits.append(("mirror", put(Binary(MIRROR[op], right, left))))
            case Binary(op, left, right) if op in SYMMETRIC:
                edits.append(("symmetric swap", put(Binary(op, right, left))))
        match node:
            case Binary("⇒", left, right):
                flipped = (
                    right.operand if isinstance(right, Not) else Not(right),
                    left.operand if isinstance(left, Not) else Not(left),
                )
                edits.append(("contrapositive", put(Binary("⇒", *flipped))))
            case Atom(name) if synonym_groups:
                words = name.split("_")
                for i, word in enumerate(words):
                    for other in synonym_groups.get(word, ()):
                        if other != word:
                            edits.append(("rename", put(Atom("_".join(words[:i] + [other] + words[i + 1:])))))
    return _unique(edits)


def mutations(tree: Node) -> list[Edit]:
    """Every meaning-flipping single-site mutation of `tree`, labelled by family (e.g. '⇒/⇐', '¬ insert')."""
    edits = []
    for node, parent, put in _sites(tree):
        match node:
            case Binary(op, left, right) if op in INVERSE:
                edits.append((_family(op), put(Binary(INVERSE[op], left, right))))
            case Post(op, operand):
                edits.append((_family(op), put(Post(INVERSE[op], operand))))
            case Quant(op, var, body):
                edits.append((_family(op), put(Quant(INVERSE[op], var, body))))
            case Not(operand):
                edits.append(("¬ remove", put(operand)))
            case Atom():
                edits.append(("⊥ inject", put(Binary("∧", node, Bottom()))))
        if not isinstance(node, Not) and not isinstance(parent, Not):  # ¬ next to ¬ is removal, or a paraphrase
            edits.append(("¬ insert", put(Not(node))))
    return _unique(edits)


def mirror_against_flip(tree: Node) -> list[tuple[str, Node, Node]]:
    """The direction cases of `tree`, one per directed relation (an operator with a mirror): (its family, the tree
    with that relation mirrored: operands swapped, operator mirrored, the same meaning; the tree with its operator
    flipped in place: the anchor's atom order, another meaning). A reader that follows the atoms' surface order puts
    the flip closer to the anchor than the mirror."""
    return [(_family(node.op), put(Binary(MIRROR[node.op], node.right, node.left)),
             put(Binary(INVERSE[node.op], node.left, node.right)))
            for node, _, put in _sites(tree) if isinstance(node, Binary) and node.op in MIRROR]


def _shape(node: Node) -> Node:
    """The tree with every atom name blanked (what a rename leaves unchanged)."""
    match node:
        case Atom():
            return Atom("")
        case Not(operand):
            return Not(_shape(operand))
        case Post(op, operand):
            return Post(op, _shape(operand))
        case Quant(op, var, body):
            return Quant(op, var, _shape(body))
        case Binary(op, left, right):
            return Binary(op, _shape(left), _shape(right))
    return node


def is_mirror_against_flip(anchor: Node, positive: Node, negative: Node) -> bool:
    """Whether a triple is a direction case (mirror_against_flip): the negative flips one directed relation of the
    anchor in place, and the positive mirrors that same relation (up to renamed atoms)."""
    return any(flipped == negative and _shape(mirrored) == _shape(positive)
               for _, mirrored, flipped in mirror_against_flip(anchor))


def _family(op: str) -> str:
    return next(f"{a}/{b}" for a, b in INVERSE_PAIRS if op in (a, b))


def random_edit(edits: list[Edit], rng: random.Random) -> Edit:
    """One edit drawn uniformly by kind first, then by site (so rare kinds are not drowned by common ones)."""
    kinds = sorted({kind for kind, _ in edits})
    kind = rng.choice(kinds)
    return rng.choice([edit for edit in edits if edit[0] == kind])
