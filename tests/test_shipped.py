"""The shipped bundle, as a fresh clone has it: each Hub folder's committed weights are the files its released
records (records/<folder>/, written by `make release`) describe, the card is those records, the folder loads in a
fresh process where the project cannot be imported, and a real number recomputed from the shipped weights equals the
recorded one."""

import dataclasses
import fnmatch
import json
import os
import re
import subprocess
import sys

import pytest

import torch

from helpers import ROOT
from tools import cards, encoders, publish, registry, runs
from tools.captionbert import evaluate as captionbert_evaluate
from tools.geolip import data as geolip_data
from tools.geolip.metrics import retrieval, row_embeddings
from tools.glyph import corpus as glyph_corpus
from tools.glyph import evaluate as glyph_evaluate
from tools.glyph.data import write_triples

FOLDERS = sorted(registry.BY_FOLDER)


def released_export(folder):
    """(records root, export run folder, the export's metrics) of the build shipped in `folder`."""
    release = cards.released(registry.BY_FOLDER[folder])
    assert release is not None, f"{folder} has no records/{folder}/release.json: ship a build with make release"
    root, export = release
    return root, export, runs.read_json(export / "metrics.json")


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_committed_card_is_its_records(folder):
    root, export, _ = released_export(folder)
    card = cards.card_from_records(export, root)
    assert (ROOT / folder / "README.md").read_text() == card, "stale card: run make cards"
    numbers = cards.record_numbers([*cards.source_folders(export, root), ROOT / folder / "config.json"])
    assert cards.unaccounted_numbers(card, numbers, cards.published_numbers()) == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_shipped_binary_is_the_file_its_release_recorded(folder):
    pipeline = registry.BY_FOLDER[folder]
    _, _, metrics = released_export(folder)
    shipped = pipeline.weights_sha256(pipeline.path)
    assert shipped == metrics["files_sha256"]  # byte for byte: sha256sum of each file
    assert all(any(fnmatch.fnmatch(name, pattern) for name in shipped) for pattern in pipeline.weights)
    # The export checked, before recording them, that these are the weights its evaluation scored.
    assert encoders.weights_hash(pipeline.path) == metrics["weights_sha256"]


@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS)
def test_each_shipped_folder_loads_in_a_fresh_process_as_its_record_says(folder):
    _, _, metrics = released_export(folder)
    path = ROOT / folder
    loaded = publish.load_check(path, publish.published_files(path)[0])
    assert loaded["embedding_space"] == metrics["embedding_space"]
    assert loaded.get("embedding_space_with_arms") == metrics.get("embedding_space_with_arms")
    assert loaded["amoe"] == metrics.get("roster")


@pytest.mark.slow
def test_the_shipped_captionbert_recomputes_its_sts_b_spearman(tmp_path, data_dir):
    root, export, _ = released_export("captionbert-8192-v2")
    evaluation = root / runs.read_json(export / "config.json")["eval"]
    recorded = runs.read_json(evaluation / "metrics.json")["captionbert-8192-v2"]
    out = tmp_path / "eval"
    assert captionbert_evaluate.main(["--encoder", f"captionbert-8192-v2={ROOT / 'captionbert-8192-v2'}",
                                      "--tasks", "STS-B", "--gauge-captions", "0", "--data-dir", str(data_dir),
                                      "--out", str(out)]) == 0
    recomputed = json.loads((out / "metrics.json").read_text())["captionbert-8192-v2"]
    assert recomputed["weights_sha256"] == recorded["weights_sha256"]
    assert recomputed["STS-B"] == pytest.approx(recorded["STS-B"], abs=1e-4)  # rank ties may move in the last digits


@pytest.mark.slow
def test_the_shipped_glyph_recomputes_its_win_rate_on_its_held_out_triples(tmp_path):
    folder = "glyph-embedder-v2"
    root, export, _ = released_export(folder)
    names = runs.read_json(export / "config.json")
    corpus_run, evaluation = root / names["corpus"], root / names["eval"]
    config = glyph_corpus.Config(**{**runs.read_json(corpus_run / "config.json"), "out": tmp_path})
    write_triples(tmp_path / "test.jsonl", glyph_corpus.held_out_triples(config))  # the corpus itself is not in git
    assert runs.file_sha256(tmp_path / "test.jsonl") == runs.read_json(corpus_run / "metrics.json")["test_sha256"]
    queries = runs.read_json(evaluation / "config.json")["retrieval_queries"]
    assert glyph_evaluate.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "eval"), "--retrieval-queries",
                                str(queries), "--encoder", f"{folder}={ROOT / folder}"]) == 0
    recorded = runs.read_json(evaluation / "metrics.json")["rows"][folder]
    recomputed = runs.read_json(tmp_path / "eval" / "metrics.json")["rows"][folder]
    assert recomputed["weights_sha256"] == recorded["weights_sha256"]
    assert recomputed["win_rate"] == pytest.approx(recorded["win_rate"], abs=1e-9)


@pytest.mark.slow
def test_the_shipped_geolip_recomputes_its_m_acc_on_its_held_out_gallery(tmp_path, data_dir):
    from transformers import AutoModel

    folder = "geolip-clip-ctx576"
    root, export, _ = released_export(folder)
    names = runs.read_json(export / "config.json")
    evaluation, train_run = root / names["eval"], root / names["train"]
    trained = dataclasses.replace(geolip_data.training_config(train_run), out=tmp_path, data_dir=data_dir,
                                  teacher_cache=None)
    _, validation = geolip_data.split_texts(trained)
    _, teacher = encoders.load(trained.teacher)
    targets = torch.from_numpy(geolip_data.teacher_encode(trained, teacher, validation))
    model = AutoModel.from_pretrained(ROOT / folder, trust_remote_code=True).eval()
    memory = row_embeddings(model, validation, trained.batch_size)["memory"]
    with torch.no_grad():
        recomputed = retrieval(model.projector(memory), targets)["m_acc"]
    recorded = runs.read_json(evaluation / "metrics.json")
    assert encoders.weights_hash(ROOT / folder) == recorded["weights_sha256"] and recorded["gallery"] == len(validation)
    # The teacher embeds the gallery again here: a near tie may turn on its last bits, so one text either way.
    assert recomputed == pytest.approx(recorded["rows"]["memory"]["m_acc"], abs=1.5 / len(validation))


def test_the_readme_snippets_run_on_the_shipped_folders_in_a_fresh_process():
    """The Python blocks before README.md's first command block: each one runs as a user would run it after `git
    clone` (from the repository root, the project not importable, offline) and prints what its comment says."""
    head = (ROOT / "README.md").read_text().split("```bash")[0]
    snippets = re.findall(r"```python\n(.*?)```", head, flags=re.S)
    assert len(snippets) == len(registry.PIPELINES)  # one a model
    for snippet in snippets:
        expected = re.search(r"# (.+)$", snippet.strip())[1]
        environment = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HF_HUB_OFFLINE": "1"}
        result = subprocess.run([sys.executable, "-P", "-c", snippet], cwd=ROOT, capture_output=True, text=True,
                                env=environment, check=False)  # -P: the working directory is not on sys.path
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip().splitlines()[-1] == expected


def test_the_glyph_cards_llama_cpp_snippet_survives_a_text_longer_than_the_model():
    """llama-cpp-python's default context (512) is longer than the model's 256 positions: a longer text then aborts
    the process in a GGML assertion Python cannot catch. The card's snippet, run in its own process on a 300-token
    text, must return a unit vector."""
    folder = registry.GLYPH.path
    card = (folder / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", card, flags=re.S) if "llama_cpp" in block)
    longer = 'llm.embed("a ⇒ b " * 100, normalize=True)'  # 300 tokens
    program = f"{snippet}import numpy\nprint(round(float(numpy.linalg.norm({longer})), 4))\n"
    result = subprocess.run([sys.executable, "-c", program], cwd=folder, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "1.0"


def test_glyph_encodes_an_empty_list_as_its_card_says():
    """The glyph folder is sentence-transformers' own encode: [] gives shape (0,), as its card says (captionbert and
    geolip give (0, E))."""
    from sentence_transformers import SentenceTransformer

    card = (registry.GLYPH.path / "README.md").read_text()
    assert "an empty list gives an array of\nshape `(0,)`" in card
    assert SentenceTransformer(str(registry.GLYPH.path), device="cpu").encode([]).shape == (0,)
