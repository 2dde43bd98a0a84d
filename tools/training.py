"""The training loop every trainer shares (captionbert's distillation and AMOE arms, glyph's two stages, geolip's
memory): fused AdamW on the parameters that require grad, a warm-up then linear, cosine or no decay, bf16 autocast
around the loss, a history and TensorBoard points every log_every steps (with tokens/s when the loss reports its
tokens), validation every validate_every steps, and an atomic checkpoint every checkpoint_every steps that a rerun
resumes from, to the same weights as an uninterrupted run. Every trainer but the arms' (float32, as the AMOE spec
says) takes --precision auto | bf16 | fp32 (resolve_precision: auto is bf16 only where the hardware computes it).

A tool's config supplies: out (the run folder), weight_decay, precision ("bf16" or "fp32", resolved), log_every,
validate_every, checkpoint_every, and warmup_fraction unless the tool gives its warm-up in steps. Batches come from
`batch_at` (a fixed shuffle per (seed, epoch)) or any other function of the step alone, so a resumed run draws the
same batches as an uninterrupted one.
"""

import functools
import json
import os
import pickle
import random
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                          get_linear_schedule_with_warmup)


@functools.lru_cache(maxsize=2)
def bf16_native(device):
    """Whether `device` computes bf16 in hardware: a GPU that supports it, or a CPU with AVX-512 BF16 or AMX. Without
    them PyTorch emulates bf16 on the CPU, far slower than float32 (on an AVX2-only CPU a captionbert training step
    in bf16 autocast took about two orders of magnitude longer)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


PRECISIONS = ("auto", "bf16", "fp32")


def resolve_precision(precision, device):
    """What --precision runs on `device`: "bf16" (autocast on the forward pass; losses and optimiser in float32) or
    "fp32"; "auto" is bf16 where the hardware computes it (bf16_native), else fp32. Resolve before the run record,
    so the record keeps what ran."""
    if precision not in PRECISIONS:
        raise SystemExit(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return ("bf16" if bf16_native(device) else "fp32") if precision == "auto" else precision


STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def save_stored(model, folder, storage):
    """model.save_pretrained(folder) with the floating weights stored as `storage` (STORAGE_DTYPES), while config.json
    keeps "dtype": "float32", what the model computes in (from_pretrained upcasts the stored weights on load). The
    model in memory is rounded the same way, so it is exactly what the folder will load as. float16 halves the file;
    a weight outside its range is refused rather than saved as inf."""
    if storage not in STORAGE_DTYPES:
        raise SystemExit(f"--save-dtype must be one of {', '.join(STORAGE_DTYPES)}, got {storage!r}")
    dtype = STORAGE_DTYPES[storage]
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor.to(dtype)).all():
            raise SystemExit(f"{name} holds values outside {storage}'s range; save it with --save-dtype float32")
    model.to(dtype).save_pretrained(folder)
    model.to(torch.float32)
    config_path = Path(folder) / "config.json"
    config = {**json.loads(config_path.read_text()), "dtype": "float32"}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")  # as transformers writes it


def adam(parameters, learning_rate, weight_decay=0.0):
    """AdamW (Adam when weight_decay is 0) with torch's fused kernel: one pass over every tensor per step. Without
    it a CPU steps tensor by tensor; make bench's training-step rows measure the two side by side."""
    return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=weight_decay, fused=True)


def epoch_order(count, batch_size, seed, epoch):
    """The batches (index arrays) of one epoch: a shuffle that depends only on (seed, epoch); the tail is dropped.
    Drawn again at every step that asks (one permutation of `count` indices, small beside a training step)."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    return [order[i:i + batch_size] for i in range(0, count - batch_size + 1, batch_size)]


def batch_at(step, count, batch_size, seed):
    """The indices (of `count` examples) of the batch at `step`."""
    epoch, position = divmod(step, count // batch_size)
    return epoch_order(count, batch_size, seed, epoch)[position]


def trained_state(model):
    """The model's trained tensors: its parameters that require grad (a frozen part is left out of checkpoints)."""
    return {name: parameter for name, parameter in model.named_parameters() if parameter.requires_grad}


def save_checkpoint(path, model, optimizer, schedule, step, history):
    state = {"model": trained_state(model), "optimizer": optimizer.state_dict(),
             "schedule": schedule.state_dict(), "step": step, "history": history,
             "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    temporary = path.with_name(path.name + ".tmp")
    torch.save(state, temporary)
    os.replace(temporary, path)


def read_checkpoint(path):
    """The contents of a resume checkpoint, read without running code: weights_only=True unpickles only tensors,
    numbers, strings and containers, which is all a checkpoint holds (the RNG states are a tensor and
    random.getstate()'s tuple of ints). A file that needs more was not written by a save_checkpoint: refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise SystemExit(f"{path}: not a checkpoint save_checkpoint wrote (torch.load(weights_only=True) refuses "
                         "what it holds, and reading it could run code); delete it to start over") from error


def load_checkpoint(path, model, optimizer, schedule):
    """Restore a save_checkpoint file; returns (step, history)."""
    state = read_checkpoint(path)
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    trained = trained_state(model)
    missing = [name for name in missing if name in trained]  # a frozen part is not in the file, by design
    if missing or unexpected:
        raise SystemExit(f"{path} does not fit the model: missing {missing}, unexpected {unexpected}")
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state["step"], state["history"]


def optimiser_step(optimizer, loss):
    """One step of `optimizer` on the scalar `loss`: gradients cleared, back-propagated, applied."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


SCHEDULES = {  # after the warm-up: (optimizer, warm-up steps, steps) -> schedule
    "linear": get_linear_schedule_with_warmup, "cosine": get_cosine_schedule_with_warmup,
    "constant": lambda optimizer, warmup_steps, steps: get_constant_schedule_with_warmup(optimizer, warmup_steps)}


def run_stage(stage, model, steps, learning_rate, loss_at, config, writer, validate=None, warmup_steps=None,
              decay="linear", history=None):
    """Train `model` for `steps` with `loss_at(step) -> {"loss", ...}` (scalar tensors, logged; an int "tokens", the
    step's real tokens, is logged as tokens_per_second over each log window instead); resume from
    out/checkpoint-<stage>.pt when there is one. `validate() -> {name: number}` runs in eval mode without autograd.
    The learning rate warms up over `warmup_steps` (default warmup_fraction of the steps), then decays to 0 by
    `decay` (SCHEDULES). `history`: entries to keep beside the points (how the model started, say), saved in every
    checkpoint. Returns the stage's history: those entries, train and validation points, and training_seconds."""
    optimizer = adam([p for p in model.parameters() if p.requires_grad], learning_rate, config.weight_decay)
    warmup_steps = round(config.warmup_fraction * steps) if warmup_steps is None else warmup_steps
    schedule = SCHEDULES[decay](optimizer, warmup_steps, steps)
    checkpoint = config.out / f"checkpoint-{stage}.pt"
    step, history = 0, {**(history or {}), "train": [], "validation": [], "training_seconds": 0.0}
    if checkpoint.exists():
        step, history = load_checkpoint(checkpoint, model, optimizer, schedule)
        print(f"resuming {stage} at step {step}")
    device_type = next(model.parameters()).device.type
    model.train()
    bar = tqdm(total=steps, initial=step, desc=stage, unit="step")
    tokens, busy_seconds = 0, 0.0  # throughput counts training steps only, not validation or saving
    while step < steps:
        started = time.perf_counter()
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.precision == "bf16"):
            terms = loss_at(step)
        optimiser_step(optimizer, terms["loss"])
        schedule.step()
        step += 1
        tokens += terms.pop("tokens", 0)
        busy_seconds += time.perf_counter() - started
        history["training_seconds"] += time.perf_counter() - started
        bar.update()
        if step % config.log_every == 0 or step == steps:
            point = {"step": step, "lr": schedule.get_last_lr()[0], **{k: v.item() for k, v in terms.items()}}
            if tokens:
                point["tokens_per_second"] = round(tokens / busy_seconds, 1)
            tokens, busy_seconds = 0, 0.0
            history["train"].append({**point, "seconds": round(history["training_seconds"], 1)})  # time so far
            for key, value in point.items():
                if key != "step":
                    writer.add_scalar(f"{stage}/{key}", value, step)
            bar.set_postfix(loss=f"{point['loss']:.3f}")
        if validate is not None and (step % config.validate_every == 0 or step == steps):
            model.eval()
            with torch.no_grad():
                scores = validate()
            model.train()
            history["validation"].append({"step": step, **scores})
            for key, value in scores.items():
                writer.add_scalar(f"{stage}/validation_{key}", value, step)
            bar.write(f"{stage} step {step}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        if step % config.checkpoint_every == 0 or step == steps:
            save_checkpoint(checkpoint, model, optimizer, schedule, step, history)
            writer.flush()
    bar.close()
    model.eval()
    return history
