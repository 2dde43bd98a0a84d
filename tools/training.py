"""The training loop every trainer shares (captionbert's distillation and AMOE arms, glyph's two stages, geolip's
memory), under one `accelerate.Accelerator`: the same command runs on one process, or on several started by
`torchrun --nproc-per-node N -m tools...` or `accelerate launch --num_processes N -m tools...` (data-parallel: each
process computes its share of every batch, gradients averaged), and a checkpoint resumes on any number of processes.
Fused AdamW on the parameters that require grad, a warm-up then linear, cosine or no decay, bf16 autocast around the
loss (the Accelerator's mixed precision), gradient accumulation over micro-steps (the Accelerator's), a history and
TensorBoard points every log_every steps (with tokens/s when the loss reports its tokens), validation every
validate_every steps, and an atomic checkpoint every checkpoint_every steps that a rerun resumes from, to the same
weights as an uninterrupted run. Every trainer but the arms' (float32, as the AMOE spec says) takes --precision
auto | bf16 | fp32 (resolve_precision: auto is bf16 only where the hardware computes it).

A tool's config supplies: out (the run folder), weight_decay, log_every, validate_every, checkpoint_every, and
warmup_fraction unless the tool gives its warm-up in steps. Batches come from `Batches` (a fixed shuffle per (seed,
epoch), grouped by length when given the lengths) or any other function of the step alone, so a resumed run draws the
same batches as an uninterrupted one; each process takes its Share of them, and a loss over `gathered` rows is the
whole batch's loss.
"""

import functools
import json
import os
import pickle
import random
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as distributed
import torch.nn.functional as F
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedDataParallelKwargs
from torch.utils.tensorboard import SummaryWriter
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


def accelerator_for(precision, gradient_accumulation_steps=1, cpu=None):
    """The Accelerator a trainer's stages run under, on this process's device (accelerator.device; the CPU when `cpu`,
    by default where there is no GPU): bf16 mixed precision when `precision` (resolved, resolve_precision) is "bf16",
    `gradient_accumulation_steps` micro-steps to a step. AcceleratorState is a process singleton whose precision
    cannot change, and one process may run trainers of both precisions (the test suite does): it is built afresh
    here, keeping the process group (PartialState)."""
    if gradient_accumulation_steps < 1:
        raise SystemExit(f"--gradient-accumulation-steps must be >= 1, got {gradient_accumulation_steps}")
    AcceleratorState._reset_state()
    GradientState._reset_state()
    cpu = not torch.cuda.is_available() if cpu is None else cpu
    return Accelerator(cpu=cpu,  # several CPU processes run data-parallel only when accelerate is told so
                       mixed_precision="bf16" if precision == "bf16" else "no",
                       gradient_accumulation_steps=gradient_accumulation_steps,
                       kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])


def process_device():
    """This process's device: its GPU (one per process under torchrun / accelerate launch), else the CPU."""
    return PartialState(cpu=not torch.cuda.is_available()).device


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


GROUP_BATCHES = 64  # batches per length-sorted group of a length-grouped epoch


def epoch_batches(count, batch_size, seed, epoch, lengths=None, max_batch_tokens=None):
    """One epoch's batches (index arrays of `count` examples), full batches only: a function of (seed, epoch) alone.
    Without lengths, a shuffle cut into batches (the tail dropped). With lengths (one per example), grouped by length
    as transformers' LengthGroupedSampler groups them: the shuffle is cut into groups of GROUP_BATCHES batches, each
    group sorted by length and cut into batches (the tail of each dropped), and the batches shuffled, so a batch's
    rows have similar lengths (little padding) while every batch is still a random draw. With max_batch_tokens a batch
    is also full when one more row would make rows x longest row exceed it (epochs then differ in length)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(count)
    if lengths is None:
        return [order[i:i + batch_size] for i in range(0, count - batch_size + 1, batch_size)]
    batches = []
    for start in range(0, count, batch_size * GROUP_BATCHES):
        members = order[start:start + batch_size * GROUP_BATCHES]
        batch = []
        for row in members[np.argsort(lengths[members], kind="stable")]:  # ascending: the newest row is the longest
            if batch and max_batch_tokens is not None and (len(batch) + 1) * lengths[row] > max_batch_tokens:
                batches.append(np.array(batch))
                batch = []
            batch.append(row)
            if len(batch) == batch_size:
                batches.append(np.array(batch))
                batch = []
    return [batches[i] for i in rng.permutation(len(batches))]


class Batches:
    """Every trainer's sampler: the batch at any step of a run, epochs of epoch_batches following one another. A
    function of the step alone, so a resumed run draws the same batches as an uninterrupted one. Keeps the current
    epoch's batches (drawn again when a step goes back)."""

    def __init__(self, count, batch_size, seed, lengths=None, max_batch_tokens=None):
        if count < batch_size:
            raise ValueError(f"{count} examples cannot fill one batch of {batch_size}")
        self.draw = functools.partial(epoch_batches, count, batch_size, seed, lengths=lengths,
                                      max_batch_tokens=max_batch_tokens)
        self.epoch, self.first_step, self.batches = 0, 0, self.draw(0)

    def at(self, step):
        """The indices of the batch at `step`."""
        if step < self.first_step:
            self.epoch, self.first_step, self.batches = 0, 0, self.draw(0)
        while step >= self.first_step + len(self.batches):
            self.epoch, self.first_step = self.epoch + 1, self.first_step + len(self.batches)
            self.batches = self.draw(self.epoch)
        return self.batches[step - self.first_step]

    def epochs(self, step):
        """Epochs done after `step` steps (fractional)."""
        self.at(max(step - 1, 0))
        return self.epoch + (step - self.first_step) / len(self.batches)


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


class Share(NamedTuple):
    """The part of a step's batch one process computes in one micro-step: part `index` of `count` (processes x
    gradient-accumulation micro-steps). Share(0, 1) is the whole batch."""
    index: int
    count: int

    def of(self, rows):
        """This share of `rows` (a list, array or tensor, one row per example): a contiguous part; the parts differ
        by one row at most."""
        if len(rows) < self.count:
            raise SystemExit(f"a batch of {len(rows)} cannot be shared among {self.count} parts (processes x "
                             "gradient-accumulation steps): make the batch larger or use fewer")
        return rows[self.index * len(rows) // self.count:(self.index + 1) * len(rows) // self.count]


def gathered(rows):
    """`rows` (a tensor, one row per example) with every process's rows after it, in process order; the gradient
    flows back to each process's own rows (torch.distributed.nn's all_gather sums the copies). A loss over gathered
    rows is the whole batch's loss, in-batch negatives included: each process computes it, its gradient reaches the
    parameters once per process, and the data-parallel average makes it the one-process gradient. One process: `rows`
    itself. Shares may differ by a row: padded for the collective, cut after."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return rows
    sizes = [torch.zeros((), dtype=torch.long, device=rows.device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor(len(rows), device=rows.device))
    padded = F.pad(rows, (0, 0) * (rows.dim() - 1) + (0, int(max(sizes)) - len(rows)))
    return torch.cat([part[:size] for part, size in zip(distributed.all_gather(padded), sizes)])


class LossStep(torch.nn.Module):
    """`loss_at` as the forward of a module that holds `model`: what the Accelerator prepares, so that data-parallel
    training (DDP) sees every step's forward and averages the gradients of the parameters that require grad."""

    def __init__(self, model, loss_at):
        super().__init__()
        self.model, self.loss_at = model, loss_at

    def forward(self, step, share):
        return self.loss_at(step, share)


def run_stage(stage, model, steps, learning_rate, loss_at, config, accelerator, validate=None, warmup_steps=None,
              decay="linear", history=None, resumable=True):
    """Train `model` for `steps` under `accelerator` (training.accelerator_for) with `loss_at(step, share) -> {"loss",
    ...}`: the loss of `share`'s part of step's batch (Share.of; scalar tensors, logged; an int "tokens", the part's
    real tokens, is logged as tokens_per_second over each log window, summed over the processes). Every process runs
    accelerator.gradient_accumulation_steps micro-steps a step, each with its own share. Resumes from
    out/checkpoint-<stage>.pt when there is one. `validate() -> {name: number}` runs in eval mode without autograd,
    on the main process, which alone writes the checkpoints, the history's validation points and TensorBoard
    (out/tensorboard). The learning rate warms up over `warmup_steps` (default warmup_fraction of the steps), then
    decays to 0 by `decay` (SCHEDULES). `history`: entries to keep beside the points (how the model started, say),
    saved in every checkpoint. A loss_at may also return "stop": a reason to end the stage after this step (every
    process must, at the same step). resumable=False: no checkpoint is read or written (a stage that starts over when
    killed). Returns the stage's history: those entries, train and validation points, training_seconds, steps_run
    and stopped (the reason, or None)."""
    optimizer = adam([p for p in model.parameters() if p.requires_grad], learning_rate, config.weight_decay)
    warmup_steps = round(config.warmup_fraction * steps) if warmup_steps is None else warmup_steps
    schedule = SCHEDULES[decay](optimizer, warmup_steps, steps)  # not prepared: it steps once a step, not a process
    checkpoint = config.out / f"checkpoint-{stage}.pt"
    step, history = 0, {**(history or {}), "train": [], "validation": [], "training_seconds": 0.0}
    if resumable and checkpoint.exists():
        step, history = load_checkpoint(checkpoint, model, optimizer, schedule)
        print(f"resuming {stage} at step {step}")
    loss_step, optimizer = accelerator.prepare(LossStep(model, loss_at), optimizer)
    main, micro_steps = accelerator.is_main_process, accelerator.gradient_accumulation_steps
    parts = accelerator.num_processes * micro_steps
    writer = SummaryWriter(str(config.out / "tensorboard")) if main else None
    model.train()
    model.zero_grad(set_to_none=True)  # the first step's gradients are its own
    bar = tqdm(total=steps, initial=step, desc=stage, unit="step", disable=not main)
    tokens, busy_seconds = 0, 0.0  # throughput counts training steps only, not validation or saving
    stopped = None
    while step < steps and stopped is None:
        started = time.perf_counter()
        for micro_step in range(micro_steps):
            with accelerator.accumulate(loss_step):
                terms = loss_step(step, Share(accelerator.process_index * micro_steps + micro_step, parts))
                accelerator.backward(terms["loss"])
                optimizer.step()  # only after the last micro-step: the accumulated gradients, averaged
                optimizer.zero_grad(set_to_none=True)
            tokens += terms.pop("tokens", 0)
        stopped = terms.pop("stop", None)
        schedule.step()
        step += 1
        last = step == steps or stopped is not None
        busy_seconds += time.perf_counter() - started
        history["training_seconds"] += time.perf_counter() - started
        bar.update()
        if step % config.log_every == 0 or last:
            point = {"step": step, "lr": schedule.get_last_lr()[0], **{k: v.item() for k, v in terms.items()}}
            tokens = int(accelerator.reduce(torch.tensor(tokens, device=accelerator.device), "sum"))
            if tokens:
                point["tokens_per_second"] = round(tokens / busy_seconds, 1)
            tokens, busy_seconds = 0, 0.0
            history["train"].append({**point, "seconds": round(history["training_seconds"], 1)})  # time so far
            for key, value in point.items():
                if main and key != "step":
                    writer.add_scalar(f"{stage}/{key}", value, step)
            bar.set_postfix(loss=f"{point['loss']:.3f}")
        if main and validate is not None and (step % config.validate_every == 0 or last):
            model.eval()
            with torch.no_grad():
                scores = validate()
            model.train()
            history["validation"].append({"step": step, **scores})
            for key, value in scores.items():
                writer.add_scalar(f"{stage}/validation_{key}", value, step)
            bar.write(f"{stage} step {step}: validation " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        if main and resumable and (step % config.checkpoint_every == 0 or last):
            save_checkpoint(checkpoint, model, optimizer, schedule, step, history)
            writer.flush()
    bar.close()
    if main:
        writer.close()
    accelerator.wait_for_everyone()
    accelerator.free_memory()  # the next stage prepares its own
    model.eval()
    return {**history, "steps_run": step, "stopped": stopped}
