"""What the AMOE scripts (solo.py, dispatch.py, select.py) share: the options every run takes and their parsing, fresh
arms and dispatches on the frozen trunk, the arm objective and the batch streams it reads, the routing statistics,
dispatch training (routing keys only, with the starvation alarm), finished solo runs read back, and the run itself
(once: a finished run is skipped). The maths of arms and dispatch is the AMOE spec (shared_modeling/amoe.py).

The arm objective (batch_loss), by the kind of the rows (tools/captionbert/amoe/pairs.py; losses in
shared_modeling/losses.py): in-batch InfoNCE, with the hard negative where the data has one (equiv; or with
triples_loss "cosent", CoSENT ranking each anchor's positive above every hard negative), plus CoSENT over the MRPC
labels so Quality-0 pairs rank below paraphrases (paraphrase); CoSENT on gold scores (sts); 1 - cosine of each text's
embedding to its teacher embedding (an extraction or alignment folder: the teacher arms).
"""

import contextlib
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from shared_modeling.amoe import GATE_INIT, TAU, Arm, Dispatch, load_arm, load_dispatch
from shared_modeling.encoding import truncate_keeping_last
from shared_modeling.losses import cosent, info_nce_with_hard_negatives, symmetric_info_nce
from tools import registry, runs, sts, training
from tools.captionbert.amoe import pairs

CONTROL = "control"  # roster entry for the untrained control arm
ALARM_PERPLEXITY, ALARM_SHARE, ALARM_STRIKES = 1.5, 0.02, 3
TRIPLES_LOSSES = ("infonce", "cosent")  # the losses of rows with a hard negative (solo's --triples-loss)
# What shaped a solo arm (its arm file's metadata, ARMS.json's "training"), and the value of an option for a run made
# before the option existed
TRAINING = ("steps", "batch_size", "learning_rate", "temperature", "cosent_scale", "max_length", "gate_init",
            "relational_weight", "triples_loss", "sites")
BEFORE = {"gate_init": GATE_INIT, "relational_weight": 0.0, "triples_loss": TRIPLES_LOSSES[0], "sites": 0}


@dataclass
class Common:
    """The options of every AMOE run (solo, dispatch, select); each script's config adds its own."""
    precision = "fp32"  # not options: the shared loop (tools/training.py) trains arms and dispatches in float32 (the
    weight_decay = 0.0  # trunk's arithmetic, TF32 off), with pure Adam
    out: Path  # run folder
    model: Path = registry.CAPTIONBERT.path  # the frozen trunk: a captionbert folder
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    steps: int = 120  # optimiser steps
    batch_size: int = 64  # rows (pairs or triples) per step
    learning_rate: float = 1e-3  # Adam, no weight decay
    temperature: float = 0.05  # InfoNCE temperature
    cosent_scale: float = 20.0  # CoSENT scale
    max_length: int = 64  # tokens per text in training
    seed: int = 0  # arm and routing-key initialisation and data order
    log_every: int = 10  # steps between history / TensorBoard points
    tasks: list[str] = field(default_factory=lambda: list(sts.TASKS), metadata={
        "choices": sts.TASKS, "help": "STS-8 tasks to score (default all)"})
    validation_rows: int = 0  # rows per validation set (0 = all; fewer for quick trials)
    device: str = "cuda" if torch.cuda.is_available() else "cpu"  # where the trunk and the arms run


def parse_config(config_class, argv, description):
    """The `config_class` (a Common) of the command line `argv` (runs.parse_config), with the sizes every AMOE run
    needs checked: positive, and at least two rows a batch."""
    config = runs.parse_config(config_class, argv, description,
                               positive=("steps", "batch_size", "max_length", "log_every"))
    if config.batch_size < 2:
        raise SystemExit("--batch-size must be at least 2 (in-batch negatives)")
    return config


def run_once(config, tool, job, resume=False):
    """Run `job(config) -> metrics` in config.out under its run record (run.json names `tool`), then write
    metrics.json. A finished run (metrics.json) is skipped and a folder holding another config's run refused
    (runs.run_state); a killed run resumes where `resume` (a solo run, from its checkpoint), else starts over. Of
    several processes (torchrun), the main one records; the job returns None on the others."""
    state = runs.run_state(config.out, config)
    if state == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    if state == "partial" and not resume:
        shutil.rmtree(config.out)
    with runs.RunRecord(config.out, config, tool):
        metrics = job(config)
        if not runs.main_process():
            return 0  # the main process records
        runs.write_json(config.out / "metrics.json", metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "steps")}, indent=2, default=str))
    return 0


def training_spec(config):
    """What shaped a solo arm, from its config (a solo run's config.json, or its config as a dict): the options in
    TRAINING (BEFORE's value for one its run predates), and what every solo run fixes."""
    return {key: config[key] if key in config else BEFORE[key] for key in TRAINING} | {
        "optimizer": "Adam (fused), weight decay 0", "precision": "fp32, TF32 off", "trunk": "frozen, eval mode"}


# ---- the frozen trunk and its arms -----------------------------------------------------------------------------------

def shape(model):
    return model.config.hidden_size, model.config.num_hidden_layers


def fresh_arm(model, seed, gate_init=GATE_INIT):
    """An untrained arm (exactly inert: zero output projections), initialised from `seed`, every gate at gate_init."""
    torch.manual_seed(seed)
    arm = Arm(*shape(model))
    with torch.no_grad():
        for site in arm.blocks:
            site.gate.fill_(gate_init)
    return arm


def fresh_dispatch(model, roster, seed, tau=TAU):
    torch.manual_seed(seed)
    return Dispatch(roster, *shape(model), tau=tau)


def build_collective(model, solo_routing, roster, seed, tau):
    """A Dispatch over `roster`; rows of arms with a solo run (solo_routing: {name: its one-arm solo Dispatch}) start
    from their solo routing keys (same key projections: every dispatch here uses seed 0 for them), the others from a
    seeded orthogonal init."""
    dispatch = fresh_dispatch(model, roster, seed, tau)
    with torch.no_grad():
        for k, name in enumerate(roster):
            if name in solo_routing:
                for block, solo in zip(dispatch.blocks, solo_routing[name].blocks):
                    block.routing_keys[k] = solo.routing_keys[0]
    return dispatch


@contextlib.contextmanager
def attached(model, arms, dispatch):
    """The trunk with `arms` ({name: Arm}) under `dispatch`, every arm enabled, through the model's own attach_amoe:
    the toggle law (every arm off == the bare trunk) is checked on entry and again on leaving, where they detach."""
    model.attach_amoe(arms=arms, dispatch=dispatch)
    try:
        yield model
    finally:
        model.detach_amoe()


class SoloRun(NamedTuple):
    """A finished solo run read back (read_solo_run): its arm, its one-arm solo dispatch (the routing key collectives
    start from), its metrics.json and config.json."""
    name: str
    arm: Arm
    routing: Dispatch
    metrics: dict
    config: dict

    def data(self, data_dir):
        """The PairSet it trained on (runs from before --teacher fit no teacher)."""
        return pairs.load(self.config["data"], data_dir, self.config.get("teacher", ""))


def read_solo_run(folder, model, trunk_id):
    """The SoloRun of a finished solo run folder, its files checked against the trunk."""
    folder = Path(folder)
    metrics = runs.read_json(folder / "metrics.json") if (folder / "metrics.json").is_file() else {}
    if metrics.get("status") != "complete":
        raise SystemExit(f"{folder} is not a finished solo run (no complete metrics.json)")
    name = metrics["name"]
    arm, _ = load_arm(folder / "amoe" / "arms" / f"{name}.safetensors", *shape(model), trunk_id, name=name)
    routing, _ = load_dispatch(folder / "amoe" / "solo" / "dispatch.safetensors", *shape(model), trunk_id)
    return SoloRun(name, arm, routing, metrics, runs.read_json(folder / "config.json"))


# ---- batches and losses ----------------------------------------------------------------------------------------------

def embed(model, texts, max_length):
    """(len(texts), E) L2-normalised embeddings in one padded forward pass, with gradients."""
    token_ids = [truncate_keeping_last(ids, max_length) for ids in model.tokenizer(texts, verbose=False)["input_ids"]]
    batch = model.tokenizer.pad({"input_ids": token_ids}, return_tensors="pt")
    return model(batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)).pooler_output


def batch_loss(model, data, rows, config, relational_weight=0.0, triples_loss="infonce"):
    """The arm objective on rows of a PairSet (see the module docstring), a scalar; relational_weight and
    triples_loss: a solo run's, for the teacher arm and the arms with a hard negative. `rows`: this process's share of
    the batch; the loss is over every process's rows (training.gathered)."""
    first = [data.first[i] for i in rows]
    if data.kind == "embedded":  # regression, not InfoNCE: a trunk distilled from the teachers already tells 16
        # texts' teacher embeddings apart (InfoNCE measured ~0.001 from the first steps on the demo trunk, no signal)
        targets = training.gathered(torch.from_numpy(data.target[rows]).to(model.device))
        embeddings = training.gathered(embed(model, first, config.max_length))  # every process's rows
        loss = (1 - F.cosine_similarity(embeddings, targets, dim=-1)).mean()
        if relational_weight:
            loss = loss + relational_weight * F.mse_loss(embeddings @ embeddings.T, targets @ targets.T)
        return loss
    second = [data.second[i] for i in rows]
    negative = [data.negative[i] for i in rows] if data.kind == "triples" else []
    embeddings = embed(model, first + second + negative, config.max_length)
    a, b, n = (training.gathered(part) for part in  # every process's rows: the whole batch's loss
               (embeddings[:len(rows)], embeddings[len(rows):2 * len(rows)], embeddings[2 * len(rows):]))
    if data.kind == "pairs":
        return symmetric_info_nce(a, b, config.temperature)
    if data.kind == "triples":
        if triples_loss == "cosent":  # each anchor's positive (score 1) ranked above every hard negative (score 0)
            cosines = torch.cat([F.cosine_similarity(a, b, dim=-1), F.cosine_similarity(a, n, dim=-1)])
            return cosent(cosines, (torch.arange(len(cosines), device=a.device) < len(a)).float(),
                          config.cosent_scale)
        return info_nce_with_hard_negatives(a, b, n, config.temperature)
    scores = training.gathered(torch.tensor([data.score[i] for i in rows], device=a.device))
    loss = cosent(F.cosine_similarity(a, b, dim=-1), scores, config.cosent_scale)
    if data.kind == "labelled":
        positive = scores > 0.5
        if positive.sum() >= 2:
            loss = loss + symmetric_info_nce(a[positive], b[positive], config.temperature)
    return loss


# ---- routing statistics (forward hooks on the dispatch blocks; observation only) ------------------------------------

class RoutingMonitor:
    """Collects, per forward pass, each block's w/z (N, A); summarises usage, spread and amplitude budget."""

    def __init__(self, dispatch):
        self.roster = dispatch.roster
        self.handles = [block.register_forward_hook(self._record) for block in dispatch.blocks]
        self.reset()

    def _record(self, module, inputs, weights):
        self.current.append(weights.detach().abs())

    def end_step(self):
        """Fold the finished forward pass into the running sums."""
        if not self.current:
            return
        magnitude = torch.stack(self.current)  # (blocks, N, A)
        self.current = []
        choice = magnitude.argmax(dim=-1)  # (blocks, N)
        arms = len(self.roster)
        self.usage += torch.bincount(choice.flatten(), minlength=arms).cpu().double()
        modal = torch.stack([(choice == k).sum(dim=0) for k in range(arms)]).amax(dim=0)  # (N,) blocks on modal arm
        self.spread_sum += float((1 - modal.double() / choice.shape[0]).sum())
        self.budget_sum += float(magnitude.sum(dim=-1).mean(dim=0).sum())  # sum over tokens of the block-mean budget
        self.tokens += choice.shape[1]

    def summary(self):
        shares = (self.usage / self.usage.sum()).tolist()
        entropy = -sum(p * math.log(p) for p in shares if p > 0)
        return {"shares": dict(zip(self.roster, shares)), "perplexity": math.exp(entropy),
                "routing_spread": self.spread_sum / self.tokens, "amplitude_budget": self.budget_sum / self.tokens,
                "tokens": self.tokens}

    def reset(self):
        self.current, self.usage = [], torch.zeros(len(self.roster), dtype=torch.float64)
        self.spread_sum = self.budget_sum = 0.0
        self.tokens = 0

    def close(self):
        for handle in self.handles:
            handle.remove()


# ---- dispatch training -----------------------------------------------------------------------------------------------

def train_dispatch(model, arms, streams, dispatch, config):
    """Train only dispatch's routing keys with the frozen `arms` attached, through the shared loop (tools/training.py;
    one process, float32, constant learning rate, no checkpoint: a killed dispatch starts over); streams: {arm name:
    PairSet} (the control has none). Each step draws one arm's stream by its sampling weight; every
    config.alarm_every steps the starvation alarm reads the usage shares: perplexity < ALARM_PERPLEXITY or a share <
    ALARM_SHARE doubles the starved arm's weight, and ALARM_STRIKES alarms in a row stop the run. Returns the record:
    history, alarms, stop reason, final routing statistics."""
    accelerator = training.accelerator_for("fp32", cpu=config.device == "cpu")
    if accelerator.num_processes > 1:
        raise SystemExit("a dispatch trains on one process: its starvation alarm reads this process's routing")
    for arm in arms.values():
        arm.requires_grad_(False).eval()
    named = [name for name in dispatch.roster if name in streams]
    sources = {name: training.Batches(len(streams[name]), min(config.batch_size, len(streams[name])), config.seed + k)
               for k, name in enumerate(named)}
    drawn = dict.fromkeys(named, 0)  # batches each stream gave
    weights = {name: 1.0 for name in named}
    rng = np.random.default_rng(config.seed)
    history, alarms, strikes = [], [], 0
    alarm_on = len(dispatch.roster) > 1  # with one arm every token picks it: the alarm is meaningless

    def loss_at(step, share):
        nonlocal strikes
        total = sum(weights.values())
        stream = named[rng.choice(len(named), p=[weights[n] / total for n in named])]
        rows, drawn[stream] = sources[stream].at(drawn[stream]), drawn[stream] + 1
        loss = batch_loss(model, streams[stream], share.of(rows), config)
        monitor.end_step()
        terms = {"loss": loss}
        if (step + 1) % config.alarm_every == 0 or step + 1 == config.steps:
            routing = monitor.summary()
            monitor.reset()
            history.append({"step": step + 1, "loss": float(loss.detach()), "stream": stream, **routing,
                            "stream_weights": dict(weights)})
            terms.update({key: torch.tensor(routing[key]) for key in ("perplexity", "routing_spread",
                                                                      "amplitude_budget")})
            starved = min(routing["shares"], key=routing["shares"].get)
            if alarm_on and (routing["perplexity"] < ALARM_PERPLEXITY or routing["shares"][starved] < ALARM_SHARE):
                strikes += 1
                if starved in weights:
                    weights[starved] *= 2
                alarms.append({"step": step + 1, "starved": starved, "share": routing["shares"][starved],
                               "perplexity": routing["perplexity"], "strike": strikes})
                if strikes >= ALARM_STRIKES:
                    terms["stop"] = f"starvation: {ALARM_STRIKES} alarms in a row at step {step + 1}"
            else:
                strikes = 0
        return terms

    with attached(model, arms, dispatch):
        monitor = RoutingMonitor(dispatch)
        stage = training.run_stage("+".join(dispatch.roster), dispatch, config.steps, config.learning_rate, loss_at,
                                   config, accelerator, warmup_steps=0, decay="constant", resumable=False)
        monitor.close()
    return {"roster": dispatch.roster, "tau": dispatch.blocks[0].tau, "steps_run": stage["steps_run"],
            "stopped": stage["stopped"], "alarms": alarms, "history": history,
            "final_routing": history[-1] if history else None}
