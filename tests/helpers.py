"""Helpers the tests import: the repository's paths, tiny model folders, tools run in a subprocess (for kill -9 and
fresh-process checks) and the card check. Fixtures live in conftest.py, which sets the offline environment before
anything here imports transformers."""

import json
import os
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

    card = cards.export_tool(export).card_from_records(export)
    assert cards.built_folder(export) == folder and (folder / "README.md").read_text() == card
    numbers = cards.record_numbers([*cards.source_folders(export), folder / "config.json"])
    assert cards.unaccounted_numbers(card, numbers, cards.published_numbers()) == []


def trained_like(arm):
    """An arm whose output projections are no longer zero, as after training."""
    with torch.no_grad():
        for site in arm.blocks:
            site.head_out.weight.normal_(std=0.5)
    return arm
