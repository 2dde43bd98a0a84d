"""Shared fixtures. The suite never reaches the Hugging Face Hub: offline mode and a private HF_HOME are set before
transformers is imported, so remote-code modules are compiled into a throwaway cache."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="bundle-test-hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig, AutoModel  # noqa: E402

from shared_modeling.amoe import Arm, Dispatch, save_arm, save_dispatch  # noqa: E402
from shared_modeling.identity import trunk_hash  # noqa: E402

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
    import torch

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    return AutoModel.from_config(config, trust_remote_code=True).eval()


@pytest.fixture(scope="session")
def tiny_captionbert(tmp_path_factory):
    """(folder, model): a saved tiny captionbert with random weights, loadable by from_pretrained."""
    folder = captionbert_copy(tmp_path_factory.mktemp("tiny") / "captionbert-tiny", **TINY_CAPTIONBERT)
    model = build_from_folder(folder)
    model.save_pretrained(folder)
    return folder, AutoModel.from_pretrained(folder, trust_remote_code=True).eval()


@pytest.fixture(scope="session")
def data_dir():
    if not (DATA_DIR / "sts").is_dir():
        pytest.fail(f"shared data not found at {DATA_DIR}: put ../shared beside the clone or set BUNDLE_DATA_DIR")
    return DATA_DIR


def tiny_teacher(folder, hidden_size, seed):
    """A random one-layer BertModel folder with the real uncased tokenizer: a mean-pooled 'teacher' of any width."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden_size, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=2 * hidden_size, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CAPTIONBERT / name, Path(folder) / name)
    return Path(folder)


@pytest.fixture(scope="session")
def tiny_teachers(tmp_path_factory):
    """Two tiny random teachers of different widths (48 = the reference, 32)."""
    root = tmp_path_factory.mktemp("teachers")
    return [tiny_teacher(root / "teacher-a", 48, seed=1), tiny_teacher(root / "teacher-b", 32, seed=2)]


@pytest.fixture(scope="session")
def caption_sample(data_dir):
    """200 real captions (the default corpus's first Flickr8k train captions) as a .jsonl corpus file."""
    from tools import corpus

    texts = corpus.build(data_dir, ["flickr8k-train"])[0][:190]
    texts += corpus.build(data_dir, ["imageinwords"])[0][:10]  # a few long descriptions for the length mix
    path = Path(tempfile.mkdtemp(prefix="bundle-test-corpus-")) / "captions.jsonl"
    atexit.register(shutil.rmtree, path.parent, ignore_errors=True)
    corpus.write_texts(path, texts)
    return path


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

    path, card = cards.export_tool(export).card_from_records(export)
    assert path == folder / "README.md" and path.read_text() == card
    numbers = cards.record_numbers([*cards.source_folders(export), folder / "config.json"])
    assert cards.unaccounted_numbers(card, numbers, cards.published_numbers()) == []


def trained_like(arm):
    """An arm whose output projections are no longer zero, as after training."""
    with torch.no_grad():
        for site in arm.blocks:
            site.head_out.weight.normal_(std=0.5)
    return arm


@pytest.fixture()
def model_with_arms(tmp_path):
    """(folder, model): a saved tiny captionbert (hidden 64) whose amoe/ ships a two-arm collective."""
    folder = captionbert_copy(tmp_path / "captionbert", **{**TINY_CAPTIONBERT, "hidden_size": 64,
                                                           "intermediate_size": 128})
    build_from_folder(folder).save_pretrained(folder)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    trunk = trunk_hash(model)
    torch.manual_seed(1)
    for name in ("paraphrase", "equiv"):
        save_arm(folder / "amoe" / "arms" / f"{name}.safetensors", trained_like(Arm(64, 2)), name, trunk, {})
    save_dispatch(folder / "amoe" / "collective" / "dispatch.safetensors", Dispatch(["paraphrase", "equiv"], 64, 2),
                  trunk)
    return folder, model
