"""Distil captionbert-8192-v2 from the teachers' consensus (tools/captionbert/align.py): from all-mpnet-base-v2's
selected weights (--init select, the cpu preset) or from scratch (the published recipe).

Usage:
    python -m tools.captionbert.train --align runs/demo/align --out runs/demo/distill            # cpu preset
    python -m tools.captionbert.train --preset paper --align runs/paper/align --out runs/paper/distill
    python -m tools.captionbert.train --align A --out O --steps 200 --batch-size 64   # preset values overridden
Rerunning the same command after a crash or kill -9 resumes from the last checkpoint and ends with the same
weights as an uninterrupted run.

The paper recipe, end to end (needs the Hub and one GPU; ~5.4 h of training):
    python -m tools.captionbert.extract --out runs/paper/extract --corpus cc12m_llava_captions.jsonl \\
        --teacher google-bert/bert-base-uncased --teacher distilbert/distilbert-base-uncased \\
        --teacher FacebookAI/roberta-base --teacher albert/albert-base-v2 --teacher answerdotai/ModernBERT-base
    python -m tools.captionbert.align --extract runs/paper/extract --out runs/paper/align --fit-rows 200000
    python -m tools.captionbert.train --preset paper --align runs/paper/align --out runs/paper/distill

Objective: symmetric InfoNCE (T = 0.07, in-batch negatives) of the student's 768-d embedding against the consensus
row of the same text, plus mse_weight x per-sample MSE against it (shared_modeling/losses.py). Pure Adam, fused (no
weight decay), linear warm-up then cosine decay, bf16 autocast for the forward pass where the hardware computes bf16
(--precision auto: a GPU, or a CPU with AVX-512 BF16 or AMX; on a CPU without them bf16 is emulated, far slower
than float32). Batches are grouped by length (tools/training.Batches, the sampler every trainer shares): the rows
of each epoch are shuffled, cut into groups of 64 batches, sorted by length inside a group and cut into batches, and
the batches shuffled, so a batch's texts have similar lengths (little padding) while every batch is still a random
draw; --max-batch-tokens caps rows x longest row. The order depends only on (seed, epoch), which makes resumption
exact.

The out folder gets: checkpoint-distill.pt (model, optimiser, schedule, RNG states, history; written atomically
every checkpoint_every steps by the shared loop, tools/training.py), tensorboard/ events, metrics.json (history and
final numbers), loss_curve.png, and final/ (the trained student as a captionbert folder: weights, stored as
--save-dtype says, config, code, tokenizer) for tools/captionbert/export.py.
"""

import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from tools import runs, training
from tools.captionbert import teacher_init
from tools.captionbert.data import (INITS, PRESETS, Config, collate, distillation_terms,
                                    load_consensus)
from tools.plots import Panel, curve, plot_history


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__, presets=PRESETS,
                               positive=("steps", "batch_size", "max_length", "checkpoint_every", "log_every",
                                         "validate_every"))
    if config.batch_size < 2:
        raise SystemExit("--batch-size must be at least 2 (InfoNCE needs in-batch negatives)")
    if config.init not in INITS:
        raise SystemExit(f"--init must be one of {', '.join(INITS)}, got {config.init!r}")
    if config.init_head not in ("fit", "random"):
        raise SystemExit(f"--init-head must be fit or random, got {config.init_head!r}")
    if config.init_selection not in teacher_init.SELECTIONS:
        raise SystemExit(f"--init-selection must be one of {', '.join(teacher_init.SELECTIONS)}")
    if config.save_dtype not in training.STORAGE_DTYPES:
        raise SystemExit(f"--save-dtype must be one of {', '.join(training.STORAGE_DTYPES)}, got {config.save_dtype!r}")
    if config.max_batch_tokens is not None and config.max_batch_tokens < 2 * config.max_length:
        raise SystemExit(f"--max-batch-tokens must hold two rows of --max-length {config.max_length} tokens")
    return config


# ---- the run's parts -------------------------------------------------------------------------------------------------

def build_student(config, width):
    """A fresh captionbert of --model's config, checked to emit `width`-d embeddings (the consensus's)."""
    model_config = AutoConfig.from_pretrained(str(config.model), trust_remote_code=True)
    if model_config.output_dim != width:
        raise SystemExit(f"the student emits {model_config.output_dim}-d embeddings but the consensus is "
                         f"{width}-d: give --model a captionbert folder with output_dim {width}")
    return AutoModel.from_config(model_config, trust_remote_code=True)


def initialise(config, model, tokenizer, texts, batches):
    """The student's weights from config.init_teacher (--init select or static) and, with --init-head fit, its head
    fitted on `texts` (`batches`: their (token ids, attention mask, consensus rows)). Returns the record."""
    started = time.perf_counter()
    if config.init == "select":
        init = teacher_init.initialise(model, tokenizer, config.init_teacher, config.init_selection, texts)
    else:
        init = teacher_init.initialise_static(model, tokenizer, config.init_teacher)
    init["head"] = {"kind": config.init_head}
    if config.init_head == "fit":
        init["head"]["fit_cosine"] = round(teacher_init.fit_head(model, batches), 4)
        init["head"]["texts"] = len(texts)
    init["seconds"] = round(time.perf_counter() - started, 1)
    how = f"weight selection ({config.init_selection})" if config.init == "select" else "static token embeddings"
    print(f"{how} from {config.init_teacher}: {init['tokens_mapped']:,} of {init['vocab_size']:,} tokens mapped, "
          f"{init.get('positions_from_teacher', 0)} positions, head {init['head']}, {init['seconds']} s")
    return init


def save_final(config, model, history, longest, validate):
    """out/final: the student (its trained_length the positions training reached: the `longest` training text, or the
    teacher's when they came from it) stored as config.save_dtype, with the code and tokenizer files of --model, and
    the loss curve. Returns (the folder, the validation cosine of the weights as stored)."""
    trained_length = max(longest, history["init"].get("positions_from_teacher", 0))
    model.config.trained_length = min(trained_length, model.config.max_position_embeddings)
    final = config.out / "final"
    training.save_stored(model, final, config.save_dtype)  # the model is now the stored weights
    stored_cosine = history["validation"][-1]["cosine"]  # float32 stores the weights as trained
    if config.save_dtype != "float32":
        with torch.no_grad():
            stored_cosine = validate()["cosine"]
    for item in sorted(Path(config.model).iterdir()):  # code and tokenizer files beside the weights
        if item.suffix in (".py", ".json", ".txt") and item.name != "config.json":
            shutil.copy(item, final / item.name)
    plot_history([Panel("training loss", {"InfoNCE": curve(history["train"], "info_nce"),
                                          "weighted MSE": curve(history["train"], "mse_weighted"),
                                          "total": curve(history["train"], "loss")}),
                  Panel("cosine to consensus", {"train batch": curve(history["train"], "cosine"),
                                                "held-out rows": curve(history["validation"], "cosine")})],
                 config.out / "loss_curve.png")
    return final, stored_cosine


# ---- the run -------------------------------------------------------------------------------------------------------

def main(argv=None):
    config = parse_config(argv)
    texts, targets, teachers = load_consensus(config.align)
    if config.expected_teachers and sorted(teachers) != sorted(config.expected_teachers):
        print(f"note: the consensus comes from {teachers}, not the {config.preset} preset's roster "
              f"{config.expected_teachers}", file=sys.stderr)
    config.precision = training.resolve_precision(config.precision, training.process_device())  # before the record
    accelerator = training.accelerator_for(config.precision, config.gradient_accumulation_steps)
    device = accelerator.device

    # Data: tokenise once; hold out validation rows; lengths group the batches.
    tokenizer = AutoTokenizer.from_pretrained(str(config.model), trust_remote_code=True)
    token_ids = tokenizer(texts, truncation=True, max_length=config.max_length)["input_ids"]
    order = np.random.default_rng(config.seed).permutation(len(texts))
    validation_rows, training_rows = order[:config.validation_rows], np.sort(order[config.validation_rows:])
    if len(training_rows) < config.batch_size:
        raise SystemExit(f"{len(training_rows)} training rows cannot fill one batch of {config.batch_size}")
    lengths = np.array([len(token_ids[i]) for i in training_rows])
    epochs = training.Batches(len(training_rows), config.batch_size, config.seed, lengths, config.max_batch_tokens)
    batches_per_epoch = len(epochs.batches)
    targets = torch.from_numpy(targets)

    # Model, optimiser, schedule; then the checkpoint if there is one.
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model = build_student(config, targets.shape[1])
    if runs.run_state(config.out, config) == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    init = {"kind": "scratch"}
    if config.init != "scratch" and not (config.out / "checkpoint-distill.pt").exists():  # resumed: has its weights
        rows = training_rows[:config.init_texts]
        batches = ((*collate(token_ids, rows[i:i + 128], tokenizer.pad_token_id), targets[rows[i:i + 128]].float())
                   for i in range(0, len(rows), 128))
        init = initialise(config, model, tokenizer, [texts[i] for i in rows], batches)
    model = model.to(device)
    config.out.mkdir(parents=True, exist_ok=True)

    def loss_at(step, share):
        rows = share.of(training_rows[epochs.at(step)])
        input_ids, attention_mask = collate(token_ids, rows, tokenizer.pad_token_id)
        terms = distillation_terms(model, input_ids.to(device), attention_mask.to(device),
                                   targets[rows].float().to(device), config)
        return {**terms, "tokens": int(attention_mask.sum())}

    def validate():
        cosines = []
        with accelerator.autocast():
            for start in range(0, len(validation_rows), 256):
                rows = validation_rows[start:start + 256]
                input_ids, attention_mask = collate(token_ids, rows, tokenizer.pad_token_id)
                embedding = model(input_ids.to(device), attention_mask.to(device)).pooler_output.float()
                cosines.append((embedding * targets[rows].float().to(device)).sum(-1).cpu())
        return {"cosine": float(torch.cat(cosines).mean())}

    parameters = sum(p.numel() for p in model.parameters())
    print(f"student {parameters:,} parameters; {len(training_rows)} training rows ({batches_per_epoch} batches an "
          f"epoch), {len(validation_rows)} held out; {config.steps} steps of {config.batch_size} on {device}")
    with runs.RunRecord(config.out, config, "captionbert.train") as record:
        history = training.run_stage("distill", model, config.steps, config.learning_rate, loss_at, config,
                                     accelerator, validate, warmup_steps=config.warmup_steps, decay="cosine",
                                     history={"init": init})
        if not accelerator.is_main_process:
            return 0  # the main process saves and records

        final, stored_cosine = save_final(config, model, history, int(lengths.max()), validate)
        metrics = {"parameters": parameters, "steps": config.steps, "epochs": round(epochs.epochs(config.steps), 3),
                   "init": history["init"], "trained_length": model.config.trained_length,
                   "training_rows": int(len(training_rows)), "validation_rows": int(len(validation_rows)),
                   "teachers": teachers, "final_validation_cosine": history["validation"][-1]["cosine"],
                   "save_dtype": config.save_dtype, "stored_validation_cosine": stored_cosine,
                   "final_train": history["train"][-1], "training_minutes": round(history["training_seconds"] / 60, 1),
                   "history": history}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["device"] = str(device)
    print(f"validation cosine to the consensus {metrics['final_validation_cosine']:.4f} "
          f"({stored_cosine:.4f} as stored in {config.save_dtype}); wrote {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
