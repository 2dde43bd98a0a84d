"""The parts of the independent glyph test generator (tools/glyph/crosscheck.py), written apart from the training
generator. Atoms: phrases of adjacent caption words the training vocabulary lacks. Trees: positions in a grammar tree
(a path is the tuple of child indices from the root; Binary: 0 left, 1 right; others: 0), replacing a node, the sites
and edits of a mutation (the negative) and of a structural rewrite (the positive), and the surface a tree is printed
with (spacing and redundant brackets). The reference grammar (tools/glyph/grammar.py) judges every result."""

import random
import re
from collections import Counter
from pathlib import Path
from dataclasses import dataclass

from tools import corpus
from tools.glyph.grammar import (
    BOTTOM,
    INVERSE,
    INVERSE_PAIRS,
    LEVEL,
    MIRROR,
    NOT,
    SYMMETRIC,
    Atom,
    Binary,
    Bottom,
    Not,
    Post,
    Quant,
    parse,
)

VARIABLES = ("x", "y", "z")  # quantified variables, never atom words


FLICKR8K = Path("captions") / "flickr8k" / "Flickr8k.token.txt"  # under the data folder


STOPWORDS = frozenset("""
about above across after against all almost along also although always among an and another any anyone anything are
around as at away back be because been before behind being below beneath beside besides between beyond both but by can
could did do does doing done down during each either else enough even ever every everyone everything few for from
further get gets getting got had has have having he her here hers herself him himself his how however if in into is it
its itself just less like many may me might mine more most much must my myself near neither next no nobody none nor not
nothing now of off often on once one only onto or other others otherwise our ours ourselves out outside over own per
perhaps quite rather really same several shall she should since so some someone something somewhat somewhere still
such than that the their theirs them themselves then there these they this those though through throughout thus till
to too toward towards under underneath unless until up upon us very via was we well were what whatever when where
whereas whether which while who whom whose why will with within without would yet you your yours yourself
""".split())  # English function words: an atom is made of content words


TOKEN = re.compile(r"[A-Za-z'-]+|[^\sA-Za-z'-]")  # words (with ' and -) or single punctuation marks


ATOM_WORD = re.compile(r"[a-z]{3,}")


def caption_texts(data_dir):
    """Every Flickr8k caption (all splits) and every ImageInWords description, in file order."""
    lines = (Path(data_dir) / FLICKR8K).read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1] for line in lines] + [t for g in corpus.imageinwords_by_image(data_dir) for t in g]


@dataclass

class AtomSource:
    phrases: dict  # {2: [...], 3: [...]} sorted distinct phrases of adjacent atom words, joined by "_"
    words: list  # the atom words (sorted)
    excluded_vocabulary: int  # size of the training vocabulary
    caption_words_excluded: int  # caption words that would qualify but are training words


def atom_source(data_dir, excluded, min_word_count):
    """Phrases of 2 and 3 adjacent caption words that are all atom words (no punctuation between them)."""
    sentences = [TOKEN.findall(text) for text in caption_texts(data_dir)]
    counts = Counter(token for tokens in sentences for token in tokens)
    shaped = {w for w, n in counts.items() if n >= min_word_count and ATOM_WORD.fullmatch(w) and w not in STOPWORDS
              and w not in VARIABLES}
    words = shaped - set(excluded)
    phrases = {2: set(), 3: set()}
    for tokens in sentences:
        for size in phrases:
            for i in range(len(tokens) - size + 1):
                run = tokens[i:i + size]
                if all(token in words for token in run) and len(set(run)) == size:
                    phrases[size].add("_".join(run))
    return AtomSource({size: sorted(found) for size, found in phrases.items()}, sorted(words), len(set(excluded)),
                      len(shaped) - len(words))


def children(node):
    match node:
        case Not(operand) | Post(_, operand):
            return (operand,)
        case Quant(_, _, body):
            return (body,)
        case Binary(_, left, right):
            return (left, right)
    return ()


def positions(node, path=(), parent=None):
    """(path, node, parent) of every subtree, root first."""
    yield path, node, parent
    for i, child in enumerate(children(node)):
        yield from positions(child, path + (i,), node)


def replace(node, path, new):
    """`node` with the subtree at `path` replaced by `new`."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    match node:
        case Not(operand):
            return Not(replace(operand, rest, new))
        case Post(op, operand):
            return Post(op, replace(operand, rest, new))
        case Quant(op, var, body):
            return Quant(op, var, replace(body, rest, new))
        case Binary(op, left, right):
            if head == 0:
                return Binary(op, replace(left, rest, new), right)
            return Binary(op, left, replace(right, rest, new))
    raise ValueError(f"no position {path} in {node!r}")


def bound_variables(node):
    return {n.var for _, n, _ in positions(node) if isinstance(n, Quant)}


def atom_names(node):
    """Atom names of a claim, bound variables left out."""
    variables = bound_variables(node)
    return [n.name for _, n, _ in positions(node) if isinstance(n, Atom) and n.name not in variables]


def binary_depth(node):
    below = max((binary_depth(child) for child in children(node)), default=0)
    return below + isinstance(node, Binary)


def weighted(rng, weights):
    keys = list(weights)
    return rng.choices(keys, [weights[k] for k in keys])[0]


def node_at(tree, path):
    for i in path:
        tree = children(tree)[i]
    return tree


def negatable(node, parent):
    """Where ¬ may be inserted: not next to another ¬ (that would be removal, or a double-negation paraphrase)."""
    return not isinstance(node, Not) and not isinstance(parent, Not)


def family_of(op):
    return next(f"{a}/{b}" for a, b in INVERSE_PAIRS if op in (a, b))


def mutation_sites(tree, family):
    """Paths where `family`'s mutation applies."""
    variables = bound_variables(tree)
    sites = []
    for path, node, parent in positions(tree):
        match family, node:
            case "¬ insert", _ if negatable(node, parent):
                sites.append(path)
            case "¬ remove", Not():
                sites.append(path)
            case "⊥ inject", Atom(name) if name not in variables:
                sites.append(path)
            case _, Binary(op) | Post(op) | Quant(op) if op in INVERSE and family_of(op) == family:
                sites.append(path)
    return sites


def mutate(tree, path, family):
    node = node_at(tree, path)
    match family, node:
        case "¬ insert", _:
            new = Not(node)
        case "¬ remove", Not(operand):
            new = operand
        case "⊥ inject", Atom():
            new = Binary("∧", node, Bottom())
        case _, Binary(op, left, right):
            new = Binary(INVERSE[op], left, right)
        case _, Post(op, operand):
            new = Post(INVERSE[op], operand)
        case _, Quant(op, var, body):
            new = Quant(INVERSE[op], var, body)
        case _:
            raise ValueError(f"{family} does not apply to {node!r}")
    return replace(tree, path, new)


def negated(node):
    return node.operand if isinstance(node, Not) else Not(node)


def rewrite_sites(tree):
    """(kind, path) of every meaning-preserving rewrite this file knows."""
    sites = []
    for path, node, _ in positions(tree):
        sites.append(("double negation", path))
        match node:
            case Binary(op) if op in MIRROR:
                sites.append(("mirror", path))
            case Binary(op, left, right) if op in SYMMETRIC and left != right:
                sites.append(("symmetric swap", path))
            case Not(Binary("∧" | "∨")) | Binary("∧" | "∨", Not(), Not()):
                sites.append(("De Morgan", path))
        if isinstance(node, Binary) and node.op == "⇒":
            sites.append(("contrapositive", path))
    return sites


def rewrite(tree, kind, path):
    node = node_at(tree, path)
    match kind, node:
        case "mirror", Binary(op, left, right):
            new = Binary(MIRROR[op], right, left)
        case "symmetric swap", Binary(op, left, right):
            new = Binary(op, right, left)
        case "double negation", Not(Not(inner)):
            new = inner
        case "double negation", _:
            new = Not(Not(node))
        case "De Morgan", Not(Binary(op, left, right)):
            new = Binary("∨" if op == "∧" else "∧", Not(left), Not(right))
        case "De Morgan", Binary(op, Not(left), Not(right)):
            new = Not(Binary("∨" if op == "∧" else "∧", left, right))
        case "contrapositive", Binary("⇒", left, right):
            new = Binary("⇒", negated(right), negated(left))
        case _:
            raise ValueError(f"{kind} does not apply to {node!r}")
    return replace(tree, path, new)


@dataclass

class Surface:
    """How a tree is printed. Choices are keyed by (salt, path, node type), with paths that do not step into ¬, so
    a mutation keeps the printing of every other site of its anchor."""

    style: str  # a key of STYLES
    bracket_rate: float  # share of groups wrapped in redundant brackets
    salt: int
    redundant: int = 0  # redundant bracket pairs of the last render

    def coin(self, *key):
        return random.Random(f"{self.salt}:{key}").random()

    def gaps(self, path, op):
        if self.style == "tight":
            return "", ""
        if self.style == "spaced":
            return " ", " "
        if self.style == "hand":
            return (" ", " ") if LEVEL.get(op) == 0 else ("", "")
        draw = self.coin(path, "gap")
        return ("", "") if draw < 0.4 else (" ", " ") if draw < 0.8 else (" ", "") if draw < 0.9 else ("", " ")

    def render(self, tree):
        """(text, redundant bracket pairs); the text parses back to `tree`."""
        self.redundant = 0
        text, _ = self._wrap(tree, (), False)
        if parse(text) != tree:
            raise AssertionError(f"printed {text!r} does not parse back to {tree!r}")
        return text, self.redundant

    def _wrap(self, node, path, needed):
        """(text, ends in an open quantifier) of `node` as an operand: bracketed when `needed`, or by chance."""
        text, open_end = self._print(node, path)
        if needed:
            return f"({text})", False
        if self.bracket_rate and self.coin(path, type(node).__name__) < self.bracket_rate:
            self.redundant += 1
            return f"({text})", False
        return text, open_end

    def _print(self, node, path):
        match node:
            case Atom(name):
                return name, False
            case Bottom():
                return BOTTOM, False
            case Not(operand):  # ¬ takes no path step
                inner, open_end = self._wrap(operand, path, isinstance(operand, (Binary, Quant)))
                return NOT + inner, open_end
            case Post(op, operand):
                inner, _ = self._wrap(operand, path + (0,), isinstance(operand, (Binary, Quant, Not)))
                return inner + op, False
            case Quant(op, var, body):
                inner, _ = self._wrap(body, path + (0,), False)
                gap = self.gaps(path, ":")[1] if self.style == "mixed" else ("" if self.style == "tight" else " ")
                return f"{op}{var}:{gap}{inner}", True
            case Binary(op, left, right):
                level = LEVEL[op]
                left_needed = isinstance(left, Binary) and LEVEL[left.op] < level
                left_text, left_open = self._wrap(left, path + (0,), left_needed)
                if left_open:  # a quantifier's body would swallow the rest
                    left_text = f"({left_text})"
                right_needed = isinstance(right, Binary) and LEVEL[right.op] <= level
                right_text, right_open = self._wrap(right, path + (1,), right_needed)
                before, after = self.gaps(path, op)
                return f"{left_text}{before}{op}{after}{right_text}", right_open
        raise TypeError(f"not a glyph node: {node!r}")
