"""Throughput of captionbert vs a transformers.BertModel of identical shape, and its GFLOP/s vs the matmul peak.

Both in fp32 and bf16 autocast (bf16 only where the CPU computes it, as training.bf16_native says: elsewhere it is
emulated, several times slower than fp32, and every bf16 row is left out; the report's "dtypes" and "bf16_left_out"
say so); repeats alternate between the two contenders, the median is reported.
  (a) forward only: the same padded batches in the same order for both; BertModel keeps its default sdpa attention
      and its token states are mean-pooled, so both do the same work. Target: captionbert >= 1.3x.
  (b) end to end: captionbert.encode(texts) (sorts by length) vs the naive HF pipeline (tokenize each batch in the
      given order, pad to its longest, BertModel forward, masked mean pool, L2-normalise). Target >= 1.3x.
  GFLOP/s: captionbert's achieved GFLOP/s in (b) over this machine's matmul peak in the same dtype (a large square
  matmul, best of a few). Model FLOPs per batch = real tokens x (2 x trunk linear weights + 4 x T x D x layers),
  T the batch's padded length: padding is counted as overhead, not work. Target >= 50%.
"""

import copy
import statistics

import torch

from shared_modeling.pooling import masked_mean_pool
from tools.bench.common import in_dtype, naive_pipeline, race, row, timed

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_peak_gflops(size, dtype, tries=3):
    """Best GFLOP/s of a (size x size) @ (size x size) matmul in `dtype`."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / min(timed(lambda: a @ b) for _ in range(tries + 1)) / 1e9


def measure(config, setup):
    """(rows, report part), in each dtype. The rows: forward vs BertModel, encode vs the naive HF pipeline, encode's
    GFLOP/s vs the matmul peak; the part: their seconds under seconds/<dtype>/forward and encode."""
    texts, tokenizer, size = setup.texts, setup.tokenizer, config.batch_size
    captionbert, bert = copy.deepcopy(setup.captionbert), copy.deepcopy(setup.bert)

    def captionbert_forward():
        for batch in setup.batches:
            captionbert(**batch)

    def bert_forward():
        for batch in setup.batches:
            masked_mean_pool(bert(**batch).last_hidden_state, batch["attention_mask"])

    def captionbert_encode():
        captionbert.encode(texts, batch_size=size, show_progress_bar=False)

    rows, seconds = [], {}
    for dtype in setup.dtypes:
        forward = race({"captionbert": in_dtype(captionbert_forward, dtype), "bert": in_dtype(bert_forward, dtype)},
                       config.repeats, f"forward {dtype}")
        encode = race({"captionbert": in_dtype(captionbert_encode, dtype),
                       "naive": in_dtype(lambda: naive_pipeline(tokenizer, bert, texts, size), dtype)},
                      config.repeats, f"encode {dtype}")
        seconds[dtype] = {"forward": forward, "encode": encode}
        ours, theirs = statistics.median(forward["captionbert"]), statistics.median(forward["bert"])
        rows.append(row(f"forward {dtype}: captionbert vs BertModel", "captions/s", len(texts) / ours,
                        len(texts) / theirs, theirs / ours, (">=", 1.3)))
        ours, theirs = statistics.median(encode["captionbert"]), statistics.median(encode["naive"])
        rows.append(row(f"encode {dtype}: captionbert vs HF pipeline", "captions/s", len(texts) / ours,
                        len(texts) / theirs, theirs / ours, (">=", 1.3)))
        achieved, peak = setup.flops / ours / 1e9, matmul_peak_gflops(config.peak_size, DTYPES[dtype])
        rows.append(row(f"encode {dtype}: captionbert GFLOP/s vs matmul peak", "GFLOP/s", achieved, peak,
                        achieved / peak, (">=", 0.5)))
    return rows, {"seconds": seconds}
