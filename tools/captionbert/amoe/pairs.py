"""Labelled sentence pairs from ../shared/data for training AMOE arms, and the validation suite that judges them.

Training sets (`load(name, data_dir)`; the name may also be a TSV file of pairs), each with the labelled source it fits:
    paraphrase  MRPC train: Quality 1 pairs are positives, Quality 0 pairs their hard negatives  (kind "labelled", MRPC)
    equiv       SNLI dev: premise -> entailment hypothesis, with the contradiction hypothesis of the same premise
                as its hard negative                                                        (kind "triples", SNLI)
    sts         STS Benchmark train, gold scores 0-5                                        (kind "scored", STS-B)
    caption     Flickr8k train images: captions 1+2 and 3+4 of each image are positive pairs (kind "pairs", Flickr8k)
    <folder>    a tools/captionbert/extract.py folder: each corpus text of at most EMBEDDED_MAX_WORDS words with
                the reference teacher's embedding of it, named "teacher"   (kind "embedded", labelled by the teacher)
    <folder>    a tools/captionbert/align.py folder: the same texts with the consensus of the aligned teachers,
                named "consensus", or with one teacher's embeddings mapped into the reference's frame (teacher=its
                name; the arm is named after it): one arm per teacher     (kind "embedded", labelled by teachers)
    <file.tsv>  text1<TAB>text2 ("pairs"), text1<TAB>text2<TAB>number ("scored") or
                text1<TAB>text2<TAB>hard negative ("triples"), no header; no labelled source of the suite (the
                silver pairs are scored by a teacher)
Validation suite (`validation_sets`), never trained on and disjoint from every STS-8 test sentence:
    stsb-dev      STS Benchmark dev, gold scores: Spearman of cosine                                       (STS-B)
    mrpc-test     MRPC test, label 0/1: Spearman of cosine                                                 (MRPC)
    snli-test     the first 2,000 usable rows of SNLI test, entailment 2 / neutral 1 / contradiction 0    (SNLI)
    flickr8k-dev  the Flickr8k dev images: each image's first caption finds its second among all the
                  images' second captions; MRR (tools/sts.same_image_retrieval)                          (Flickr8k)
Every decision reads one mean over the same two sets, SELECTION_SETS (`validation_mean`): STS-B dev, graded similarity
of general sentences as STS-8 scores it (supervised SimCSE selects on it alone), and Flickr8k dev, the caption domain
the card's gauge keeps. MRPC test and SNLI test are scored and recorded, never averaged: binary paraphrase and ordinal
entailment labels are other tasks, and on the quick build MRPC moved against STS-8 (the sts arm: MRPC +.059, STS-8
-.007, chosen when each roster's mean left out its own sources and so averaged other sets than the control's). An
arm is never judged on a source it trains on: a roster with an arm that trains on STS-B or Flickr8k (sts, caption)
has no mean, so select refuses such a candidate; it still trains and scores as a solo arm.

Every training row that holds a held-out text (tools/corpus.held_out_texts: any STS-8 test sentence or Flickr8k test
caption, compared in normalised form) or any text of the validation suite is dropped and counted: STS-B train and
dev reuse STS 2012-2016 test text, so most of their rows go.
"""

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

from tools import corpus, runs, sts

TRAINING_SETS = ("paraphrase", "equiv", "sts", "caption")
TRAINING_SOURCES = {"paraphrase": "MRPC", "equiv": "SNLI", "sts": "STS-B", "caption": "Flickr8k"}
VALIDATION_SOURCES = {"stsb-dev": "STS-B", "mrpc-test": "MRPC", "snli-test": "SNLI", "flickr8k-dev": "Flickr8k"}
SELECTION_SETS = ("stsb-dev", "flickr8k-dev")  # the sets every decision averages (see the module docstring)
EMBEDDED_MAX_WORDS = 40  # longer corpus texts would be cut at the arms' 64 tokens, unlike their teacher embedding
VALIDATION_SNLI_ROWS = 2000
SNLI_ORDINAL = {"entailment": 2.0, "neutral": 1.0, "contradiction": 0.0}


@dataclass
class PairSet:
    """Rows of one dataset. kind: "pairs" (first, second positives), "triples" (+ a hard negative per row),
    "scored" (+ a gold score per row), "labelled" (+ a 0/1 label; label-0 rows are hard negatives) or "embedded"
    (first alone, with a teacher's unit embedding of it per row)."""

    name: str
    kind: str
    source: str  # where the rows come from, for the run record
    first: list[str] = field(default_factory=list)
    second: list[str] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)  # "triples" only
    score: list[float] = field(default_factory=list)  # "scored" and "labelled" only
    target: np.ndarray | None = None  # "embedded" only: (rows, D) float32 unit teacher embeddings of `first`
    labelled_source: str = ""  # the validation suite's source whose labels or pairings it fits ("" = none of them)
    dropped_held_out: int = 0  # rows dropped for holding a held-out or validation text

    def __len__(self):
        return len(self.first)

    def summary(self):
        return {"name": self.name, "kind": self.kind, "source": self.source, "rows": len(self),
                "labelled_source": self.labelled_source, "dropped_held_out": self.dropped_held_out}


def _filtered(name, kind, source, rows, forbidden, labelled_source=""):
    """A PairSet of `rows` (tuples whose text fields come first) without the rows that hold a forbidden text."""
    pairs = PairSet(name, kind, source, labelled_source=labelled_source)
    for row in rows:
        texts = row[:3] if kind == "triples" else row[:2]
        if any(corpus.normalised(t) in forbidden for t in texts):
            pairs.dropped_held_out += 1
            continue
        pairs.first.append(row[0])
        pairs.second.append(row[1])
        if kind == "triples":
            pairs.negative.append(row[2])
        elif kind != "pairs":
            pairs.score.append(float(row[2]))
    if not pairs.first:
        raise ValueError(f"{name}: no rows left after dropping held-out and validation text "
                         f"({pairs.dropped_held_out} dropped)")
    return pairs


def _mrpc(data_dir, split):
    with open(data_dir / "pairs" / "mrpc" / f"msr_paraphrase_{split}.txt", encoding="utf-8-sig") as handle:
        return [(row["#1 String"], row["#2 String"], float(row["Quality"]))
                for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _snli(data_dir, split):
    folder = data_dir / "pairs" / "snli"
    columns = [(folder / f"{name}.{split}").read_text(encoding="utf-8").splitlines()
               for name in ("s1", "s2", "labels")]
    return [(premise.strip(), hypothesis.strip(), label.strip()) for premise, hypothesis, label in zip(*columns)]


def _stsb(data_dir, split):
    return sts.stsb_split(data_dir / "sts" / "STSBenchmark", split)


def _flickr8k_train_pairs(data_dir):
    """Two disjoint caption pairs per Flickr8k train image (captions #0 + #1 and #2 + #3), in file order."""
    return [(c[a], c[b]) for c in sts.flickr8k_captions(data_dir, "train").values() for a, b in ((0, 1), (2, 3))
            if b < len(c)]


def load_embeddings(extract, teacher):
    """(N, D) float32 unit rows of `teacher` (an entry of the extraction manifest's teachers) in corpus order; every
    shard must be there."""
    missing = [s for s in teacher["shards"] if not (extract / s).is_file()]
    if missing:
        raise SystemExit(f"{teacher['name']}: {len(missing)} shards missing (first {missing[0]}); finish extraction")
    embeddings = np.concatenate([load_file(str(extract / s))["embeddings"] for s in teacher["shards"]])
    embeddings = embeddings.astype(np.float32)
    return embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)


def _embedded(name, source, texts, target, forbidden):
    """An "embedded" PairSet of the corpus texts of at most EMBEDDED_MAX_WORDS words and their target rows, without
    the forbidden texts."""
    short = [i for i, text in enumerate(texts) if len(text.split()) <= EMBEDDED_MAX_WORDS]
    kept = [i for i in short if corpus.normalised(texts[i]) not in forbidden]
    return PairSet(name, "embedded", f"{source} (at most {EMBEDDED_MAX_WORDS} words)", first=[texts[i] for i in kept],
                   target=target[kept], dropped_held_out=len(short) - len(kept))


def _extraction(folder, forbidden):
    """The "teacher" PairSet of an extraction folder: its short corpus texts and the reference teacher's embeddings,
    without the forbidden texts."""
    manifest = runs.read_json(folder / "manifest.json")
    teacher = next(t for t in manifest["teachers"] if t["name"] == manifest["reference"])
    return _embedded("teacher", f"{teacher['name']}'s embeddings of the corpus texts of {folder}",
                     corpus.read_texts(folder / manifest["corpus"]["file"]), load_embeddings(folder, teacher),
                     forbidden)


def _alignment(folder, teacher, forbidden):
    """The PairSet of an alignment folder (tools/captionbert/align.py) over its short corpus texts: the consensus of
    the aligned teachers (teacher "", named "consensus") or one teacher's embeddings mapped into the reference's
    frame by its whitened Procrustes map (named after the teacher), unit rows either way."""
    manifest = runs.read_json(folder / "manifest.json")
    texts = corpus.read_texts(manifest["texts"])
    if not teacher:
        rows = np.concatenate([np.arange(s["first_row"], s["first_row"] + s["rows"]) for s in manifest["shards"]])
        target = np.concatenate([load_file(str(folder / s["file"]))["embeddings"] for s in manifest["shards"]])
        target = target.astype(np.float32)
        return _embedded("consensus", f"the consensus of the aligned teachers of {folder}", [texts[i] for i in rows],
                         target / np.linalg.norm(target, axis=1, keepdims=True), forbidden)
    with safe_open(str(folder / "maps.safetensors"), "np") as maps:
        names = maps.metadata()["teachers"].split(",")
        if teacher not in names:
            raise ValueError(f"teacher {teacher!r} is not in {folder}; it aligned {', '.join(names)}")
        index = names.index(teacher)
        matrix, bias = maps.get_tensor(f"A_{index}"), maps.get_tensor(f"b_{index}")
    extract = Path(manifest["extract"])
    entry = next(t for t in runs.read_json(extract / "manifest.json")["teachers"] if t["name"] == teacher)
    target = load_embeddings(extract, entry) @ matrix + bias
    return _embedded(teacher, f"{teacher}'s embeddings of the corpus texts of {extract}, mapped into "
                     f"{manifest['reference']}'s frame by {folder}", texts,
                     target / np.linalg.norm(target, axis=1, keepdims=True), forbidden)


def _snli_triples(rows):
    """(premise, entailment, contradiction) for each premise that has both, the first of each in file order."""
    by_premise = {}
    for premise, hypothesis, label in rows:
        by_premise.setdefault(premise, {}).setdefault(label, hypothesis)
    return [(p, h["entailment"], h["contradiction"]) for p, h in by_premise.items()
            if "entailment" in h and "contradiction" in h]


def _tsv(path):
    """kind and rows of a user TSV: 2 columns = pairs; 3 = scored if every third column is a number, else triples."""
    with open(path, encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if row]
    widths = {len(row) for row in rows}
    if not rows or not widths <= {2, 3} or len(widths) != 1:
        raise ValueError(f"{path}: every line must have 2 or 3 tab-separated fields (found widths {sorted(widths)})")
    if widths == {2}:
        return "pairs", rows
    try:
        return "scored", [(a, b, float(c)) for a, b, c in rows]
    except ValueError:
        return "triples", rows


def forbidden_texts(data_dir):
    """Normalised texts no arm trains on: every held-out text (tools/corpus.held_out_texts) and every text of the
    validation suite."""
    validation = _validation_rows(Path(data_dir))
    captions = validation.pop("flickr8k-dev")
    texts = [text for rows in validation.values() for row in rows for text in row[:2]]
    texts += [caption for _, image_captions in captions for caption in image_captions[:2]]
    return corpus.held_out_texts(data_dir) | {corpus.normalised(text) for text in texts}


def load(name, data_dir, teacher=""):
    """The training PairSet `name` (TRAINING_SETS, a .tsv path, an extraction folder or an alignment folder), without
    the rows that hold a held-out or validation text. teacher: for an alignment folder, the teacher whose aligned
    embeddings are the targets ("" = the consensus); nothing else takes one."""
    data_dir = Path(data_dir)
    forbidden = forbidden_texts(data_dir)
    source = TRAINING_SOURCES.get(name, "")
    path = Path(name)
    if (path / "maps.safetensors").is_file():
        return _alignment(path, teacher, forbidden)
    if teacher:
        raise ValueError(f"a teacher ({teacher!r}) is chosen only from an alignment folder, not from {name!r}")
    if name == "paraphrase":
        return _filtered(name, "labelled", "MRPC train (Quality 1 positives, Quality 0 hard negatives)",
                         _mrpc(data_dir, "train"), forbidden, source)
    if name == "equiv":
        return _filtered(name, "triples", "SNLI dev (entailment positives, contradiction hard negatives)",
                         _snli_triples(_snli(data_dir, "dev")), forbidden, source)
    if name == "sts":
        return _filtered(name, "scored", "STS Benchmark train (gold scores)", _stsb(data_dir, "train"), forbidden,
                         source)
    if name == "caption":
        return _filtered(name, "pairs", "Flickr8k train (two captions of one image)", _flickr8k_train_pairs(data_dir),
                         forbidden, source)
    if (path / "manifest.json").is_file():
        return _extraction(path, forbidden)
    if path.suffix == ".tsv":
        if not path.is_file():
            raise FileNotFoundError(f"pair file {path} not found")
        kind, rows = _tsv(path)
        return _filtered(path.stem, kind, f"TSV {path}", rows, forbidden)
    raise ValueError(f"unknown pair data {name!r}: use one of {', '.join(TRAINING_SETS)}, a .tsv file, an "
                     "extraction folder (tools/captionbert/extract.py) or an alignment folder (align.py)")


def _validation_rows(data_dir):
    """{name: rows} of the whole validation suite, held-out text removed: (sentence1, sentence2, gold) for the
    Spearman sets, (image, [captions]) for flickr8k-dev."""
    forbidden = corpus.held_out_texts(data_dir)
    snli = [(p, h, SNLI_ORDINAL[label]) for p, h, label in _snli(data_dir, "test") if label in SNLI_ORDINAL]
    sets = {"stsb-dev": _filtered("stsb-dev", "scored", "", _stsb(data_dir, "dev"), forbidden),
            "mrpc-test": _filtered("mrpc-test", "scored", "", _mrpc(data_dir, "test"), forbidden),
            "snli-test": _filtered("snli-test", "scored", "", snli, forbidden)}
    rows = {name: list(zip(s.first, s.second, s.score)) for name, s in sets.items()}
    rows["snli-test"] = rows["snli-test"][:VALIDATION_SNLI_ROWS]
    rows["flickr8k-dev"] = [(image, captions) for image, captions in sts.flickr8k_captions(data_dir, "dev").items()
                            if not any(corpus.normalised(c) in forbidden for c in captions[:2])]
    return rows


def validation_sets(data_dir, rows=0):
    """{name: rows}: the suite that selects arms (VALIDATION_SOURCES names each set's source). Spearman sets hold
    (sentence1, sentence2, gold) in tools/sts.score's format; flickr8k-dev holds (image, [its captions]).
    rows: keep the first `rows` of each set (0 = all)."""
    return {name: found[:rows or len(found)] for name, found in _validation_rows(Path(data_dir)).items()}


def judged_on_own_source(source):
    """Whether an arm that trains on `source` (a PairSet.labelled_source) would be judged on it by SELECTION_SETS."""
    return source in {VALIDATION_SOURCES[name] for name in SELECTION_SETS}


def validation_mean(scores, trained_sources):
    """The mean of a roster's validation scores over SELECTION_SETS (the same sets for every roster, so means compare),
    or None when an arm of the roster trains on the source of one of them (trained_sources: the roster's
    PairSet.labelled_source values): no arm is judged on its own source."""
    if any(judged_on_own_source(source) for source in trained_sources):
        return None
    return float(np.mean([scores[name] for name in SELECTION_SETS]))
