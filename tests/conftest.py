"""Shared fixtures. The suite never reaches the Hugging Face Hub: offline mode and a private HF_HOME are set before
transformers is imported, so remote-code modules are compiled into a throwaway cache. Helpers the tests import live
in helpers.py."""

import atexit
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="bundle-test-hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModel  # noqa: E402

from helpers import (DATA_DIR, ROOT, TINY_CAPTIONBERT, build_from_folder, captionbert_copy, tiny_glyph,  # noqa: E402
                     saved_arm_trunk, tiny_teacher, trained_like)
from shared_modeling.amoe import Arm, Dispatch, save_arm, save_dispatch  # noqa: E402
from shared_modeling.identity import trunk_hash  # noqa: E402

STARTED = pytest.StashKey[float]()  # when the session started (perf_counter)


def pytest_sessionstart(session):
    session.config.stash[STARTED] = time.perf_counter()


def pytest_sessionfinish(session, exitstatus):
    """runs/test/session.json: this session's wall time and outcome, which `make timings` records for the README when
    the whole suite ran (no file, -k or -m selection) and passed."""
    config = session.config
    whole = (config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword
             and not config.option.markexpr)
    record = ROOT / "runs" / "test" / "session.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"seconds": time.perf_counter() - config.stash[STARTED], "cpus": os.cpu_count(),
                                  "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "whole_suite": whole,
                                  "exit_status": int(exitstatus), "tests": session.testscollected}) + "\n")


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


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory):
    """(folder, texts): helpers.tiny_glyph, a tiny random glyph RobertaModel and the texts its tokenizer learnt."""
    return tiny_glyph(tmp_path_factory.mktemp("glyph") / "glyph-tiny")


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


def captionbert_with_arms(folder):
    """(folder, model): a saved tiny captionbert (hidden 64) whose amoe/ ships a two-arm collective."""
    folder = saved_arm_trunk(folder)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    trunk = trunk_hash(model)
    torch.manual_seed(1)
    for name in ("paraphrase", "equiv"):
        save_arm(folder / "amoe" / "arms" / f"{name}.safetensors", trained_like(Arm(64, 2)), name, trunk, {})
    save_dispatch(folder / "amoe" / "collective" / "dispatch.safetensors", Dispatch(["paraphrase", "equiv"], 64, 2),
                  trunk)
    return folder, model


@pytest.fixture()
def model_with_arms(tmp_path):
    """captionbert_with_arms, one per test."""
    return captionbert_with_arms(tmp_path / "captionbert")


@pytest.fixture(scope="module")
def module_model_with_arms(tmp_path_factory):
    """captionbert_with_arms, one per test module (for tests that only read it)."""
    return captionbert_with_arms(tmp_path_factory.mktemp("arms") / "captionbert")
