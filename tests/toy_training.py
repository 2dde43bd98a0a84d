"""A toy trainer over tools/training.run_stage, for tests/test_training.py: a two-layer model whose first layer is
frozen, fitted to fixed targets by MSE, plus in-batch InfoNCE over the gathered rows with contrastive=True. It runs
in the test's process, or on several under torchrun, the main process writing out/weights.pt:

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/toy_training.py OUT STEPS BATCH [STOP_AT]
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when torchrun runs this file
from tools import runs  # noqa: E402
from tools.training import Batches, accelerator_for, gathered, run_stage  # noqa: E402


@dataclass
class LoopConfig:
    out: Path
    weight_decay: float = 0.01
    warmup_fraction: float = 0.25
    log_every: int = 1
    validate_every: int = 3
    checkpoint_every: int = 2


class Interrupted(Exception):
    pass


def train(out, steps=6, stop_at=None, batch_size=5, noise=True, contrastive=False, micro_steps=1, precision="fp32",
          **options):
    """The toy trained for `steps` (options: run_stage's); stop_at raises at that step (after the checkpoint of the
    step before it), like a killed run. noise: a term drawn from the global RNG, whose state must resume too (one
    process only: each process draws its own). Returns (model, history)."""
    accelerator = accelerator_for(precision, micro_steps)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    model[0].requires_grad_(False)
    frozen = model[0].weight.clone()
    inputs, targets = torch.randn(40, 4), torch.randn(40, 3)
    batches = Batches(len(inputs), batch_size, seed=1)

    def loss_at(step, share):
        if step == stop_at:
            raise Interrupted
        rows = share.of(batches.at(step))
        outputs = model(inputs[rows]) + (torch.randn(len(rows), 3) * 0.01 if noise else 0)
        outputs, wanted = gathered(outputs), gathered(targets[rows])  # every process's rows
        terms = {"loss": (outputs - wanted).pow(2).mean()}
        if contrastive:
            logits = F.normalize(outputs, dim=-1) @ F.normalize(wanted, dim=-1).T / 0.1
            terms["loss"] = terms["loss"] + F.cross_entropy(logits, torch.arange(len(logits)))
        return terms

    def validate():
        return {"mse": (model(inputs) - targets).pow(2).mean().item()}

    history = run_stage("toy", model, steps, 0.05, loss_at, LoopConfig(out), accelerator, validate, **options)
    assert torch.equal(model[0].weight, frozen)
    return model, history


def main(argv=None):
    out, steps, batch_size, *stop_at = (argv if argv is not None else sys.argv[1:])
    model, _ = train(Path(out), int(steps), int(stop_at[0]) if stop_at else None, int(batch_size), noise=False,
                     contrastive=True)
    if runs.main_process():
        torch.save(model.state_dict(), Path(out) / "weights.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
