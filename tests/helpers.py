"""Helpers the tests import: the repository's paths, tiny model folders, tools run in a subprocess (for kill -9 and
fresh-process checks) and the card check. Fixtures live in conftest.py, which sets the offline environment before
anything here imports transformers."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel

ROOT = Path(__file__).resolve().parent.parent
CAPTIONBERT = ROOT / "captionbert-8192-v2"
DATA_DIR = Path(os.environ.get("BUNDLE_DATA_DIR", ROOT.parent / "shared" / "data"))

# A tiny captionbert (real tokenizer, so the real vocabulary; every width small) for structural tests.
TINY_CAPTIONBERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=8192, output_dim=24)


def captionbert_copy(destination, **overrides):
    """Copy the captionbert Hub folder (code, config, tokenizer) to `destination` with config overrides. The copy
    is an untrained model: the trained length an export wrote into the folder's config is not carried over."""
    shutil.copytree(CAPTIONBERT, destination, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "amoe"))
    config = json.loads((destination / "config.json").read_text())
    config.pop("trained_length", None)
    config.update(overrides)
    (destination / "config.json").write_text(json.dumps(config, indent=2))
    return destination


def build_from_folder(folder, seed=0):
    """A randomly initialised model built by the folder's own remote code, the way users' code resolves it."""
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    return AutoModel.from_config(config, trust_remote_code=True).eval()


def saved_arm_trunk(folder, **overrides):
    """A saved, randomly initialised tiny captionbert wide enough for AMOE arms (hidden 64: the dispatch keys' 64
    dims), at `folder`, with further config overrides; returns the folder."""
    folder = captionbert_copy(folder, **{**TINY_CAPTIONBERT, "hidden_size": 64, "intermediate_size": 128, **overrides})
    build_from_folder(folder).save_pretrained(folder)
    return folder


def tiny_teacher(folder, hidden_size, seed):
    """A random one-layer BertModel folder with the real uncased tokenizer: a mean-pooled 'teacher' of any width."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden_size, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=2 * hidden_size, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CAPTIONBERT / name, Path(folder) / name)
    return Path(folder)


# ---- running tools in a subprocess (for kill -9 and fresh-process checks) ---------------------------------------

# One thread per process everywhere, so 1-process, 2-process and resumed runs do identical arithmetic.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def run_tool(module, *args, **popen):
    return subprocess.Popen([sys.executable, "-m", f"tools.{module}", *map(str, args)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def torchrun(*args, processes=2):
    """`python -m torch.distributed.run --standalone --nproc-per-node <processes> args` (a script's path, or -m and
    a module) on CPU processes of one thread each; returns the finished subprocess.CompletedProcess."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env={**ENV, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)


def finish(process):
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    return output


def kill_when(process, path):
    """kill -9 `process` as soon as `path` exists; fails if the process ends first."""
    while not path.exists():
        assert process.poll() is None, f"finished before {path} appeared:\n{process.stdout.read()[-2000:]}"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


class RunsCode:
    """Unpickled, it calls open(path, "w"): what a file that runs code when it is read holds."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def plant_code(checkpoint, ran):
    """Rewrite a resume checkpoint so that unpickling it creates the file `ran`."""
    torch.save({**torch.load(checkpoint, weights_only=True), "history": RunsCode(ran)}, checkpoint)


def assert_card_from_records(export, folder):
    """The card an export wrote is what tools/cards.py regenerates from the records, and every number in it comes
    from those records (or is a published value the specs quote)."""
    from tools import cards

    card = cards.card_from_records(export)
    assert cards.built_folder(export) == folder and (folder / "README.md").read_text() == card
    numbers = cards.record_numbers([*cards.source_folders(export), folder / "config.json"])
    assert cards.unaccounted_numbers(card, numbers, cards.published_numbers()) == []


def trained_like(arm):
    """An arm whose output projections are no longer zero, as after training."""
    with torch.no_grad():
        for site in arm.blocks:
            site.head_out.weight.normal_(std=0.5)
    return arm


# ---- a tiny glyph model (tests/glyph) ----------------------------------------------------------------------------

N_POSITIONS = 64  # tokens the tiny glyph model takes (max_position_embeddings = N_POSITIONS + pad_token_id + 1)
TINY_ROBERTA = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                "max_position_embeddings": N_POSITIONS + 2, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                "initializer_range": 0.2}  # wide init: attention far from uniform, so a head or layout slip shows
TRAIN_OPERATORS = list("→←⇒⇐↔∧∨≠⊃⊂≥≤∈⊕⊖¬↑↓⊥∀∃")
UNSEEN_OPERATORS = list("↛≡∉∵∴⊢⊣")  # on the glyph list, kept out of the training texts
WORDS = ["retrieval", "layer", "compression", "attribution", "edges", "memory", "query", "key", "value", "gate",
         "router", "token", "span", "graph", "node", "loss", "grad", "norm", "head", "cache"]


def glyph_texts(n, seed=0):
    """n random glyph strings over WORDS and TRAIN_OPERATORS (a tiny tokenizer's training texts)."""
    rng = random.Random(seed)

    def term():
        number = rng.choice(["", "", "", f"_{rng.randint(0, 99)}", f" {rng.randint(0, 99999)}"])
        return "_".join(rng.sample(WORDS, rng.randint(1, 3))) + number + rng.choice(["", "", "↑", "↓"])

    texts = []
    for _ in range(n):
        parts = [term()]
        for _ in range(rng.randint(1, 3)):
            parts += [rng.choice(TRAIN_OPERATORS), term()]
        sep = rng.choice([" ", "", " "])
        texts.append(("¬" if rng.random() < 0.2 else "") + sep.join(parts))
    return texts


def tiny_glyph(folder):
    """(folder, texts): a saved random RobertaModel with a glyph tokenizer trained on `texts`."""
    from transformers import RobertaConfig, RobertaModel

    from tools.glyph.tokenizer import train_tokenizer

    texts = glyph_texts(400)
    tokenizer = train_tokenizer(texts, vocab_size=400, max_length=N_POSITIONS)
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(vocab_size=len(tokenizer), **TINY_ROBERTA)).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder), texts
