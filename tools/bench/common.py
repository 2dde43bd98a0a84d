"""What the benchmark's families share: the caption sample and the two template models every family copies (Setup,
built by build_setup from the run's settings, tools/bench/__main__.py's Config), timing (timed, in_dtype, race), a
table row (row), the model-FLOP count, the naive HF embedding pipeline the fast paths are raced against, the corpus
sample, and random AMOE collectives of the shipped collective's size."""

import copy
import json
import operator
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer, BertConfig, BertModel

from shared_modeling.amoe import Arm, Dispatch, save_arm, save_dispatch
from shared_modeling.identity import trunk_hash
from shared_modeling.pooling import l2_normalize, masked_mean_pool
from tools import corpus, registry, training

CAPTIONBERT = registry.CAPTIONBERT.path
CAPTIONS = Path("captions") / "flickr8k" / "Flickr8k.token.txt"
# Both models share vocabulary (30,522) and positions (8,192); only the trunk changes between the two shapes.
SHAPES = {
    False: dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048),
    True: dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),  # AMOE needs 64
}


@dataclass
class Setup:
    """What the families share, built once by build_setup. captionbert and bert are templates: no family runs or
    changes them; each deep-copies the ones it uses, so none sees another's side effects."""
    texts: list  # the seeded caption sample, in its given order
    tokenizer: object  # captionbert's
    batches: list  # the sample padded batch by batch in its given order: the naive pipelines' batches
    lengths: list  # real tokens of each caption
    sorted_lengths: list  # real tokens of each caption, batch by batch as encode() runs them (longest first)
    shape: dict  # SHAPES[config.tiny], both models'
    captionbert: nn.Module  # random weights, sdpa attention, captionbert's tokenizer attached, eval mode
    bert: nn.Module  # BertModel of the same shape, random weights, no pooler, its default sdpa attention, eval mode
    linear_weights: int  # weights of captionbert's trunk linear layers
    flops: float  # model FLOPs of captionbert.encode on the sample (see model_flops)
    precision: str  # training.resolve_precision("auto", "cpu"): what the training family trains in
    dtypes: list  # "fp32", and "bf16" where the CPU computes it: what throughput and amoe run in


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


def row(name, unit, ours, reference, ratio, target=None):
    """One line of the table; target is (">=" or "<=", threshold) or None."""
    met = None if target is None else {">=": operator.ge, "<=": operator.le}[target[0]](ratio, target[1])
    return dict(name=name, unit=unit, ours=ours, reference=reference, ratio=ratio,
                target=None if target is None else f"{target[0]} {target[1]}", met=met)


def model_flops(batch_lengths, linear_weights, hidden, layers):
    """Sum over batches (lists of real token counts) of real tokens x (2 x linear weights + 4 x T x D x layers),
    T = the batch's padded length, its longest row."""
    return sum(sum(lengths) * (2 * linear_weights + 4 * max(lengths) * hidden * layers) for lengths in batch_lengths)


def naive_pipeline(tokenizer, model, texts, size, **tokenize):
    """Embeddings of `texts` the naive HF way, the reference of the fast paths: tokenize each batch of `size` in the
    given order (with `tokenize`'s extra options), pad to its longest, forward, masked mean pool, L2-normalise."""
    embeddings = []
    for start in range(0, len(texts), size):
        batch = tokenizer(texts[start:start + size], padding=True, return_tensors="pt", **tokenize)
        embeddings.append(l2_normalize(masked_mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])))
    return embeddings


def corpus_sample(config, tokenizer):
    """(texts, token ids): the seeded sample of the default corpus (tools/corpus.py, long ImageInWords descriptions
    included) that extraction and training run on, tokenized by `tokenizer` up to 512 tokens."""
    mix = random.Random(config.seed).sample(corpus.build(config.data_dir)[0], config.corpus_texts)
    return mix, tokenizer(mix, truncation=True, max_length=512)["input_ids"]


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


def build_setup(config):
    """The Setup every family shares: a seeded caption sample (the naive batches keep its order, encode() runs it
    longest first), captionbert and a BertModel of the same shape with random weights, captionbert's encode FLOPs
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
