"""The default text corpus the captionbert teachers embed and the student trains on, read from ../shared/data.

    flickr8k-train  the five captions of each Flickr8k train-split image (the dev and test splits stay unseen;
                    the test split is the in-domain gauge of tools/captionbert/evaluate.py)
    imageinwords    the long ImageInWords descriptions (fields IIW, IIW-P5B, DOCCI): the only 100+ token text
    stsb-train      both sentences of the STS Benchmark train split
    mrpc-train      both sentences of the MRPC train split
    snli-dev        the premises and hypotheses of the SNLI dev split (its test split stays unseen)

Held-out text is never trained on: no text of any STS-8 test set, no caption of a Flickr8k test image (the
in-domain gauges), and no description of the ImageInWords images held out as the long-text gallery
(`split_imageinwords`: geolip's m_acc gallery and captionbert's long-input gauge). Sources overlap them (STS-B
train reuses STS 2012-2016 test sentences, MSRpar comes from MRPC, SICK and the SNLI premises from Flickr captions,
and short captions repeat across images), so every text whose normalised form (lower case, single spaces) is held
out is dropped and counted. Duplicates keep their first occurrence.
"""

import csv
import hashlib
import json
import random
from pathlib import Path

from tools import sts

SOURCES = ("flickr8k-train", "imageinwords", "stsb-train", "mrpc-train", "snli-dev")
IMAGEINWORDS_FIELDS = ("IIW", "IIW-P5B", "DOCCI")
IMAGEINWORDS_HELD_OUT = 500  # long descriptions held out (whole images) as the long-text gallery
IMAGEINWORDS_SEED = 0  # the draw of the held-out images


def _flickr8k_train(data_dir):
    flickr = data_dir / "captions" / "flickr8k"
    train_images = set((flickr / "Flickr_8k.trainImages.txt").read_text().split())
    for line in (flickr / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, caption = line.split("\t", 1)
        if key.split("#")[0] in train_images:
            yield caption


def _imageinwords(data_dir):
    for path in sorted((data_dir / "captions" / "imageinwords").glob("*/data.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            yield from (record[f] for f in IMAGEINWORDS_FIELDS if record.get(f))


def imageinwords_by_image(data_dir):
    """[[descriptions of one image], ...]: every ImageInWords record's distinct long descriptions, in file order."""
    groups = []
    for path in sorted((Path(data_dir) / "captions" / "imageinwords").glob("*/data.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            texts = list(dict.fromkeys(record[f].strip() for f in IMAGEINWORDS_FIELDS if record.get(f)))
            if texts:
                groups.append(texts)
    return groups


def split_by_image(groups, held_out, seed):
    """(training texts, held-out texts): the groups shuffled by the seed, whole groups held out until there are at
    least `held_out` texts."""
    groups = list(groups)
    random.Random(seed).shuffle(groups)
    validation, training = [], []
    for group in groups:
        (validation if len(validation) < held_out else training).extend(group)
    return training, validation


def split_imageinwords(data_dir, held_out=IMAGEINWORDS_HELD_OUT, seed=IMAGEINWORDS_SEED):
    """(training, held-out) ImageInWords descriptions, split by image; the defaults give the project's gallery."""
    return split_by_image(imageinwords_by_image(data_dir), held_out, seed)


def _stsb_train(data_dir):
    for first, second, _ in sts.stsb_split(data_dir / "sts" / "STSBenchmark", "train"):
        yield from (first, second)


def _mrpc_train(data_dir):
    with open(data_dir / "pairs" / "mrpc" / "msr_paraphrase_train.txt", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            yield from (row["#1 String"], row["#2 String"])


def _snli_dev(data_dir):
    for name in ("s1.dev", "s2.dev"):
        yield from (data_dir / "pairs" / "snli" / name).read_text(encoding="utf-8").splitlines()


READERS = {"flickr8k-train": _flickr8k_train, "imageinwords": _imageinwords, "stsb-train": _stsb_train,
           "mrpc-train": _mrpc_train, "snli-dev": _snli_dev}


def normalised(text):
    return " ".join(text.lower().split())


def held_out_texts(data_dir):
    """Normalised forms of every sentence in the eight STS test sets, every Flickr8k test caption and every held-out
    ImageInWords description."""
    sentences = {normalised(s) for task in sts.TASKS for a, b, _ in sts.load_task(data_dir, task) for s in (a, b)}
    flickr = Path(data_dir) / "captions" / "flickr8k"
    test_images = set((flickr / "Flickr_8k.testImages.txt").read_text().split())
    captions = {normalised(line.split("\t", 1)[1])
                for line in (flickr / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
                if line.split("#")[0] in test_images}
    long_texts = {normalised(text) for text in split_imageinwords(data_dir)[1]}
    return sentences | captions | long_texts


def build(data_dir, sources=SOURCES):
    """(texts, stats): the deduplicated corpus in source order, and rows kept / dropped per source."""
    data_dir = Path(data_dir)
    unknown = set(sources) - set(SOURCES)
    if unknown:
        raise ValueError(f"unknown corpus sources {sorted(unknown)}; known: {', '.join(SOURCES)}")
    forbidden = held_out_texts(data_dir)
    texts, seen, stats = [], set(), {}
    for source in sources:
        kept = held_out = duplicate = 0
        for text in READERS[source](data_dir):
            text = text.strip()
            key = normalised(text)
            if not key:
                continue
            if key in forbidden:
                held_out += 1
            elif key in seen:
                duplicate += 1
            else:
                seen.add(key)
                texts.append(text)
                kept += 1
        stats[source] = {"kept": kept, "dropped_held_out": held_out, "dropped_duplicate": duplicate}
    return texts, stats


def read_texts(path):
    """A corpus file: a .jsonl of JSON strings (texts may hold newlines) or plain text, one text a line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in lines]
    return [line for line in lines if line.strip()]


def write_texts(path, texts):
    Path(path).write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")


def corpus_hash(texts):
    """sha256 of the texts in order, each length-prefixed so no two corpora collide by re-splitting."""
    digest = hashlib.sha256()
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()
