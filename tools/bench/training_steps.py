"""Student training steps on length-grouped batches of the corpus sample (extraction's: a seeded sample of
tools/corpus.py's default corpus): the distillation's loss (tools/captionbert/data.distillation_terms) and the shared
loop's optimiser step (bf16 autocast forward where the CPU computes bf16, else float32; InfoNCE + MSE, backward, fused
Adam), captionbert vs BertModel of the same shape with the same pooling and head. Target >= 1.0x. Also the same
captionbert step with torch's default CPU Adam (tensor by tensor, what the trainers ran before tools/training.adam).
Reported. Every model trained here is this family's own copy, dropped when it returns.
"""

import copy
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from shared_modeling.pooling import l2_normalize, masked_mean_pool
from tools import training
from tools.bench.common import corpus_sample, race, row
from tools.captionbert import data as captionbert_data


class BertStudent(nn.Module):
    """BertModel + captionbert's pooling and head: the same student shape on transformers' stock encoder."""

    def __init__(self, bert, head):
        super().__init__()
        self.bert, self.head = bert, head

    def forward(self, input_ids, attention_mask):
        states = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return SimpleNamespace(pooler_output=l2_normalize(self.head(masked_mean_pool(states, attention_mask))))


def students(setup, seed):
    """{name: model in train mode}: copies of setup's captionbert (twice: fused and per-tensor Adam) and of its
    BertModel with a seeded captionbert head."""
    captionbert = copy.deepcopy(setup.captionbert).train()
    torch.manual_seed(seed)
    head_class = type(captionbert.head)  # captionbert's SentenceHead, from its remote-code module
    head = head_class(setup.shape["hidden_size"], captionbert.config.output_dim, captionbert.config.layer_norm_eps)
    return {"captionbert": captionbert, "bert": BertStudent(copy.deepcopy(setup.bert), head).train(),
            "captionbert per-tensor Adam": copy.deepcopy(captionbert)}


def measure(config, setup):
    """(rows, report part). The rows: student training steps on length-grouped batches of the corpus sample in
    setup.precision, captionbert vs BertModel with the same pooling and head, and captionbert with fused vs torch's
    per-tensor Adam; the part: the seconds under seconds/training."""
    size, precision = config.batch_size, setup.precision
    _, mix_ids = corpus_sample(config, setup.tokenizer)
    train_config = captionbert_data.Config(align=Path("-"), out=Path("-"), precision=precision)
    lengths_array = np.array([len(ids) for ids in mix_ids])
    train_batches = training.epoch_batches(len(lengths_array), size, config.seed, 0, lengths_array)[:config.train_steps]
    train_batches = [captionbert_data.collate(mix_ids, members, setup.tokenizer.pad_token_id)
                     for members in train_batches]
    models = students(setup, config.seed)
    targets = l2_normalize(torch.randn(size, models["captionbert"].config.output_dim,
                                       generator=torch.Generator().manual_seed(config.seed)))
    optimizers = {name: training.adam(model.parameters(), 1e-5) for name, model in models.items()}
    optimizers["captionbert per-tensor Adam"] = torch.optim.Adam(models["captionbert per-tensor Adam"].parameters(),
                                                                 lr=1e-5)  # torch's CPU default

    def steps(name):
        def run():
            for input_ids, attention_mask in train_batches:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    terms = captionbert_data.distillation_terms(models[name], input_ids, attention_mask, targets,
                                                                train_config)
                training.optimiser_step(optimizers[name], terms["loss"])
        return run

    train = race({name: steps(name) for name in models}, config.repeats, "training steps")
    tokens = sum(int(mask.sum()) for _, mask in train_batches)
    ours, theirs = statistics.median(train["captionbert"]), statistics.median(train["bert"])
    before = statistics.median(train["captionbert per-tensor Adam"])
    rows = [row(f"training step {precision}: captionbert vs BertModel", "tokens/s", tokens / ours,
                tokens / theirs, theirs / ours, (">=", 1.0)),
            row(f"training step {precision}: captionbert, fused Adam vs per-tensor Adam", "tokens/s",
                tokens / ours, tokens / before, before / ours)]
    return rows, {"seconds": {"training": train}}
