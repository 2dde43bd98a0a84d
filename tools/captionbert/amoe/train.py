"""Train AMOE arms on a frozen captionbert trunk: solo arms, dispatches, and greedy forward selection.

Usage (the embedded default, as `make demo` runs it; the trunk is captionbert-8192-v2/):
    python -m tools.captionbert.amoe.train solo --data paraphrase --seed 0 --out runs/demo/amoe/solo/paraphrase-seed0
    python -m tools.captionbert.amoe.train solo --data equiv --seed 1 --out runs/demo/amoe/solo/equiv-seed1
    python -m tools.captionbert.amoe.train solo --data my_pairs.tsv --name legal --out runs/x/legal-seed0  # any TSV
    python -m tools.captionbert.amoe.train solo --data runs/demo/extract --out runs/demo/amoe/solo/teacher-seed0
    python -m tools.captionbert.amoe.train dispatch --arm runs/demo/amoe/solo/equiv-seed0 --arm control --out runs/x/d
    python -m tools.captionbert.amoe.train select --solo runs/demo/amoe/solo --candidates paraphrase equiv sts \\
        --out runs/demo/amoe/select
A finished run (its metrics.json says "complete") is skipped when the same command runs again (another command on
its folder is refused; delete the folder to retrain); a killed solo run resumes from its last checkpoint. The maths
of arms and dispatch is the AMOE spec (shared_modeling/amoe.py).

solo      one arm and its one routing key (a one-arm dispatch, weight tanh(u)) on one pair dataset
          (tools/captionbert/amoe/pairs.py), trunk frozen in eval mode, pure Adam (lr 1e-3, wd 0), fp32 with TF32 off.
          Losses
          (shared_modeling/losses.py): in-batch InfoNCE, with the hard negative where the data has one (equiv; or
          with --triples-loss cosent, CoSENT ranking each anchor's positive above every hard negative), plus
          CoSENT over the MRPC labels so Quality-0 pairs rank below paraphrases (paraphrase); CoSENT on gold scores
          (sts); 1 - cosine of each text's embedding to its teacher embedding (an extraction folder, the "teacher"
          arm). Scores the arm on the validation suite and on STS-8. Writes
          amoe/arms/<name>.safetensors and amoe/solo/dispatch.safetensors (so attach_amoe(path=<out>/amoe) loads it).
dispatch  only the routing keys of a roster train (arms frozen): each step draws one arm's stream (its own training
          data) by sampling weight. `control` in the roster is an untrained arm (exactly inert; it only takes a
          share of the normaliser z). Every alarm_every steps the starvation alarm looks at the usage shares p of
          argmax_k |w_k| over the tokens of every block: exp(H(p)) < 1.5 or min p < 0.02 doubles the starved arm's
          stream weight; 3 alarms in a row stop the run. It logs the alarms, the routing spread (per token, the
          share of blocks that route it away from its most common arm) and the amplitude budget (mean sum |w/z|).
          Rows of arms with a solo run start from their solo routing keys.
select    greedy forward selection over solo arms (seed 0 is the arm; seed 1 measures the spread). At arm count A,
          every candidate joins the accepted roster under a trained dispatch and is compared with an untrained
          control arm in its place (same A, same training); the best margin over the control is accepted only if
          it beats the bar = the largest two-seed spread of the candidates' solo validation means. Never worse by
          default: the collective ships only if it also beats the bare trunk on validation by more than the bar.
          The run writes out/amoe/: every candidate arm (arms/), each one's solo routing (routing/<arm>), ARMS.json
          and, when one ships, <collective>/dispatch.safetensors; with none, attach_amoe() raises naming the solo
          arms and attach_amoe(["<arm>"]) attaches one alone. It scores trunk, every roster tried, collective and
          control on STS-8 and the Flickr8k gauge (a diagnostic: validation gain against STS-8 gain and their rank
          correlation), and sweeps the dispatch tau (.10/.05/.02) on STS-B.
Validation (tools/captionbert/amoe/pairs.py: STS-B dev, MRPC test, SNLI test, Flickr8k dev same-image retrieval; no
held-out text) makes every decision, never STS-8: one mean over the same two sets for every roster (STS-B dev and
Flickr8k dev, pairs.SELECTION_SETS), so an arm that trains on STS-B or Flickr8k (sts, caption) is not a candidate and
no arm is judged on its own source. No training row holds a held-out or validation text.
"""

import argparse
import contextlib
import dataclasses
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from shared_modeling.amoe import GATE_INIT, TAU, Arm, Dispatch, load_arm, load_dispatch, save_arm, save_dispatch
from shared_modeling.losses import cosent, info_nce_with_hard_negatives, symmetric_info_nce
from tools import registry, runs, sts, training
from tools.captionbert.amoe import pairs
from tools.captionbert.amoe.harness import load_trunk, sts8_score, validation_score

CAPTIONBERT = registry.CAPTIONBERT.path
CONTROL = "control"  # roster entry for the untrained control arm
ALARM_PERPLEXITY, ALARM_SHARE, ALARM_STRIKES = 1.5, 0.02, 3
TRIPLES_LOSSES = ("infonce", "cosent")  # SoloConfig.triples_loss


@dataclass
class Common:
    out: Path  # run folder
    model: Path = CAPTIONBERT  # the frozen trunk: a captionbert folder
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    steps: int = 120  # optimiser steps
    batch_size: int = 64  # rows (pairs or triples) per step
    learning_rate: float = 1e-3  # Adam, no weight decay
    temperature: float = 0.05  # InfoNCE temperature
    cosent_scale: float = 20.0  # CoSENT scale
    max_length: int = 64  # tokens per text in training
    seed: int = 0  # arm and routing-key initialisation and data order
    log_every: int = 10  # steps between history / TensorBoard points
    tasks: list[str] = field(default_factory=lambda: list(sts.TASKS))  # STS-8 tasks to score (default all)
    validation_rows: int = 0  # rows per validation set (0 = all; fewer for quick trials)
    device: str = "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class SoloConfig(Common):
    # Trained by the shared loop (tools/training.py): constant learning rate, float32 (the trunk's arithmetic, TF32
    # off), no weight decay; a killed run resumes from out/checkpoint-solo.pt.
    precision = "fp32"
    weight_decay = 0.0

    # Small batches, many steps: with Adam the arm's output grows about linearly in steps from its zero-initialised
    # projection and -3 gate, so steps, not rows per step, limit a CPU run. Measured on the demo trunk: 120 steps
    # of 64 moved the mean gate from .047 to .051 and STS-8 by -.012 (paraphrase) and +.004 (equiv).
    steps: int = 480
    batch_size: int = 16
    data: str = "paraphrase"  # pairs.TRAINING_SETS name, a .tsv file, an extraction folder (the teacher arm) or an
    #                           alignment folder (the consensus arm, or with --teacher one teacher's arm)
    teacher: str = ""  # alignment folder only: the teacher whose aligned embeddings the arm fits ("" = the consensus)
    name: str = ""  # the arm's name; default the data's name (the TSV's stem; "teacher" for an extraction folder,
    #                 "consensus" or the teacher's name for an alignment folder)
    sts8: bool = True  # score the trained arm on STS-8 too (ARMS.json lists solo scores per task)
    gate_init: float = GATE_INIT  # every site's gate logit at the start (the spec's -3: sigmoid .047)
    sites: int = 0  # train the arm at the trunk's last this-many blocks only (0: at every block, the spec's arm); the
    #                 other sites stay frozen at their zero output projection, so they add exact zeros (same file)
    relational_weight: float = 0.0  # teacher arm: + this x MSE between the batch's student and teacher cosine
    #                                 matrices (the pairwise similarities STS scores), beside 1 - cosine per text
    triples_loss: str = "infonce"  # data with a hard negative (equiv): "infonce" (in-batch, the negatives beside
    #                                the batch's other positives) or "cosent" (each anchor's positive cosine ranked
    #                                above every hard negative's: scores 1 and 0); a dispatch always uses infonce
    checkpoint_every: int = 40  # steps between atomic checkpoints


@dataclass
class DispatchConfig(Common):
    arms: list[str] = field(default_factory=list)  # solo run folders, or "control"; their order is the roster
    collective: str = "collective"  # the dispatch's folder name under amoe/
    steps: int = 60
    batch_size: int = 32
    learning_rate: float = 5e-3  # routing keys only
    tau: float = TAU  # dispatch temperature
    alarm_every: int = 10  # steps between starvation checks
    sts8: bool = False  # also score the roster on STS-8 and the Flickr8k gauge (the levers' collective row)


@dataclass
class SelectConfig(Common):
    solo: Path = Path("runs/demo/amoe/solo")  # folder of solo runs named <candidate>-seed0 / -seed1
    candidates: list[str] = field(default_factory=lambda: list(pairs.TRAINING_SETS))
    collective: str = "collective"  # name of the shipped dispatch folder
    steps: int = 60  # dispatch training steps at each comparison
    batch_size: int = 32
    learning_rate: float = 5e-3
    alarm_every: int = 10
    tau_sweep: list[float] = field(default_factory=lambda: [0.05, 0.02])  # retrain the shipped dispatch at these


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    for mode, cls in (("solo", SoloConfig), ("dispatch", DispatchConfig), ("select", SelectConfig)):
        sub = modes.add_parser(mode, help=cls.__doc__)
        for item in dataclasses.fields(cls):
            flag = "--" + item.name.replace("_", "-")
            if item.name == "arms":
                sub.add_argument("--arm", dest="arms", action="append", required=True,
                                 help="a solo run folder or 'control' (repeat; the order is the roster)")
            elif item.type is bool:
                sub.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
            elif item.name in ("candidates", "tau_sweep", "tasks"):
                sub.add_argument(flag, nargs="+", type=float if item.name == "tau_sweep" else str, default=None,
                                 choices=sts.TASKS if item.name == "tasks" else None)
            else:
                kind = Path if item.type is Path else item.type
                sub.add_argument(flag, type=kind, default=None, required=item.name == "out")
    args = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    mode = args.pop("mode")
    config = {"solo": SoloConfig, "dispatch": DispatchConfig, "select": SelectConfig}[mode](**args)
    for name in ("steps", "batch_size", "max_length", "log_every"):
        if getattr(config, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    if config.batch_size < 2:
        raise SystemExit("--batch-size must be at least 2 (in-batch negatives)")
    if mode == "solo" and config.triples_loss not in TRIPLES_LOSSES:
        raise SystemExit(f"--triples-loss must be one of {', '.join(TRIPLES_LOSSES)}, got {config.triples_loss!r}")
    return mode, config


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


@contextlib.contextmanager
def attached(model, arms, dispatch):
    """The trunk with `arms` ({name: Arm}) under `dispatch`, every arm enabled, through the model's own attach_amoe:
    the toggle law (every arm off == the bare trunk) is checked on entry and again on leaving, where they detach."""
    model.attach_amoe(arms=arms, dispatch=dispatch)
    try:
        yield model
    finally:
        model.detach_amoe()


# ---- batches and losses ----------------------------------------------------------------------------------------------

class Stream:
    """Endless seeded batches of one PairSet: each epoch a fresh permutation, cut into batch_size rows."""

    def __init__(self, data, batch_size, seed):
        self.data, self.batch_size = data, min(batch_size, len(data))
        self.rng = np.random.default_rng(seed)
        self.order, self.position, self.epoch = self.rng.permutation(len(data)), 0, 0

    def next_rows(self):
        if self.position + self.batch_size > len(self.order):
            self.order, self.position, self.epoch = self.rng.permutation(len(self.data)), 0, self.epoch + 1
        rows = self.order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return rows


def embed(model, texts, max_length):
    """(len(texts), E) L2-normalised embeddings in one padded forward pass, with gradients."""
    token_ids = [ids[:max_length - 1] + ids[-1:] if len(ids) > max_length else ids
                 for ids in model.tokenizer(texts, verbose=False)["input_ids"]]
    batch = model.tokenizer.pad({"input_ids": token_ids}, return_tensors="pt")
    return model(batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)).pooler_output


def batch_loss(model, data, rows, config, relational_weight=0.0, triples_loss="infonce"):
    """The arm objective on rows of a PairSet (see the module docstring), a scalar; relational_weight and
    triples_loss: SoloConfig's, for the teacher arm and the arms with a hard negative."""
    first = [data.first[i] for i in rows]
    if data.kind == "embedded":  # regression, not InfoNCE: a trunk distilled from the teachers already tells 16
        # texts' teacher embeddings apart (InfoNCE measured ~0.001 from the first steps on the demo trunk, no signal)
        targets = torch.from_numpy(data.target[rows]).to(model.device)
        embeddings = embed(model, first, config.max_length)
        loss = (1 - F.cosine_similarity(embeddings, targets, dim=-1)).mean()
        if relational_weight:
            loss = loss + relational_weight * F.mse_loss(embeddings @ embeddings.T, targets @ targets.T)
        return loss
    second = [data.second[i] for i in rows]
    negative = [data.negative[i] for i in rows] if data.kind == "triples" else []
    embeddings = embed(model, first + second + negative, config.max_length)
    a, b, n = embeddings[:len(rows)], embeddings[len(rows):2 * len(rows)], embeddings[2 * len(rows):]
    if data.kind == "pairs":
        return symmetric_info_nce(a, b, config.temperature)
    if data.kind == "triples":
        if triples_loss == "cosent":  # each anchor's positive (score 1) ranked above every hard negative (score 0)
            cosines = torch.cat([F.cosine_similarity(a, b, dim=-1), F.cosine_similarity(a, n, dim=-1)])
            return cosent(cosines, (torch.arange(len(cosines), device=a.device) < len(rows)).float(),
                          config.cosent_scale)
        return info_nce_with_hard_negatives(a, b, n, config.temperature)
    scores = torch.tensor([data.score[i] for i in rows], device=a.device)
    loss = cosent(F.cosine_similarity(a, b, dim=-1), scores, config.cosent_scale)
    if data.kind == "labelled":
        positive = scores > 0.5
        if positive.sum() >= 2:
            loss = loss + symmetric_info_nce(a[positive], b[positive], config.temperature)
    return loss


def optimise(optimizer, loss):
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


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


def finished(out):
    path = Path(out) / "metrics.json"
    return path.is_file() and runs.read_json(path).get("status") == "complete"


# ---- solo ------------------------------------------------------------------------------------------------------------

def train_solo(config):
    data = pairs.load(config.data, config.data_dir, config.teacher)
    name = config.name or data.name
    validation = pairs.validation_sets(config.data_dir, config.validation_rows)
    model, trunk_id = load_trunk(config)
    arm = fresh_arm(model, config.seed, config.gate_init)
    if not 0 <= config.sites <= len(arm.blocks):
        raise SystemExit(f"--sites must be in [0, {len(arm.blocks)}] (the trunk's blocks), got {config.sites}")
    frozen = len(arm.blocks) - config.sites if config.sites else 0
    for site in arm.blocks[:frozen]:
        site.requires_grad_(False)  # never optimised: its zero output projection adds exact zeros
    dispatch = fresh_dispatch(model, [name], config.seed)
    trained = torch.nn.ModuleDict({"arm": arm, "dispatch": dispatch})  # what the loop optimises and checkpoints
    batch_size = min(config.batch_size, len(data))
    writer = SummaryWriter(str(config.out / "tensorboard"))
    print(f"solo arm {name!r}: {len(data)} rows of {data.source}; {config.steps} steps x {batch_size}")
    with attached(model, {name: arm}, dispatch):
        monitor = RoutingMonitor(dispatch)

        def loss_at(step):
            loss = batch_loss(model, data, training.batch_at(step, len(data), batch_size, config.seed), config,
                              config.relational_weight, config.triples_loss)
            monitor.end_step()
            budget = monitor.summary()["amplitude_budget"]
            monitor.reset()
            return {"loss": loss, "amplitude_budget": torch.tensor(budget),
                    "gate": torch.stack([site.gate.detach() for site in arm.blocks]).sigmoid().mean()}

        history = training.run_stage("solo", trained, config.steps, config.learning_rate, loss_at, config, writer,
                                     warmup_steps=0, decay="constant")
        monitor.close()
        print("scoring the arm on the validation suite" + (" and STS-8" if config.sts8 else ""))
        scores = {"validation": validation_score(model, validation, {data.labelled_source})}
        if config.sts8:
            scores["sts8"] = sts8_score(model, config)
    writer.close()
    meta = {"data": data.summary(), "seed": config.seed, "training": solo_spec(config)}
    save_arm(config.out / "amoe" / "arms" / f"{name}.safetensors", arm, name, trunk_id, meta)
    save_dispatch(config.out / "amoe" / "solo" / "dispatch.safetensors", dispatch, trunk_id)
    return {"status": "complete", "name": name, "trunk_hash": trunk_id, "data": data.summary(),
            "training_minutes": round(history["training_seconds"] / 60, 2), "history": history["train"], **scores}


def solo_spec(config):
    return {key: getattr(config, key) for key in ("steps", "batch_size", "learning_rate", "temperature",
                                                  "cosent_scale", "max_length", "gate_init", "relational_weight",
                                                  "triples_loss", "sites")} | {
        "optimizer": "Adam (fused), weight decay 0", "precision": "fp32, TF32 off", "trunk": "frozen, eval mode"}


# ---- dispatch --------------------------------------------------------------------------------------------------------

def train_dispatch(model, arms, streams, dispatch, config, writer=None):
    """Train only dispatch's routing keys with the frozen `arms` attached; streams: {arm name: PairSet} (the
    control has none). Returns the record: history, alarms, stop reason, final routing statistics."""
    for arm in arms.values():
        arm.requires_grad_(False).eval()
    optimizer = training.adam(dispatch.parameters(), config.learning_rate)
    named = [name for name in dispatch.roster if name in streams]
    sources = {name: Stream(streams[name], config.batch_size, config.seed + k) for k, name in enumerate(named)}
    weights = {name: 1.0 for name in named}
    rng = np.random.default_rng(config.seed)
    history, alarms, strikes, stopped = [], [], 0, None
    alarm_on = len(dispatch.roster) > 1  # with one arm every token picks it: the alarm is meaningless
    with attached(model, arms, dispatch):
        monitor = RoutingMonitor(dispatch)
        for step in tqdm(range(1, config.steps + 1), desc=f"dispatch {'+'.join(dispatch.roster)}"):
            total = sum(weights.values())
            stream = named[rng.choice(len(named), p=[weights[n] / total for n in named])]
            loss = batch_loss(model, streams[stream], sources[stream].next_rows(), config)
            optimise(optimizer, loss)
            monitor.end_step()
            if step % config.alarm_every == 0 or step == config.steps:
                routing = monitor.summary()
                history.append({"step": step, "loss": float(loss.detach()), "stream": stream, **routing,
                                "stream_weights": dict(weights)})
                if writer is not None:
                    for key in ("perplexity", "routing_spread", "amplitude_budget"):
                        writer.add_scalar(f"{'+'.join(dispatch.roster)}/{key}", routing[key], step)
                monitor.reset()
                starved = min(routing["shares"], key=routing["shares"].get)
                if alarm_on and (routing["perplexity"] < ALARM_PERPLEXITY
                                 or routing["shares"][starved] < ALARM_SHARE):
                    strikes += 1
                    if starved in weights:
                        weights[starved] *= 2
                    alarms.append({"step": step, "starved": starved, "share": routing["shares"][starved],
                                   "perplexity": routing["perplexity"], "strike": strikes})
                    if strikes >= ALARM_STRIKES:
                        stopped = f"starvation: {ALARM_STRIKES} alarms in a row at step {step}"
                        break
                else:
                    strikes = 0
        monitor.close()
    return {"roster": dispatch.roster, "tau": dispatch.blocks[0].tau, "steps_run": step, "stopped": stopped,
            "alarms": alarms, "history": history, "final_routing": history[-1] if history else None}


def solo_arm(folder, model, trunk_id):
    """(name, arm, solo dispatch, solo metrics) of a finished solo run folder."""
    folder = Path(folder)
    if not finished(folder):
        raise SystemExit(f"{folder} is not a finished solo run (no complete metrics.json)")
    metrics = runs.read_json(folder / "metrics.json")
    name = metrics["name"]
    arm, _ = load_arm(folder / "amoe" / "arms" / f"{name}.safetensors", *shape(model), trunk_id, name=name)
    dispatch, _ = load_dispatch(folder / "amoe" / "solo" / "dispatch.safetensors", *shape(model), trunk_id)
    return name, arm, dispatch, metrics


def solo_data(solo_config, data_dir):
    """The PairSet a solo run trained on, from its config.json (runs from before --teacher fit no teacher)."""
    return pairs.load(solo_config["data"], data_dir, solo_config.get("teacher", ""))


def build_collective(model, members, roster, seed, tau):
    """A Dispatch over `roster`; rows of arms with a solo run start from their solo routing keys (same key
    projections: every dispatch here uses seed 0 for them), the others from a seeded orthogonal init."""
    dispatch = fresh_dispatch(model, roster, seed, tau)
    with torch.no_grad():
        for k, name in enumerate(roster):
            if name in members:
                for block, solo in zip(dispatch.blocks, members[name]["dispatch"].blocks):
                    block.routing_keys[k] = solo.routing_keys[0]
    return dispatch


def run_dispatch(config):
    model, trunk_id = load_trunk(config)
    members, arms, streams = {}, {}, {}
    roster = []
    for entry in config.arms:
        if entry == CONTROL:
            arms[CONTROL] = fresh_arm(model, config.seed)
            roster.append(CONTROL)
            continue
        name, arm, dispatch, metrics = solo_arm(entry, model, trunk_id)
        members[name] = {"dispatch": dispatch}
        arms[name], streams[name] = arm, solo_data(runs.read_json(Path(entry) / "config.json"), config.data_dir)
        roster.append(name)
    if not streams:
        raise SystemExit("a dispatch needs at least one trained arm (a solo run folder) to draw data from")
    dispatch = build_collective(model, members, roster, config.seed, config.tau)
    writer = SummaryWriter(str(config.out / "tensorboard"))
    started = time.perf_counter()
    record = train_dispatch(model, arms, streams, dispatch, config, writer)
    record["training_minutes"] = round((time.perf_counter() - started) / 60, 2)
    writer.close()
    with attached(model, arms, dispatch):
        validation = pairs.validation_sets(config.data_dir, config.validation_rows)
        record["validation"] = validation_score(model, validation,
                                                {stream.labelled_source for stream in streams.values()})
        if config.sts8:
            record["sts8"] = sts8_score(model, config)
    for name, arm in arms.items():
        save_arm(config.out / "amoe" / "arms" / f"{name}.safetensors", arm, name, trunk_id, {})
    save_dispatch(config.out / "amoe" / config.collective / "dispatch.safetensors", dispatch, trunk_id)
    return {"status": "complete", "trunk_hash": trunk_id, **record}


# ---- select ----------------------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """A candidate arm of the selection: its seed-0 solo run (the arm that ships) and the seed-1 run beside it."""
    arm: Arm
    dispatch: Dispatch  # its one-arm solo dispatch (the routing key collectives start from)
    data: pairs.PairSet  # its training stream
    config: dict  # the seed-0 solo run's config.json
    seeds: list  # the solo metrics.json of seeds 0 and 1

    @property
    def spread(self):
        """Its two-seed spread of the solo validation mean."""
        return abs(pairs.validation_mean(self.seeds[0]["validation"], set())
                   - pairs.validation_mean(self.seeds[1]["validation"], set()))


@dataclass
class Trial:
    """One roster under a freshly trained dispatch: its validation scores (per set, and "mean" over the selection
    sets, the same for every roster), its STS-8 (a diagnostic the decisions never read), the dispatch and its training
    record."""
    roster: list
    validation: dict
    sts8: dict
    dispatch: Dispatch
    record: dict


def greedy_selection(candidates, evaluate_roster, bar):
    """Greedy forward selection (ACCEPTED, STEPS). At arm count A every remaining candidate joins the accepted
    roster, and so does the untrained control in its place; evaluate_roster(roster) -> a Trial. A candidate's margin
    is its roster's validation mean (pairs.validation_mean, over the selection sets) minus the control's. The best
    margin is accepted only if it beats `bar`; the first step where none does ends the search (it is recorded too).
    No candidate may train on a selection set's source (select refuses it before anything trains)."""
    accepted, steps, remaining = [], [], list(candidates)
    while remaining:
        control = evaluate_roster(accepted + [CONTROL])
        trials = {name: evaluate_roster(accepted + [name]) for name in remaining}
        baseline = pairs.validation_mean(control.validation, set())
        margins = {name: pairs.validation_mean(trial.validation, set()) - baseline for name, trial in trials.items()}
        best = max(margins, key=margins.get)
        verdict = "accepted" if margins[best] > bar else "rejected"
        steps.append({"arm_count": len(accepted) + 1, "roster_before": list(accepted), "control": control,
                      "trials": trials, "margins": margins, "best": best, "margin": margins[best],
                      "verdict": verdict})
        print(f"A={len(accepted) + 1}: best {best} (margin over the control {margins[best]:+.4f}, bar {bar:.4f}): "
              f"{verdict}")
        if verdict == "rejected":
            break
        accepted.append(best)
        remaining.remove(best)
    return accepted, steps


def select(config):
    model, trunk_id = load_trunk(config)
    validation = pairs.validation_sets(config.data_dir, config.validation_rows)
    members = {}
    for name in config.candidates:
        seeds = [solo_arm(config.solo / f"{name}-seed{seed}", model, trunk_id) for seed in (0, 1)]
        if seeds[0][0] != name:
            raise SystemExit(f"{config.solo / f'{name}-seed0'} trained arm {seeds[0][0]!r}, not {name!r}")
        solo_config = runs.read_json(config.solo / f"{name}-seed0" / "config.json")
        if any("sts8" not in seed[3] for seed in seeds):
            raise SystemExit(f"{name}: every solo run of a candidate scores STS-8 (the validation-against-test "
                             "diagnostic); a run made with --no-sts8 cannot be selected")
        members[name] = Candidate(arm=seeds[0][1], dispatch=seeds[0][2], config=solo_config,
                                  data=solo_data(solo_config, config.data_dir),
                                  seeds=[seed[3] for seed in seeds])
    own = [f"{name} ({member.data.labelled_source})" for name, member in members.items()
           if pairs.judged_on_own_source(member.data.labelled_source)]
    if own:
        raise SystemExit(f"{', '.join(own)}: trains on the source of a selection set "
                         f"({', '.join(pairs.SELECTION_SETS)}), so it would be judged on its own source; leave it "
                         "out of --candidates (it still trains and scores as a solo arm)")
    bar = max(member.spread for member in members.values())
    print(f"bar (largest two-seed spread of the solo validation means): {bar:.4f}")
    print("scoring the bare trunk")
    trunk = {"validation": validation_score(model, validation, set()), "sts8": sts8_score(model, config)}
    control_arm = fresh_arm(model, config.seed + 1000)
    writer = SummaryWriter(str(config.out / "tensorboard"))

    def train_roster(roster, tau=TAU):
        """(arms, dispatch, training record) of `roster` under a freshly trained dispatch."""
        arms = {name: (control_arm if name == CONTROL else members[name].arm) for name in roster}
        streams = {name: members[name].data for name in roster if name != CONTROL}
        dispatch = build_collective(model, {name: {"dispatch": m.dispatch} for name, m in members.items()}, roster,
                                    config.seed, tau)
        if roster == [CONTROL]:  # an inert arm alone: nothing to route, the trunk itself
            record = {"roster": roster, "steps_run": 0, "alarms": [], "stopped": None, "final_routing": None}
        elif len(roster) == 1 and tau == TAU:  # a solo arm keeps its solo routing key (trained at TAU)
            record = {"roster": roster, "steps_run": 0, "alarms": [], "stopped": None,
                      "final_routing": {"amplitude_budget": members[roster[0]].seeds[0]["history"][-1][
                          "amplitude_budget"]}}
        else:
            record = train_dispatch(model, arms, streams, dispatch, config, writer)
        return arms, dispatch, record

    def evaluate_roster(roster):
        """The Trial of `roster`: trained, then scored on validation and (the diagnostic) STS-8."""
        arms, dispatch, record = train_roster(roster)
        if roster == [CONTROL]:
            return Trial(roster, trunk["validation"], trunk["sts8"], dispatch, record)
        with attached(model, arms, dispatch):
            scores = validation_score(model, validation, set())
            diagnostic = sts8_score(model, config)
        return Trial(roster, scores, diagnostic, dispatch, record)

    accepted, trials = greedy_selection(config.candidates, evaluate_roster, bar)
    steps = [{"arm_count": step["arm_count"], "roster_before": step["roster_before"], "bar": bar,
              "control": {"validation": step["control"].validation, "sts8": step["control"].sts8,
                          **_brief(step["control"].record)},
              "candidates": {name: {"validation": trial.validation, "sts8": trial.sts8,
                                    "margin_over_control": step["margins"][name], **_brief(trial.record)}
                             for name, trial in step["trials"].items()},
              "best": step["best"], "margin_over_control": step["margin"], "verdict": step["verdict"]}
             for step in trials]
    solo_rows = {f"solo {name}": member.seeds[0]["sts8"] for name, member in members.items()}
    record = {"status": "complete", "trunk_hash": trunk_id, "bar": bar, "steps": steps,
              "trunk_validation": trunk["validation"], "validation_against_sts8": validation_against_sts8(
                  members, trunk, steps), "tau_sweep": []}

    final = trials[len(accepted) - 1]["trials"][accepted[-1]] if accepted else None
    trunk_check = None if final is None else never_worse(trunk["validation"], final.validation, bar)
    record["trunk_check"] = trunk_check
    library = config.out / "amoe"
    for name, member in members.items():  # the solo arms ship whether or not a collective does
        save_arm(library / "arms" / f"{name}.safetensors", member.arm, name, trunk_id,
                 {"data": member.data.summary(), "seed": 0})
        save_dispatch(library / "routing" / f"{name}.safetensors", member.dispatch, trunk_id)
    if not (trunk_check and trunk_check["passed"]):  # a measured outcome, not a failure: the card says why
        writer.close()
        reason = ("no arm beat the untrained control by more than the bar" if final is None else
                  f"the collective {accepted} beats the bare trunk on validation by {trunk_check['gain']:+.4f}, "
                  f"not more than the bar {bar:.4f}")
        print(f"{reason}: no collective ships")
        write_arms_json(library, members, steps, None, trunk_id, config)
        return record | {"shipped": None, "reason": reason, "rows": {"trunk": trunk["sts8"], **solo_rows}}
    control = trials[len(accepted) - 1]["control"]
    save_dispatch(library / config.collective / "dispatch.safetensors", final.dispatch, trunk_id)

    print(f"scoring the shipped collective {accepted} and its control on STS-8")
    # Scored from the files just written (format, content and trunk hashes checked on load), through the library
    # rather than the trunk folder's attach_amoe: a trunk folder may carry older remote code.
    # tools/captionbert/export.py checks attach_amoe() on the Hub folder.
    dispatch, _ = load_dispatch(library / config.collective / "dispatch.safetensors", *shape(model), trunk_id)
    shipped_arms = {name: load_arm(library / "arms" / f"{name}.safetensors", *shape(model), trunk_id, name=name)[0]
                    for name in dispatch.roster}
    with attached(model, shipped_arms, dispatch):
        collective_sts8 = sts8_score(model, config)

    sweep = []
    for tau in [TAU, *config.tau_sweep]:
        print(f"tau sweep: {tau}")
        _, dispatch, tau_record = (None, final.dispatch, final.record) if tau == TAU else train_roster(accepted, tau)
        with attached(model, {name: members[name].arm for name in accepted}, dispatch):
            stsb = sts.score(model, {"STS-B": sts.load_task(config.data_dir, "STS-B")}, [])["STS-B"]
        sweep.append({"tau": tau, "STS-B": stsb, "amplitude_budget": _budget(tau_record)})
    writer.close()

    shipped = {"collective": config.collective, "roster": accepted, **_brief(final.record)}
    arms_json = write_arms_json(library, members, steps, shipped, trunk_id, config)
    return record | {
        "shipped": shipped, "tau_sweep": sweep, "arms_json": str(arms_json),
        "rows": {"trunk": trunk["sts8"], **solo_rows, "collective": collective_sts8,
                 f"control ({'+'.join(control.roster)})": control.sts8}}


def never_worse(trunk_validation, collective_validation, bar):
    """Never worse by default: a collective ships only if its validation mean beats the bare trunk's by more than the
    bar (the control comparisons alone do not promise that)."""
    collective, trunk = (pairs.validation_mean(scores, set()) for scores in (collective_validation, trunk_validation))
    return {"collective": collective, "trunk": trunk, "gain": collective - trunk, "bar": bar,
            "passed": collective - trunk > bar}


def validation_against_sts8(members, trunk, steps):
    """Does validation predict the test? Per solo run (candidate and seed) and per roster the selection tried: its
    validation gain over the trunk (the selection mean) against its STS-8 gain, and the Spearman rank correlation of
    the two across the solo runs. A diagnostic: the decisions never read STS-8."""
    def gain(validation, sts8):
        return {"validation_gain": pairs.validation_mean(validation, set())
                - pairs.validation_mean(trunk["validation"], set()), "sts8_gain": sts8["mean"] - trunk["sts8"]["mean"]}

    solo = [{"candidate": name, "seed": seed, **gain(run["validation"], run["sts8"])}
            for name, member in members.items() for seed, run in enumerate(member.seeds)]
    rosters = [{"roster": step["roster_before"] + [name], **gain(trial["validation"], trial["sts8"])}
               for step in steps for name, trial in step["candidates"].items()]
    correlation = None
    if len(solo) > 2:
        correlation = float(spearmanr([row["validation_gain"] for row in solo],
                                      [row["sts8_gain"] for row in solo]).statistic)
    return {"solo": solo, "rosters": rosters, "spearman_solo": correlation}


def _budget(record):
    routing = record.get("final_routing")
    return routing["amplitude_budget"] if routing else None


def _brief(record):
    """The parts of a dispatch training record that ARMS.json and the card show."""
    routing = record.get("final_routing") or {}
    return {"steps_run": record["steps_run"], "alarms": len(record["alarms"]), "stopped": record["stopped"],
            "amplitude_budget": routing.get("amplitude_budget"), "routing_spread": routing.get("routing_spread"),
            "shares": routing.get("shares")}


def write_arms_json(library, members, steps, shipped, trunk_id, config):
    """amoe/arms/ARMS.json: one entry per arm (provenance, training spec, solo scores, verdict, file and hash);
    shipped is None when no collective ships."""
    commit, dirty = runs.git_revision()
    verdicts = {}
    for step in steps:
        for name, trial in step["candidates"].items():
            verdicts.setdefault(name, []).append(
                {"arm_count": step["arm_count"], "validation_mean": trial["validation"]["mean"],
                 "margin_over_control": trial["margin_over_control"], "bar": step["bar"],
                 "verdict": step["verdict"] if name == step["best"] else "not best"})
    roster = shipped["roster"] if shipped else []
    entries = {}
    for name, member in members.items():
        path = library / "arms" / f"{name}.safetensors"
        arm_metadata = load_arm(path, member.arm.blocks[0].slots.in_features, len(member.arm.blocks),
                                trunk_id, name=name)[1]
        entries[name] = {
            "file": f"arms/{name}.safetensors", "routing": f"routing/{name}.safetensors",
            "content_hash": arm_metadata["content_hash"], "trunk_hash": trunk_id, "data": member.data.summary(),
            "seeds": {"arm": 0, "spread": 1}, "git_commit": commit, "git_dirty": dirty,
            "solo_runs": [str(config.solo / f"{name}-seed{seed}") for seed in (0, 1)],
            "training": solo_spec(SoloConfig(**{k: v for k, v in member.config.items()
                                                if k in {f.name for f in dataclasses.fields(SoloConfig)}})),
            "solo_sts8": member.seeds[0]["sts8"], "solo_validation": member.seeds[0]["validation"],
            "seed_spread_validation": member.spread, "selection": verdicts.get(name, []),
            "in_collective": name in roster}
    payload = {"trunk_hash": trunk_id, "collective": shipped["collective"] if shipped else None,
               "roster": roster or None,
               "selection_metric": ("margin over the untrained control of the validation mean over "
                                    f"{' and '.join(pairs.SELECTION_SETS)} (tools/captionbert/amoe/pairs.py), "
                                    "whose sources no candidate trains on; never STS-8"),
               "arms": entries}
    runs.write_json(library / "arms" / "ARMS.json", payload)
    return library / "arms" / "ARMS.json"


# ---- the run ---------------------------------------------------------------------------------------------------------

def main(argv=None):
    mode, config = parse_config(argv)
    state = runs.run_state(config.out, config)
    if state == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    if state == "partial" and mode != "solo":
        shutil.rmtree(config.out)  # a dispatch or selection killed half-way starts over; a solo run resumes
    with runs.RunRecord(config.out, config, f"captionbert.amoe.train {mode}"):
        metrics = {"solo": train_solo, "dispatch": run_dispatch, "select": select}[mode](config)
        runs.write_json(config.out / "metrics.json", metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k not in ("history", "steps")}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
