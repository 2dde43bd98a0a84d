"""Train one AMOE arm on a frozen captionbert trunk, on one pair dataset: a solo run.

Usage (the embedded default, as `make demo` runs it; the trunk is captionbert-8192-v2/):
    python -m tools.captionbert.amoe.solo --data paraphrase --seed 0 --out runs/demo/amoe/solo/paraphrase-seed0
    python -m tools.captionbert.amoe.solo --data equiv --seed 1 --out runs/demo/amoe/solo/equiv-seed1
    python -m tools.captionbert.amoe.solo --data my_pairs.tsv --name legal --out runs/x/legal-seed0  # any TSV
    python -m tools.captionbert.amoe.solo --data runs/demo/extract --out runs/demo/amoe/solo/teacher-seed0
A finished run (its metrics.json says "complete") is skipped when the same command runs again (another command on
its folder is refused; delete the folder to retrain); a killed run resumes from its last checkpoint.

One arm and its one routing key (a one-arm dispatch, weight tanh(u)) train on one pair dataset
(tools/captionbert/amoe/pairs.py), trunk frozen in eval mode, pure Adam (lr 1e-3, wd 0), fp32 with TF32 off, on the
arm objective of tools/captionbert/amoe/arms.py. The trained arm is scored on the validation suite (STS-B dev, MRPC
test, SNLI test, Flickr8k dev same-image retrieval; no held-out text) and on STS-8. Writes
amoe/arms/<name>.safetensors and amoe/solo/dispatch.safetensors (so attach_amoe(path=<out>/amoe) loads it);
tools/captionbert/amoe/dispatch.py routes between solo arms and tools/captionbert/amoe/select.py selects among them.
"""

import dataclasses
import sys
from dataclasses import dataclass, field

import torch

from shared_modeling.amoe import GATE_INIT, save_arm, save_dispatch
from tools import training
from tools.captionbert.amoe import arms, pairs
from tools.captionbert.amoe.harness import load_trunk, sts8_score, validation_score


@dataclass
class SoloConfig(arms.Common):
    # Trained by the shared loop (tools/training.py): constant learning rate, float32 (the trunk's arithmetic, TF32
    # off), no weight decay (arms.Common); a killed run resumes from out/checkpoint-solo.pt.

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
    triples_loss: str = field(default=arms.TRIPLES_LOSSES[0], metadata={
        "choices": arms.TRIPLES_LOSSES,
        "help": "data with a hard negative (equiv): infonce (in-batch, the negatives beside the batch's other "
                "positives) or cosent (each anchor's positive cosine ranked above every hard negative's: scores 1 and "
                "0); a dispatch always uses infonce"})
    checkpoint_every: int = 40  # steps between atomic checkpoints


def train_solo(config):
    data = pairs.load(config.data, config.data_dir, config.teacher)
    name = config.name or data.name
    validation = pairs.validation_sets(config.data_dir, config.validation_rows)
    accelerator = training.accelerator_for(config.precision, cpu=config.device == "cpu")
    model, trunk_id = load_trunk(config)
    model.to(accelerator.device)
    arm = arms.fresh_arm(model, config.seed, config.gate_init)
    if not 0 <= config.sites <= len(arm.blocks):
        raise SystemExit(f"--sites must be in [0, {len(arm.blocks)}] (the trunk's blocks), got {config.sites}")
    frozen = len(arm.blocks) - config.sites if config.sites else 0
    for site in arm.blocks[:frozen]:
        site.requires_grad_(False)  # never optimised: its zero output projection adds exact zeros
    dispatch = arms.fresh_dispatch(model, [name], config.seed)
    trained = torch.nn.ModuleDict({"arm": arm, "dispatch": dispatch})  # what the loop optimises and checkpoints
    batch_size = min(config.batch_size, len(data))
    print(f"solo arm {name!r}: {len(data)} rows of {data.source}; {config.steps} steps x {batch_size}")
    with arms.attached(model, {name: arm}, dispatch):
        monitor = arms.RoutingMonitor(dispatch)

        batches = training.Batches(len(data), batch_size, config.seed)

        def loss_at(step, share):
            rows = share.of(batches.at(step))
            loss = arms.batch_loss(model, data, rows, config, config.relational_weight, config.triples_loss)
            monitor.end_step()
            budget = monitor.summary()["amplitude_budget"]
            monitor.reset()
            return {"loss": loss, "amplitude_budget": torch.tensor(budget),
                    "gate": torch.stack([site.gate.detach() for site in arm.blocks]).sigmoid().mean()}

        history = training.run_stage("solo", trained, config.steps, config.learning_rate, loss_at, config,
                                     accelerator, warmup_steps=0, decay="constant")
        monitor.close()
        if not accelerator.is_main_process:
            return None  # the main process scores, saves and records
        print("scoring the arm on the validation suite" + (" and STS-8" if config.sts8 else ""))
        scores = {"validation": validation_score(model, validation, {data.labelled_source})}
        if config.sts8:
            scores["sts8"] = sts8_score(model, config)
    meta = {"data": data.summary(), "seed": config.seed, "training": arms.training_spec(dataclasses.asdict(config))}
    save_arm(config.out / "amoe" / "arms" / f"{name}.safetensors", arm, name, trunk_id, meta)
    save_dispatch(config.out / "amoe" / "solo" / "dispatch.safetensors", dispatch, trunk_id)
    return {"status": "complete", "name": name, "trunk_hash": trunk_id, "data": data.summary(),
            "training_minutes": round(history["training_seconds"] / 60, 2), "history": history["train"], **scores}


def main(argv=None):
    config = arms.parse_config(SoloConfig, argv, __doc__)
    return arms.run_once(config, "captionbert.amoe.solo", train_solo, resume=True)


if __name__ == "__main__":
    sys.exit(main())
