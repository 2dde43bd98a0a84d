"""Benchmark captionbert-8192-v2 on this machine's CPU against a transformers.BertModel of identical shape.

Both models get random weights (speed does not depend on them) and the same inputs: a seeded sample of Flickr8k
captions, tokenized by captionbert's tokenizer. One run measures:

  1. Throughput, fp32 and bf16 autocast (bf16 only where the CPU computes it, as training.bf16_native says: elsewhere
     it is emulated, several times slower than fp32, and every bf16 row is left out; the report's "dtypes" and
     "bf16_left_out" say so); repeats alternate between the two contenders, the median is reported.
     (a) forward only: the same padded batches in the same order for both; BertModel keeps its default sdpa
         attention and its token states are mean-pooled, so both do the same work. Target: captionbert >= 1.3x.
     (b) end to end: captionbert.encode(texts) (sorts by length) vs the naive HF pipeline (tokenize each batch in
         the given order, pad to its longest, BertModel forward, masked mean pool, L2-normalise). Target >= 1.3x.
  2. captionbert's achieved GFLOP/s in (b) over this machine's matmul peak in the same dtype (a large square
     matmul, best of a few). Model FLOPs per batch = real tokens x (2 x trunk linear weights + 4 x T x D x layers),
     T the batch's padded length: padding is counted as overhead, not work. Target >= 50%.
  3. One long input (8,192 tokens, fp32): the forward's peak extra memory (peak RSS minus the RSS after the model is
     built) and its time, SDPA vs eager attention, each in a fresh subprocess. Target: SDPA <= 0.25x eager memory.
  4. Teacher extraction on the real caption mix (a seeded sample of tools/corpus.py's default corpus, long
     ImageInWords descriptions included), fp32: tools/encoders.py's length-bucketed path (what
     tools/captionbert/extract.py runs) vs naive padded batches in corpus order, both on the BertModel above saved as
     a plain HF teacher folder. Target >= 1.5x.
  5. Student training steps (the distillation's loss, tools/captionbert/data.distillation_terms, and the shared
     loop's optimiser step: bf16 autocast forward where the CPU computes bf16, else float32; InfoNCE + MSE,
     backward, fused Adam) on bucketed batches of that sample: captionbert vs BertModel
     of the same shape with the same pooling and head. Target >= 1.0x. (5b) the same captionbert step with torch's
     default CPU Adam (tensor by tensor, what the trainers ran before tools/training.adam). Reported.
  6. AMOE arms: captionbert.encode with a collective attached through attach_amoe (random arms with non-zero
     outputs, written as arm files; speed does not depend on the weights) vs the bare trunk, fp32 and bf16, at two
     sizes: the shipped collective's (its roster in captionbert-8192-v2/amoe/arms/ARMS.json; target <= 1.15x the
     bare latency; none when the folder ships no collective) and `--arms` (3, the published collective's size;
     reported). With every arm off (amoe_off) the
     embeddings must equal the bare trunk's bit for bit (target: equal), and its latency is reported beside. Also
     reported: the arithmetic floor of the first size, (model FLOPs of (2) + the arms' FLOPs counted from the
     spec) / model FLOPs, the latency ratio a kernel running the arms at the trunk's FLOP rate would reach.
  7. glyph-embedder-v2: embeddings per second of its GGUF in llama.cpp (llama-cpp-python; f32 and f16) vs PyTorch
     fp32 (RobertaModel + masked mean pool, batches of --batch-size) on the same generated glyph strings, a random
     model of the published shape with a BPE tokenizer trained on those strings. Reported, no target.
  8. geolip-clip-ctx576 at the cpu preset's shape (all-MiniLM-L6-v2 base, random memory weights), fp32, on a
     seeded sample of --geolip-texts long ImageInWords descriptions: (a) every segment of the sample through the
     frozen base in ONE batched call (GeolipModel.segments) vs one base call per segment. Target >= 3x.
     (b) encode latency of the sample cut to 18 .. 452 tokens (1 .. 32 segments), against one segment. Reported.

  9. Inference backends, on the same length-sorted padded batches of the caption sample: captionbert's forward
     through PyTorch eager fp32 (and bf16 where measured), ONNX fp32 and ONNX int8 (tools/onnx_graphs.py: graphs
     exported from the benchmark's own models, dynamic int8 weights; onnxruntime on every core), and with the arms
     compiled (attach_amoe(compiled=True): torch.compile, Inductor's C++ backend), each with a random collective of
     the shipped size on and off. Targets: ONNX fp32 >= 1.3x and int8 >= 2x PyTorch eager fp32 throughput; compiled
     arms <= 1.15x the bare trunk's latency. Also reported: the int8 graph's lowest cosine to PyTorch fp32.

The table and report.json (with the raw timings) go to runs/bench/<timestamp>/ beside config.json and run.json.
main builds what the measurements share once (build_setup), then runs one function per measurement family in the
order above, each returning its table rows and its part of the report, and writes the report.

Usage:
    python -m tools.bench                                                   # the full run, a few minutes
    python -m tools.bench --only 6 9                                        # those measurements alone
    python -m tools.bench --captions 16 --repeats 1 --long-tokens 256 --corpus-texts 32 --train-steps 1 --tiny \\
        --glyph-texts 32 --geolip-texts 4                                   # seconds: small shape, smoke test
"""

import argparse
import contextlib
import copy
import gc
import json
import operator
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer, BertConfig, BertModel

from shared_modeling.amoe import (ATOMS, GROUP_WIDTH, HEAD_WIDTH, KEY_WIDTH, SLOTS, Arm, Dispatch, save_arm,
                                  save_dispatch)
from shared_modeling.identity import trunk_hash
from shared_modeling.pooling import l2_normalize, masked_mean_pool
from shared_modeling.segments import segment_spans
from tools import corpus, encoders, onnx_graphs, registry, runs, training
from tools.captionbert import data as captionbert_data
from tools.glyph import data as glyph_data
from tools.glyph import gguf
from tools.geolip import data as geolip_data

CAPTIONBERT = registry.CAPTIONBERT.path
CAPTIONS = Path("captions") / "flickr8k" / "Flickr8k.token.txt"
# Both models share vocabulary (30,522) and positions (8,192); only the trunk changes between the two shapes.
SHAPES = {
    False: dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048),
    True: dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),  # AMOE needs 64
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Config:
    data_dir: Path = runs.default_data_dir()  # holds captions/flickr8k/Flickr8k.token.txt
    out: Path = runs.ROOT / "runs"  # the report goes to <out>/bench/<timestamp>/
    captions: int = 256  # captions sampled (seeded) from Flickr8k for the throughput comparisons
    batch_size: int = 64  # rows per batch, both models, both comparisons
    repeats: int = 5  # timed repeats per comparison after one warm-up; the median is reported
    long_tokens: int = 8192  # length of the single long input of measurement 3
    peak_size: int = 2048  # side of the square matmul that measures the machine's peak
    tiny: bool = False  # hidden 64, 2 layers, 2 heads, FFN 128 for both models: a smoke test in seconds
    corpus_texts: int = 1024  # texts sampled (seeded) from the default corpus for measurements 4 and 5
    train_steps: int = 4  # training steps per timed repeat in measurement 5
    arms: int = 3  # arms of the second collective of measurement 6 (the first has the shipped roster's size)
    glyph_texts: int = 1024  # generated glyph strings embedded in measurement 7
    geolip_texts: int = 16  # long descriptions of measurement 8
    seed: int = 0  # caption sample, weights and the long input
    only: tuple = ()  # the measurements to run, by number (1 .. 9; 1 and 2 run together, as do 4 and 5's sample); all


@dataclass
class Setup:
    """What the measurements share, built once by build_setup."""
    texts: list  # the seeded caption sample, in its given order
    tokenizer: object  # captionbert's
    batches: list  # the sample padded batch by batch in its given order: the naive pipelines' batches
    lengths: list  # real tokens of each caption
    sorted_lengths: list  # real tokens of each caption, batch by batch as encode() runs them (longest first)
    shape: dict  # SHAPES[config.tiny], both models'
    captionbert: nn.Module  # random weights, sdpa attention, captionbert's tokenizer attached
    bert: nn.Module  # BertModel of the same shape, random weights, no pooler, its default sdpa attention
    linear_weights: int  # weights of captionbert's trunk linear layers
    flops: float  # model FLOPs of captionbert.encode on the sample (see model_flops)
    precision: str  # training.resolve_precision("auto", "cpu"): what (5) trains in
    dtypes: list  # "fp32", and "bf16" where the CPU computes it: what (1), (2) and (6) run in


class BertStudent(nn.Module):
    """BertModel + captionbert's pooling and head: the same student shape on transformers' stock encoder."""

    def __init__(self, bert, head):
        super().__init__()
        self.bert, self.head = bert, head

    def forward(self, input_ids, attention_mask):
        states = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return SimpleNamespace(pooler_output=l2_normalize(self.head(masked_mean_pool(states, attention_mask))))


def build_captionbert(shape, seed, attn_implementation="sdpa"):
    """captionbert with random weights, built by its Hub folder's remote code."""
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(CAPTIONBERT, trust_remote_code=True, **shape)
    return AutoModel.from_config(config, trust_remote_code=True, attn_implementation=attn_implementation).eval()


def timed(fn):
    """Seconds that fn() took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def in_dtype(fn, dtype):
    """fn run under inference mode, in bf16 autocast when dtype is "bf16"."""
    def run():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            fn()
    return run


def race(contenders, repeats, desc):
    """{name: [seconds]} of each callable: one warm-up each, then `repeats` rounds alternating who goes first."""
    names = list(contenders)
    for fn in contenders.values():
        fn()
    seconds = {name: [] for name in names}
    for round_ in tqdm(range(repeats), desc=desc):
        for name in names if round_ % 2 == 0 else names[::-1]:
            seconds[name].append(timed(contenders[name]))
    return seconds


def model_flops(batch_lengths, linear_weights, hidden, layers):
    """Sum over batches (lists of real token counts) of real tokens x (2 x linear weights + 4 x T x D x layers),
    T = the batch's padded length, its longest row."""
    return sum(sum(lengths) * (2 * linear_weights + 4 * max(lengths) * hidden * layers) for lengths in batch_lengths)


def matmul_peak_gflops(size, dtype, tries=3):
    """Best GFLOP/s of a (size x size) @ (size x size) matmul in `dtype`."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / min(timed(lambda: a @ b) for _ in range(tries + 1)) / 1e9


def memory_mib(field):
    """VmRSS (resident now) or VmHWM (peak resident) of this process, in MiB. Not ru_maxrss: on Linux that starts
    from the RSS of the parent at fork, so a subprocess of a big parent would report the parent's size."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # the kernel writes kB


def long_input_child(attn_implementation, tokens, tiny, seed):
    """Runs alone in a fresh interpreter: one forward of a `tokens`-long input; prints its time and extra peak RSS.
    The forward is the first, so both implementations also carry the same one-time setup (~17 MiB, a few ms)."""
    torch.set_num_threads(os.cpu_count())
    model = build_captionbert(SHAPES[tiny], seed, attn_implementation)
    input_ids = torch.randint(1000, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(seed))
    gc.collect()
    baseline = memory_mib("VmRSS")
    with torch.inference_mode():
        seconds = timed(lambda: model(input_ids))
    print(json.dumps({"seconds": seconds, "peak_extra_mib": memory_mib("VmHWM") - baseline}))


def long_input(config, attn_implementation):
    """{"seconds", "peak_extra_mib"} of long_input_child run in a fresh subprocess."""
    code = (f"from tools.bench import long_input_child; "
            f"long_input_child({attn_implementation!r}, {config.long_tokens}, {config.tiny}, {config.seed})")
    result = subprocess.run([sys.executable, "-c", code], cwd=runs.ROOT, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"long-input subprocess ({attn_implementation}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def arm_flops_per_token(hidden, arms):
    """Multiply-adds x 2 that `arms` enabled arms and their dispatch add per token at one block, counted from the
    spec's maths (amoe.md), not from any implementation: the dispatch's key projection and routing (A keys, each
    with a sinh and a cosh), and per arm the slot projection, the address of each slot group over 2K exponentials
    and back, W_in and W_out."""
    dispatch = KEY_WIDTH * hidden + 2 * arms * (KEY_WIDTH + 1) + 2 * arms * (arms + 1)
    address = SLOTS // GROUP_WIDTH * 2 * (2 * ATOMS * (GROUP_WIDTH + 1))
    arm = SLOTS * hidden + address + SLOTS * HEAD_WIDTH + HEAD_WIDTH * hidden
    return 2 * (dispatch + arms * arm)


def shipped_arm_count():
    """Arms in captionbert-8192-v2's shipped collective (the roster in its ARMS.json, null when select shipped
    none); 0 when it ships none."""
    arms_json = CAPTIONBERT / "amoe" / "arms" / "ARMS.json"
    return len(json.loads(arms_json.read_text())["roster"] or []) if arms_json.is_file() else 0


def write_random_collective(folder, model, arms, seed):
    """amoe/-style folder of `arms` random arms (output projections drawn, so they act) and one dispatch, stamped
    with `model`'s trunk identity so attach_amoe(path=folder) accepts them."""
    torch.manual_seed(seed)
    hidden, blocks, identity = model.config.hidden_size, model.config.num_hidden_layers, trunk_hash(model)
    roster = [f"arm{k}" for k in range(arms)]
    for name in roster:
        arm = Arm(hidden, blocks)
        with torch.no_grad():
            for site in arm.blocks:
                site.head_out.weight.normal_(std=0.02)
        save_arm(folder / "arms" / f"{name}.safetensors", arm, name, identity, {"bench": True})
    save_dispatch(folder / "collective" / "dispatch.safetensors", Dispatch(roster, hidden, blocks, seed), identity)


def build_glyph(folder, config):
    """(texts, model): seeded glyph strings and a random RobertaModel of glyph-embedder-v2's shape (small with
    --tiny) saved in `folder` with a BPE tokenizer trained on those strings."""
    from transformers import RobertaModel

    from tools.glyph.generate import ClaimGenerator, Lexicon
    from tools.glyph.grammar import to_text
    from tools.glyph.tokenizer import train_tokenizer

    generator = ClaimGenerator(Lexicon.load(), config.seed)
    texts = [to_text(generator.claim()) for _ in range(config.glyph_texts)]
    tokenizer = train_tokenizer(texts, vocab_size=6000)
    tiny = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64} if config.tiny else {}
    torch.manual_seed(config.seed)
    model = RobertaModel(glyph_data.model_config(glyph_data.Config(corpus=folder, out=folder, **tiny), tokenizer))
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return texts, model


def row(name, unit, ours, reference, ratio, target=None):
    """One line of the table; target is (">=" or "<=", threshold) or None."""
    met = None if target is None else {">=": operator.ge, "<=": operator.le}[target[0]](ratio, target[1])
    return dict(name=name, unit=unit, ours=ours, reference=reference, ratio=ratio,
                target=None if target is None else f"{target[0]} {target[1]}", met=met)


def parse_config(argv):
    """The Config of the command line `argv` (sys.argv when None)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Config.data_dir, help="shared data folder")
    parser.add_argument("--out", type=Path, default=Config.out, help="parent of bench/<timestamp>/")
    parser.add_argument("--captions", type=int, default=Config.captions, help="captions to sample")
    parser.add_argument("--batch-size", type=int, default=Config.batch_size, help="rows per batch")
    parser.add_argument("--repeats", type=int, default=Config.repeats, help="timed repeats per comparison")
    parser.add_argument("--long-tokens", type=int, default=Config.long_tokens, help="length of the long input")
    parser.add_argument("--peak-size", type=int, default=Config.peak_size, help="side of the peak matmul")
    parser.add_argument("--tiny", action="store_true", help="small shape for both models (smoke tests)")
    parser.add_argument("--corpus-texts", type=int, default=Config.corpus_texts, help="corpus sample (4, 5)")
    parser.add_argument("--train-steps", type=int, default=Config.train_steps, help="steps per repeat (5)")
    parser.add_argument("--arms", type=int, default=Config.arms, help="arms of the second collective (6)")
    parser.add_argument("--glyph-texts", type=int, default=Config.glyph_texts, help="glyph strings embedded (7)")
    parser.add_argument("--geolip-texts", type=int, default=Config.geolip_texts, help="long texts (8)")
    parser.add_argument("--seed", type=int, default=Config.seed, help="sample, weights and long input")
    parser.add_argument("--only", type=int, nargs="+", choices=range(1, 10), default=Config.only,
                        help="run these measurements alone, e.g. --only 6 9 (default: all)")
    args = parser.parse_args(argv)
    return Config(**{**vars(args), "only": tuple(args.only)})


def build_setup(config):
    """The Setup every measurement shares: a seeded caption sample (the naive batches keep its order, encode() runs
    it longest first), captionbert and a BertModel of the same shape with random weights, captionbert's encode FLOPs
    on the sample, and the precision and dtypes, decided once."""
    caption_lines = (config.data_dir / CAPTIONS).read_text().splitlines()
    texts = random.Random(config.seed).sample([line.split("\t", 1)[1] for line in caption_lines], config.captions)
    tokenizer = AutoTokenizer.from_pretrained(CAPTIONBERT, trust_remote_code=True)
    size = config.batch_size
    batches = [tokenizer(texts[i:i + size], padding=True, return_tensors="pt") for i in range(0, len(texts), size)]
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    by_length = sorted(lengths, reverse=True)
    sorted_lengths = [by_length[i:i + size] for i in range(0, len(texts), size)]  # the batches encode() runs

    shape = SHAPES[config.tiny]
    captionbert = build_captionbert(shape, config.seed)
    captionbert.tokenizer = tokenizer
    torch.manual_seed(config.seed)
    bert = BertModel(BertConfig(vocab_size=captionbert.config.vocab_size,
                                max_position_embeddings=captionbert.config.max_position_embeddings, **shape),
                     add_pooling_layer=False).eval()

    linear_weights = sum(m.weight.numel() for m in captionbert.encoder.modules() if isinstance(m, nn.Linear))
    flops = model_flops(sorted_lengths, linear_weights, shape["hidden_size"], shape["num_hidden_layers"])
    precision = training.resolve_precision("auto", "cpu")  # what tools.captionbert.train --precision auto runs
    dtypes = list(dict.fromkeys(("fp32", precision)))  # bf16 too where the hardware computes it
    return Setup(texts, tokenizer, batches, lengths, sorted_lengths, shape, captionbert, bert, linear_weights, flops,
                 precision, dtypes)


def opening_report(setup):
    """The report's first keys: the load average now, BertModel's attention, the caption sample's token counts,
    captionbert's trunk linear weights and encode GFLOP, an empty "seconds" for the measurements to fill, the dtypes
    measured and why bf16 was left out (None when it was not)."""
    return {"load_average_at_start": os.getloadavg(),
            "bert_attn_implementation": setup.bert.config._attn_implementation,
            "captions": {"count": len(setup.texts), "real_tokens": sum(setup.lengths),
                         "padded_tokens_given_order": sum(b["input_ids"].numel() for b in setup.batches),
                         "padded_tokens_sorted": sum(len(b) * max(b) for b in setup.sorted_lengths)},
            "trunk_linear_weights": setup.linear_weights, "encode_model_gflop": setup.flops / 1e9, "seconds": {},
            "dtypes": setup.dtypes,
            "bf16_left_out": None if "bf16" in setup.dtypes else "this CPU has neither AVX-512 BF16 nor AMX: emulated"}


def throughput(config, setup):
    """(1) + (2), in each dtype: (rows, report part). The rows: forward vs BertModel, encode vs the naive HF pipeline,
    encode's GFLOP/s vs the matmul peak; the part: their seconds under seconds/<dtype>/forward and encode."""
    texts, tokenizer, size = setup.texts, setup.tokenizer, config.batch_size
    captionbert, bert = setup.captionbert, setup.bert

    def captionbert_forward():
        for batch in setup.batches:
            captionbert(**batch)

    def bert_forward():
        for batch in setup.batches:
            masked_mean_pool(bert(**batch).last_hidden_state, batch["attention_mask"])

    def captionbert_encode():
        captionbert.encode(texts, batch_size=size, show_progress_bar=False)

    def naive_encode():
        for start in range(0, len(texts), size):
            batch = tokenizer(texts[start:start + size], padding=True, return_tensors="pt")
            l2_normalize(masked_mean_pool(bert(**batch).last_hidden_state, batch["attention_mask"]))

    rows, seconds = [], {}
    for dtype in setup.dtypes:
        forward = race({"captionbert": in_dtype(captionbert_forward, dtype), "bert": in_dtype(bert_forward, dtype)},
                       config.repeats, f"forward {dtype}")
        encode = race({"captionbert": in_dtype(captionbert_encode, dtype), "naive": in_dtype(naive_encode, dtype)},
                      config.repeats, f"encode {dtype}")
        seconds[dtype] = {"forward": forward, "encode": encode}
        ours, theirs = statistics.median(forward["captionbert"]), statistics.median(forward["bert"])
        rows.append(row(f"(a) forward {dtype}: captionbert vs BertModel", "captions/s", len(texts) / ours,
                        len(texts) / theirs, theirs / ours, (">=", 1.3)))
        ours, theirs = statistics.median(encode["captionbert"]), statistics.median(encode["naive"])
        rows.append(row(f"(b) encode {dtype}: captionbert vs HF pipeline", "captions/s", len(texts) / ours,
                        len(texts) / theirs, theirs / ours, (">=", 1.3)))
        achieved, peak = setup.flops / ours / 1e9, matmul_peak_gflops(config.peak_size, DTYPES[dtype])
        rows.append(row(f"(2) encode {dtype}: captionbert vs matmul peak", "GFLOP/s", achieved, peak,
                        achieved / peak, (">=", 0.5)))
    return rows, {"seconds": seconds}


def long_input_memory(config):
    """(3): (rows, report part). The rows: one long input's peak extra RSS and forward time, SDPA vs eager, each in a
    fresh subprocess; the part: both results under long_input."""
    long = {name: long_input(config, name) for name in tqdm(("sdpa", "eager"), desc=f"{config.long_tokens} tokens")}
    sdpa, eager = long["sdpa"], long["eager"]
    rows = [row(f"(3) {config.long_tokens} tokens fp32 peak extra RSS: sdpa vs eager", "MiB", sdpa["peak_extra_mib"],
                eager["peak_extra_mib"], sdpa["peak_extra_mib"] / eager["peak_extra_mib"], ("<=", 0.25)),
            row(f"(3) {config.long_tokens} tokens fp32 forward: sdpa vs eager (speed-up)", "s", sdpa["seconds"],
                eager["seconds"], eager["seconds"] / sdpa["seconds"])]
    return rows, {"long_input": long}


def corpus_sample(config, tokenizer):
    """(texts, token ids): the seeded sample of the default corpus that (4) and (5) run on, tokenized by `tokenizer`
    up to 512 tokens."""
    mix = random.Random(config.seed).sample(corpus.build(config.data_dir)[0], config.corpus_texts)
    return mix, tokenizer(mix, truncation=True, max_length=512)["input_ids"]


def extraction(config, setup, mix, mix_ids):
    """(4): (rows, report part). The row: teacher extraction of the corpus sample `mix`, fp32, tools/encoders.py's
    length-bucketed path vs naive padded batches in corpus order, on setup.bert saved as a plain HF teacher folder;
    the part: the sample's token counts under corpus_sample and the seconds under seconds/extraction."""
    tokenizer, size = setup.tokenizer, config.batch_size
    with tempfile.TemporaryDirectory() as folder:
        setup.bert.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        _, teacher = encoders.load(folder, encoders.EncodeOptions(size, 512, show_progress=False))

    def naive_extract():
        for start in range(0, len(mix), size):
            batch = tokenizer(mix[start:start + size], padding=True, truncation=True, max_length=512,
                              return_tensors="pt")
            l2_normalize(masked_mean_pool(teacher.model(**batch).last_hidden_state, batch["attention_mask"]))

    extract = race({"bucketed": in_dtype(lambda: teacher.encode(mix), "fp32"),
                    "naive": in_dtype(naive_extract, "fp32")}, config.repeats, "extraction")
    ours, theirs = statistics.median(extract["bucketed"]), statistics.median(extract["naive"])
    rows = [row("(4) extraction fp32: length-bucketed vs naive batches", "texts/s", len(mix) / ours,
                len(mix) / theirs, theirs / ours, (">=", 1.5))]
    return rows, {"corpus_sample": {"count": len(mix), "real_tokens": sum(map(len, mix_ids)),
                                    "longest": max(map(len, mix_ids))},
                  "seconds": {"extraction": extract}}


def training_steps(config, setup, mix_ids):
    """(5): (rows, report part). The rows: student training steps on bucketed batches of the corpus sample
    `mix_ids` in setup.precision, captionbert vs BertModel with the same pooling and head, and (5b) captionbert with
    fused vs torch's per-tensor Adam; the part: the seconds under seconds/training. setup.captionbert and setup.bert
    are stepped in place and left in train mode."""
    captionbert, size, precision = setup.captionbert, config.batch_size, setup.precision
    train_config = captionbert_data.Config(align=Path("-"), out=Path("-"), precision=precision)
    lengths_array = np.array([len(ids) for ids in mix_ids])
    train_batches = captionbert_data.bucketed_batches(lengths_array, size, config.seed, 0)[:config.train_steps]
    train_batches = [captionbert_data.collate(mix_ids, members, setup.tokenizer.pad_token_id)
                     for members in train_batches]
    targets = l2_normalize(torch.randn(size, captionbert.config.output_dim, generator=torch.Generator()
                                       .manual_seed(config.seed)))
    torch.manual_seed(config.seed)
    head_class = type(captionbert.head)  # captionbert's SentenceHead, from its remote-code module
    bert_student = BertStudent(setup.bert, head_class(setup.shape["hidden_size"], captionbert.config.output_dim,
                                                      captionbert.config.layer_norm_eps))
    students = {"captionbert": captionbert.train(), "bert": bert_student.train(),
                "captionbert per-tensor Adam": copy.deepcopy(captionbert)}
    optimizers = {name: training.adam(model.parameters(), 1e-5) for name, model in students.items()}
    optimizers["captionbert per-tensor Adam"] = torch.optim.Adam(students["captionbert per-tensor Adam"]
                                                                 .parameters(), lr=1e-5)  # torch's CPU default

    def steps(name):
        def run():
            for input_ids, attention_mask in train_batches:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    terms = captionbert_data.distillation_terms(students[name], input_ids, attention_mask,
                                                                targets, train_config)
                training.optimiser_step(optimizers[name], terms["loss"])
        return run

    train = race({name: steps(name) for name in students}, config.repeats, "training steps")
    tokens = sum(int(mask.sum()) for _, mask in train_batches)
    ours, theirs = statistics.median(train["captionbert"]), statistics.median(train["bert"])
    before = statistics.median(train["captionbert per-tensor Adam"])
    rows = [row(f"(5) training step {precision}: captionbert vs BertModel", "tokens/s", tokens / ours,
                tokens / theirs, theirs / ours, (">=", 1.0)),
            row(f"(5b) training step {precision}: captionbert, fused Adam vs per-tensor Adam", "tokens/s",
                tokens / ours, tokens / before, before / ours)]
    return rows, {"seconds": {"training": train}}


def with_random_collectives(trunk, sizes, seed, compiled=False):
    """{arm count: a copy of `trunk` with a random collective of that many arms attached (compiled: through
    torch.compile)}, for each of `sizes`."""
    attached = {}
    for arms in sizes:
        attached[arms] = copy.deepcopy(trunk)
        with tempfile.TemporaryDirectory() as folder:
            write_random_collective(Path(folder), attached[arms], arms, seed)
            attached[arms].attach_amoe(path=folder, compiled=compiled)
    return attached


def amoe_arms(config, setup):
    """(6): (rows, report part). The rows, in each dtype: captionbert.encode latency with each collective's arms on
    (the shipped collective's size and --arms) and with every arm off vs the bare trunk (an identical copy); then the
    first size's arithmetic floor and whether every-arm-off embeddings equal the bare trunk's. The part: the sizes and
    the equality checks under amoe, the latencies under seconds/<dtype>/amoe."""
    texts, size = setup.texts, config.batch_size
    setup.captionbert.eval()  # training_steps left it in train mode
    bare_trunk = copy.deepcopy(setup.captionbert)
    shipped = shipped_arm_count()
    sizes = [arms for arms in dict.fromkeys((shipped, config.arms)) if arms]
    attached = with_random_collectives(bare_trunk, sizes, config.seed)

    def encoder(model, arms_off=False):
        def run():
            with model.amoe_off() if arms_off else contextlib.nullcontext():
                model.encode(texts, batch_size=size, show_progress_bar=False)
        return run

    outputs = {"bare": bare_trunk.encode(texts, batch_size=size, show_progress_bar=False),
               **{arms: model.encode(texts, batch_size=size, show_progress_bar=False)
                  for arms, model in attached.items()}}
    with attached[sizes[0]].amoe_off():
        outputs["off"] = attached[sizes[0]].encode(texts, batch_size=size, show_progress_bar=False)
    amoe = {"shipped_arms": shipped, "arms": list(attached),
            "off_equals_bare": bool(np.array_equal(outputs["off"], outputs["bare"])),
            "on_differs_from_bare": all(not np.array_equal(outputs[arms], outputs["bare"]) for arms in attached)}
    rows, seconds = [], {}
    for dtype in setup.dtypes:
        latency = race({**{f"{arms} arms on": in_dtype(encoder(model), dtype) for arms, model in attached.items()},
                        "arms off": in_dtype(encoder(attached[sizes[0]], arms_off=True), dtype),
                        "bare": in_dtype(encoder(bare_trunk), dtype)}, config.repeats, f"AMOE encode {dtype}")
        seconds[dtype] = {"amoe": latency}
        bare = statistics.median(latency["bare"])
        for arms in attached:
            ours = statistics.median(latency[f"{arms} arms on"])
            which = "the shipped collective's size" if arms == shipped else "--arms"
            rows.append(row(f"(6) encode {dtype}: {arms} arm(s) on ({which}) vs bare trunk (latency)", "s",
                            ours, bare, ours / bare, ("<=", 1.15) if arms == shipped else None))
        ours = statistics.median(latency["arms off"])
        rows.append(row(f"(6) encode {dtype}: every arm off vs bare trunk (latency)", "s", ours, bare, ours / bare))
    flops = setup.flops
    arm_flops = (arm_flops_per_token(setup.shape["hidden_size"], sizes[0]) * sum(setup.lengths)
                 * setup.shape["num_hidden_layers"])
    rows.append(row(f"(6) arithmetic floor of {sizes[0]} arm(s): (model + arm FLOPs) / model FLOPs", "GFLOP",
                    (flops + arm_flops) / 1e9, flops / 1e9, (flops + arm_flops) / flops))
    equal = float(amoe["off_equals_bare"])
    rows.append(row("(6) fp32 embeddings, every arm off vs bare trunk: equal", "bool", equal, 1.0, equal,
                    (">=", 1.0)))
    return rows, {"amoe": amoe, "seconds": seconds}


def inference_backends(config, setup):
    """(9): (rows, report part). captionbert's forward over the whole sample on the same length-sorted padded batches
    (tools/encoders.padded_batches), the bare trunk and the trunk with a random collective of the shipped size, through
    each backend: PyTorch eager fp32 (and bf16 where measured), ONNX fp32 and int8 (graphs exported from these very
    models by tools/onnx_graphs.py, the int8 ones by the export tools' recipe, quantize_to_cosine on the sample; run by
    onnxruntime on every core), and the arms through torch.compile (attach_amoe(compiled=True); its bare trunk is the
    eager one, as the trunk is not compiled). The trunk is the shipped one (random weights in the tiny smoke test):
    which MatMuls int8 must keep float depends on its trained weights. The rows: each backend's bare throughput vs
    PyTorch eager fp32 (targets: ONNX fp32 >= 1.3x, int8 >= 2x) and, in each backend, the arms' latency vs its own
    bare trunk (target for the compiled arms: <= 1.15x); the int8 graph's mean cosine to PyTorch fp32 on the sample.
    The part: the seconds under seconds/backends, the int8 quantisations under backends."""
    arms = shipped_arm_count() or config.arms
    bare = (copy.deepcopy(setup.captionbert) if config.tiny
            else AutoModel.from_pretrained(CAPTIONBERT, trust_remote_code=True)).eval()
    models = {"bare": bare, "arms": with_random_collectives(bare, [arms], config.seed)[arms],
              "compiled arms": with_random_collectives(bare, [arms], config.seed, compiled=True)[arms]}
    batches = encoders.padded_batches(setup.tokenizer, setup.texts, bare.usable_length, config.batch_size)

    def torch_forward(model, dtype):
        return in_dtype(lambda: [model(ids, mask) for _, ids, mask in batches], dtype)

    def onnx_forward(graph):
        return lambda: [onnx_graphs.run(graph, ids, mask) for _, ids, mask in batches]

    contenders, sessions, quantisations = {}, {}, {}
    for dtype in setup.dtypes:
        contenders.update({f"eager {dtype} {kind}": torch_forward(models[kind], dtype) for kind in ("bare", "arms")})
    with tempfile.TemporaryDirectory() as folder:
        example = (batches[0][1][:2], batches[0][2][:2])
        for kind in ("bare", "arms"):
            path = Path(folder) / f"{kind}.onnx"
            onnx_graphs.export(onnx_graphs.PooledOutput(models[kind]), example, path, [onnx_graphs.SENTENCE_OUTPUT],
                               bare.usable_length)
            quantisations[kind] = onnx_graphs.quantize_to_cosine(
                path, Path(folder) / onnx_graphs.int8_name(path.name), batches,
                lambda ids, mask, model=models[kind]: model(ids, mask).pooler_output, onnx_graphs.INT8_MIN_COSINE)
            for precision, file in (("fp32", path.name), ("int8", onnx_graphs.int8_name(path.name))):
                # Four sessions take turns here: a spinning idle one would steal the cores of the one being timed
                # (measured: ONNX int8 1.87x -> 2.46x eager fp32 with spinning off).
                sessions[f"onnx {precision} {kind}"] = onnx_graphs.session(Path(folder) / file, os.cpu_count(),
                                                                           spinning=False)
    contenders.update({name: onnx_forward(graph) for name, graph in sessions.items()})
    contenders["compiled fp32 arms"] = torch_forward(models["compiled arms"], "fp32")
    latency = race(contenders, config.repeats, "backends")
    median = {name: statistics.median(times) for name, times in latency.items()}
    reference = median["eager fp32 bare"]
    rows = [row(f"(9) forward: {name.removesuffix(' bare')} vs PyTorch eager fp32 (throughput)", "s", median[name],
                reference, reference / median[name], target)
            for name, target in (("onnx fp32 bare", (">=", 1.3)), ("onnx int8 bare", (">=", 2.0)),
                                 *((("eager bf16 bare", None),) if "bf16" in setup.dtypes else ()))]
    for backend in (*(f"eager {dtype}" for dtype in setup.dtypes), "onnx fp32", "onnx int8", "compiled fp32"):
        on, off = median[f"{backend} arms"], median[f"{backend.replace('compiled', 'eager')} bare"]
        rows.append(row(f"(9) {backend}: {arms} arm(s) on vs bare trunk (latency)", "s", on, off, on / off,
                        ("<=", 1.15) if backend == "compiled fp32" else None))
    cosine = quantisations["bare"]["search"][-1]["parity"]["mean_cosine"]
    rows.append(row(f"(9) ONNX int8 vs PyTorch fp32: mean cosine on the sample (bare trunk, "
                    f"{len(quantisations['bare']['float_matmuls'])} MatMuls float)", "cosine", cosine, 1.0, cosine,
                    (">=", onnx_graphs.INT8_MIN_COSINE)))
    return rows, {"backends": {"arms": arms, "int8": quantisations}, "seconds": {"backends": latency}}


def glyph_embeddings(config):
    """(7): (rows, report part). The rows: glyph-embedder-v2's embeddings/s through llama.cpp, GGUF f32 and f16, vs
    PyTorch fp32 on the same generated glyph strings; the part: the seconds under seconds/glyph."""
    size = config.batch_size
    with tempfile.TemporaryDirectory() as folder:
        glyph_texts, glyph_model = build_glyph(Path(folder), config)
        glyph_tokenizer = AutoTokenizer.from_pretrained(folder)

        def torch_glyph():
            for start in range(0, len(glyph_texts), size):
                batch = glyph_tokenizer(glyph_texts[start:start + size], padding=True, return_tensors="pt")
                l2_normalize(masked_mean_pool(glyph_model(**batch).last_hidden_state, batch["attention_mask"]))

        contenders = {"pytorch fp32": in_dtype(torch_glyph, "fp32")}
        for dtype in ("f32", "f16"):
            llm = gguf.load_llama(gguf.export_gguf(folder, Path(folder) / f"{dtype}.gguf", dtype))
            contenders[f"gguf {dtype}"] = lambda llm=llm: gguf.llama_embed(llm, glyph_texts)
        glyph = race(contenders, config.repeats, "glyph embeddings")
    reference = len(glyph_texts) / statistics.median(glyph["pytorch fp32"])
    rows = []
    for dtype in ("f32", "f16"):
        ours = len(glyph_texts) / statistics.median(glyph[f"gguf {dtype}"])
        rows.append(row(f"(7) glyph: llama.cpp GGUF {dtype} vs PyTorch fp32 (throughput)", "emb/s", ours,
                        reference, ours / reference))
    return rows, {"seconds": {"glyph": glyph}}


def geolip_segments(config):
    """(8): (rows, report part). The rows: geolip's base on every segment of a seeded sample of long descriptions in
    one batched call vs a call per segment, then its encode latency on the sample cut to 1 .. 32 segments vs one
    segment; the part: the seconds under seconds/geolip and the sample's size under geolip."""
    geolip = geolip_data.build_model(geolip_data.Config(out=Path("-"), **geolip_data.PRESETS["cpu"]),
                                     teacher_dim=768)
    cut = (geolip.config.segment_size, geolip.config.segment_stride, geolip.config.max_segments)
    long_texts = random.Random(config.seed).sample(corpus.build(config.data_dir, ["imageinwords"])[0],
                                                   config.geolip_texts)
    content = geolip.content_ids(long_texts)
    pieces = [ids[start:end] for ids in content for start, end in segment_spans(len(ids), *cut)]
    base_calls = race({"one batched call": in_dtype(lambda: geolip.segments(content), "fp32"),
                       "a call per segment": in_dtype(lambda: [geolip.segments([piece]) for piece in pieces],
                                                      "fp32")}, config.repeats, "geolip base calls")
    ours, theirs = statistics.median(base_calls["one batched call"]), statistics.median(
        base_calls["a call per segment"])
    rows = [row(f"(8) geolip base: one batched call vs a call per segment ({len(pieces)})", "segments/s",
                len(pieces) / ours, len(pieces) / theirs, theirs / ours, (">=", 3.0))]
    lengths = [cut[0] + (segments - 1) * cut[1] for segments in (1, 4, 8, 16, 32)]  # 18 .. 452 tokens
    by_length = {n: [ids[:n] for ids in content] for n in lengths}
    latency = race({n: in_dtype(lambda ids=ids: geolip.embed(ids), "fp32")
                    for n, ids in by_length.items()}, config.repeats, "geolip encode vs length")
    one_segment = statistics.median(latency[lengths[0]])
    for n, ids in by_length.items():
        segments = len(segment_spans(max(map(len, ids)), *cut))
        rows.append(row(f"(8) geolip encode fp32: {len(ids)} texts of <= {n} tokens ({segments} segments) vs 1 "
                        "segment (latency)", "s", statistics.median(latency[n]), one_segment,
                        statistics.median(latency[n]) / one_segment))
    return rows, {"seconds": {"geolip": {"base_calls": base_calls, "encode": {str(n): t for n, t in latency.items()}}},
                  "geolip": {"texts": len(long_texts), "segments": len(pieces), "tokens": sum(map(len, content))}}


def merge(report, part):
    """Adds a measurement's report part to `report` in place, nested dicts key by key (so seconds/<dtype> can gain
    amoe after forward and encode); returns None."""
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(report.get(key), dict):
            merge(report[key], value)
        else:
            report[key] = value


def format_table(report):
    """The printed table of report["rows"] (ours, reference, ratio, target, verdict), the targets met and the load
    averages at start and end, as one string."""
    rows = report["rows"]
    header = f"{'measurement':<60} {'unit':>10} {'ours':>9} {'reference':>9} {'ratio':>6} {'target':>7}  verdict"
    lines = [header, "-" * len(header)]
    for r in rows:
        verdict = "-" if r["met"] is None else "met" if r["met"] else "MISSED"
        lines.append(f"{r['name']:<60} {r['unit']:>10} {r['ours']:>9.3g} {r['reference']:>9.3g} "
                     f"{r['ratio']:>6.3g} {r['target'] or '':>7}  {verdict}")
    lines.append(f"targets met: {sum(r['met'] is True for r in rows)} of {sum(r['met'] is not None for r in rows)}")
    lines.append(f"load average (1 min): {report['load_average_at_start'][0]:.2f} at start, "
                 f"{report['load_average_at_end'][0]:.2f} at end, on {os.cpu_count()} cores "
                 f"(above the core count, other processes shared the CPU and timings are noisy)")
    return "\n".join(lines)


def main(argv=None):
    """Runs the measurements (1) .. (9) (or --only those) in order on one shared setup, prints the table and writes
    report.json and table.txt beside the run record; returns 0."""
    config = parse_config(argv)
    torch.set_num_threads(os.cpu_count())
    chosen = set(config.only or range(1, 10))
    with runs.RunRecord(runs.timestamped(config.out, "bench"), config, "bench") as record:
        setup = build_setup(config)
        report = opening_report(setup)
        results = []
        if chosen & {1, 2}:
            results.append(throughput(config, setup))
        if 3 in chosen:
            results.append(long_input_memory(config))
        if chosen & {4, 5}:
            mix, mix_ids = corpus_sample(config, setup.tokenizer)
            if 4 in chosen:
                results.append(extraction(config, setup, mix, mix_ids))
            if 5 in chosen:
                results.append(training_steps(config, setup, mix_ids))
        if 6 in chosen:
            results.append(amoe_arms(config, setup))
        if 7 in chosen:
            results.append(glyph_embeddings(config))
        if 8 in chosen:
            results.append(geolip_segments(config))
        if 9 in chosen:
            results.append(inference_backends(config, setup))
        rows = []
        for family_rows, part in results:
            rows += family_rows
            merge(report, part)
        report.update(load_average_at_end=os.getloadavg(), rows=rows)
        table = format_table(report)
        print(table)
        runs.write_json(record.folder / "report.json", report)
        (record.folder / "table.txt").write_text(table + "\n")
    print(f"wrote {record.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
