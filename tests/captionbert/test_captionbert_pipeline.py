"""The captionbert build pipeline: corpus -> extract -> align -> train (distillation) -> evaluate ->
export, on tiny random teachers and 200 real captions; Procrustes on synthetic data with known answers;
resumption after kill -9; 2-process extraction."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file

from helpers import (TINY_CAPTIONBERT, assert_card_from_records, captionbert_copy, finish, kill_when, run_tool,
                     saved_arm_trunk, torchrun)
from tools import corpus, encoders, publish, sts
from tools.captionbert import align
from tools.captionbert import evaluate
from tools.captionbert.data import write_shard
from tools.captionbert.extract import Config, load_corpus

pytestmark = pytest.mark.slow  # the pipeline's tools run end to end on tiny teachers and real captions


def shard_bytes(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.glob("*/shard-*.safetensors"))}


def extract_args(out, teachers, corpus_file):
    return ["--out", out, "--teacher", teachers[0], "--teacher", teachers[1], "--corpus", corpus_file,
            "--shard-rows", 48, "--batch-size", 16]


@pytest.fixture(scope="session")
def extraction(tmp_path_factory, tiny_teachers, caption_sample):
    out = tmp_path_factory.mktemp("extract") / "run"
    finish(run_tool("captionbert.extract", *extract_args(out, tiny_teachers, caption_sample)))
    return out


@pytest.fixture(scope="session")
def alignment(tmp_path_factory, extraction):
    out = tmp_path_factory.mktemp("align") / "run"
    assert align.main(["--extract", str(extraction), "--out", str(out), "--fit-rows", "120",
                       "--holdout-rows", "60"]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_student(tmp_path_factory):
    """A tiny captionbert folder whose output width matches the tiny reference teacher (48)."""
    folder = tmp_path_factory.mktemp("student") / "captionbert"
    return captionbert_copy(folder, **{**TINY_CAPTIONBERT, "output_dim": 48})


# ---- corpus ---------------------------------------------------------------------------------------------------------

def test_default_corpus_holds_no_sts8_text_and_no_held_out_caption(data_dir):
    texts, stats = corpus.build(data_dir)
    normalised = {" ".join(t.lower().split()) for t in texts}
    assert not normalised & corpus.held_out_texts(data_dir)
    assert len(normalised) == len(texts)  # deduplicated
    # STS-B train is built from STS 2012-2016 test sentences: nearly all of it must go.
    assert stats["stsb-train"]["dropped_held_out"] > 9000
    assert stats["flickr8k-train"]["kept"] > 29000 and stats["imageinwords"]["kept"] > 1200
    # The long-text gallery (whole images, geolip's and captionbert's long-input gauge) is held out too.
    gallery = corpus.split_imageinwords(data_dir)[1]
    assert len(gallery) >= 500 and stats["imageinwords"]["dropped_held_out"] >= 500
    assert not {" ".join(t.lower().split()) for t in gallery} & normalised
    assert not set(sts.gauge_captions(data_dir, 1000)) & set(texts)  # the in-domain gauge stays unseen


# ---- Procrustes on synthetic data -----------------------------------------------------------------------------------

def random_rotation(rng, rows, columns):
    q, _ = np.linalg.qr(rng.standard_normal((max(rows, columns), max(rows, columns))))
    return q[:rows, :columns]


def test_whitened_procrustes_recovers_a_known_rotation():
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((3000, 16)) * np.linspace(0.2, 3, 16) + 5  # anisotropic, off-centre
    rotation = random_rotation(rng, 16, 16)
    reference = teacher @ rotation - 2
    matrix, bias, correlations = align.fit_whitened_procrustes(teacher, reference, shrinkage=0.1)
    np.testing.assert_allclose(matrix, rotation, atol=1e-8)
    np.testing.assert_allclose(teacher @ matrix + bias, reference, atol=1e-8)
    assert (correlations > 0.5).sum() == 16


def test_semi_orthogonal_map_into_a_wider_reference():
    rng = np.random.default_rng(1)
    embed = random_rotation(rng, 8, 24)  # (8, 24), orthonormal rows
    teacher = rng.standard_normal((4000, 8)) * np.linspace(0.5, 2, 8)
    reference = teacher @ embed + 0.05 * rng.standard_normal((4000, 24))
    matrix, bias, correlations = align.fit_whitened_procrustes(teacher[:3000], reference[:3000], 0.0)
    held = align.row_cosines(teacher[3000:] @ matrix + bias, reference[3000:])
    assert held.mean() > 0.99
    assert (correlations > 0.5).sum() == 8 and correlations.shape == (8,)
    with pytest.raises(ValueError, match="wider than the reference"):
        align.fit_whitened_procrustes(reference, teacher, 0.1)


def synthetic_extraction(folder, rng, rows=600, shard_rows=100):
    """An extraction folder by hand: reference 24-d, a teacher that sees it through a noisy 12-d window."""
    reference = rng.standard_normal((rows, 24))
    teacher = reference[:, :12] @ random_rotation(rng, 12, 12) + 0.8 * rng.standard_normal((rows, 12))
    texts = [f"text {i}" for i in range(rows)]
    corpus.write_texts(folder / "texts.jsonl", texts)
    entries = []
    for name, matrix in (("ref", reference), ("narrow", teacher)):
        shards = []
        for c, start in enumerate(range(0, rows, shard_rows)):
            write_shard(folder / name / f"shard-{c:05d}.safetensors", matrix[start:start + shard_rows])
            shards.append(f"{name}/shard-{c:05d}.safetensors")
        entries.append({"name": name, "dim": matrix.shape[1], "shards": shards})
    manifest = {"corpus": {"file": "texts.jsonl", "rows": rows, "sha256": corpus.corpus_hash(texts)},
                "shard_rows": shard_rows, "reference": "ref", "teachers": entries}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return {"ref": reference.astype(np.float16).astype(np.float64),
            "narrow": teacher.astype(np.float16).astype(np.float64)}


def test_alignment_report_is_out_of_sample_and_drops_incomplete_chunks(tmp_path):
    data = synthetic_extraction(tmp_path, np.random.default_rng(2))
    (tmp_path / "narrow" / "shard-00003.safetensors").unlink()  # chunk 3 lacks a teacher
    out = tmp_path / "align"
    # Few fit rows for 12 x 24 parameters: the in-sample cosine flatters, the held-out one must not.
    assert align.main(["--extract", str(tmp_path), "--out", str(out), "--fit-rows", "40",
                       "--holdout-rows", "300", "--seed", "5"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["chunks_dropped"] == [3] and report["consensus_rows"] == 500

    picks = align.stratified_rows({c: 100 for c in (0, 1, 2, 4, 5)}, 40, 300, 5)
    held = np.concatenate([c * 100 + picks[c][1] for c in (0, 1, 2, 4, 5)])
    maps = load_file(str(out / "maps.safetensors"))
    mapped = data["narrow"][held] @ maps["A_1"] + maps["b_1"]
    expected = align.row_cosines(mapped, data["ref"][held]).mean()
    narrow = report["teachers"]["narrow"]
    assert narrow["holdout_cosine_after"] == pytest.approx(expected, abs=1e-5)
    assert narrow["fit_cosine_after"] > narrow["holdout_cosine_after"] + 0.05
    assert narrow["holdout_cosine_before"] is None  # widths differ

    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["chunk"] for s in manifest["shards"]] == [0, 1, 2, 4, 5]
    consensus = load_file(str(out / "consensus" / "shard-00004.safetensors"))["embeddings"]
    rows = slice(400, 500)
    expected = align.consensus([data["ref"][rows], data["narrow"][rows] @ maps["A_1"] + maps["b_1"]])
    np.testing.assert_allclose(consensus, expected, atol=2e-3)  # float16 storage
    assert not (out / "consensus" / "shard-00003.safetensors").exists()


# ---- extraction: resumption and data parallelism --------------------------------------------------------------------

def test_extraction_writes_a_complete_manifest(extraction):
    manifest = json.loads((extraction / "manifest.json").read_text())
    assert manifest["corpus"]["rows"] == 200 and manifest["reference"] == "teacher-a"
    assert [(t["name"], t["dim"], len(t["shards"])) for t in manifest["teachers"]] == [
        ("teacher-a", 48, 5), ("teacher-b", 32, 5)]
    shard = load_file(str(extraction / manifest["teachers"][1]["shards"][-1]))["embeddings"]
    assert shard.shape == (200 - 4 * 48, 32) and shard.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(shard.astype(np.float32), axis=1), 1, atol=2e-3)


def test_extraction_resumes_after_kill_with_identical_shards(tmp_path, extraction, tiny_teachers, caption_sample):
    out = tmp_path / "run"
    process = run_tool("captionbert.extract", *extract_args(out, tiny_teachers, caption_sample))
    kill_when(process, out / "teacher-a" / "shard-00001.safetensors")
    assert not (out / "manifest.json").exists()
    finish(run_tool("captionbert.extract", *extract_args(out, tiny_teachers, caption_sample)))
    assert shard_bytes(out) == shard_bytes(extraction) and len(shard_bytes(out)) == 10


def test_two_process_extraction_equals_one(tmp_path, extraction, tiny_teachers, caption_sample):
    out = tmp_path / "run"
    result = torchrun("-m", "tools.captionbert.extract", *extract_args(out, tiny_teachers, caption_sample))
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["process-0", "process-1"]
    assert shard_bytes(out) == shard_bytes(extraction)
    assert json.loads((out / "manifest.json").read_text())["teachers"] == \
        json.loads((extraction / "manifest.json").read_text())["teachers"]


def test_extraction_refuses_to_resume_another_corpus(tmp_path, extraction, tiny_teachers, caption_sample):
    other = tmp_path / "other.jsonl"
    corpus.write_texts(other, corpus.read_texts(caption_sample)[:50])
    from tools.captionbert import extract

    with pytest.raises(SystemExit, match="other settings"):
        extract.main(["--out", str(extraction), "--teacher", str(tiny_teachers[0]), "--corpus", str(other),
                      "--shard-rows", "48"])


# ---- distillation ---------------------------------------------------------------------------------------------------

DISTILL = ["--init", "scratch", "--steps", 24, "--batch-size", 16, "--validation-rows", 20, "--validate-every", 8,
           "--checkpoint-every", 8, "--log-every", 4, "--warmup-steps", 4, "--max-length", 64]


def test_distillation_resumes_exactly_after_kill(tmp_path, alignment, tiny_student):
    common = ["--align", alignment, "--model", tiny_student, *DISTILL]
    finish(run_tool("captionbert.train", "--out", tmp_path / "straight", *common))
    process = run_tool("captionbert.train", "--out", tmp_path / "killed", *common)
    kill_when(process, tmp_path / "killed" / "checkpoint-distill.pt")
    output = finish(run_tool("captionbert.train", "--out", tmp_path / "killed", *common))
    assert "resuming" in output
    straight = load_file(str(tmp_path / "straight" / "final" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "killed" / "final" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    for key in straight:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)
    history = json.loads((tmp_path / "killed" / "metrics.json").read_text())["history"]
    assert [p["step"] for p in history["train"]] == [4, 8, 12, 16, 20, 24]


def test_distillation_learns_the_consensus_and_records_itself(tmp_path, alignment, tiny_student):
    from tools.captionbert import train as captionbert_train

    out = tmp_path / "run"
    assert captionbert_train.main(["--align", str(alignment), "--out", str(out), "--model", str(tiny_student),
                                   *map(str, DISTILL)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    validation = metrics["history"]["validation"]
    assert validation[-1]["cosine"] > validation[0]["cosine"]  # the student moves towards the consensus
    train = metrics["history"]["train"]
    assert train[-1]["loss"] < train[0]["loss"]
    assert (out / "loss_curve.png").stat().st_size > 10_000
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # The cpu preset stores final/ in float16, which loads as float32, and scores the stored weights too.
    with safe_open(str(out / "final" / "model.safetensors"), "pt") as stored:
        assert {stored.get_slice(key).get_dtype() for key in stored.keys()} == {"F16"}
    assert json.loads((out / "final" / "config.json").read_text())["dtype"] == "float32"
    assert metrics["save_dtype"] == "float16"
    assert abs(metrics["stored_validation_cosine"] - validation[-1]["cosine"]) < 1e-3
    assert metrics["stored_validation_cosine"] != validation[-1]["cosine"]  # rounded, not the float32 weights
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "ok" and run["git_commit"]
    with pytest.raises(SystemExit, match="another config"):  # resuming with other options is refused
        captionbert_train.main(["--align", str(alignment), "--out", str(out), "--model", str(tiny_student),
                                *map(str, DISTILL[:-2]), "--max-length", "32"])


def selectable_teacher(folder):
    """(folder, model): a random 2-layer BertModel the tiny student can be weight-selected from (head width 16, 80
    positions), with the real uncased tokenizer."""
    import shutil

    from transformers import BertConfig, BertModel

    from helpers import CAPTIONBERT

    torch.manual_seed(3)
    teacher = BertModel(BertConfig(vocab_size=30522, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                                   intermediate_size=96, max_position_embeddings=80), add_pooling_layer=False)
    teacher.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CAPTIONBERT / name, Path(folder) / name)
    return Path(folder), teacher.eval()


def test_distillation_from_weight_selection_records_its_init_and_trained_length(tmp_path, alignment, tiny_student):
    """--init select starts from the teacher's selected weights (at a learning rate too small to move them, the final
    weights are those weights) and says so in config.json, metrics.json and the student's config."""
    from safetensors.torch import load_file as load_torch

    from tools.captionbert import train as captionbert_train

    teacher_folder, teacher = selectable_teacher(tmp_path / "teacher")
    out = tmp_path / "run"
    options = ["--align", str(alignment), "--model", str(tiny_student), *map(str, DISTILL[:-2]), "--max-length", "32",
               "--init", "select", "--init-teacher", str(teacher_folder), "--init-texts", "40",
               "--learning-rate", "1e-12", "--precision", "fp32", "--save-dtype", "float32"]
    assert captionbert_train.main(["--out", str(out), *options]) == 0
    init = json.loads((out / "metrics.json").read_text())["init"]
    assert init["kind"] == "select" and init["selection"] == "importance" and init["importance_texts"] == 40
    assert init["tokens_mapped"] == 30522 and init["positions_from_teacher"] == 80 and len(init["dims"]) == 32
    assert json.loads((out / "config.json").read_text())["init"] == "select"
    student_config = json.loads((out / "final" / "config.json").read_text())
    assert student_config["trained_length"] == 80  # the teacher's positions, beyond the 32 trained on
    weights = load_torch(str(out / "final" / "model.safetensors"))
    dims = torch.tensor(init["dims"])
    embeddings = teacher.embeddings
    expected = embeddings.position_embeddings.weight[:, dims] + embeddings.token_type_embeddings.weight[0, dims]
    torch.testing.assert_close(weights["embeddings.position_embeddings.weight"][:80], expected, atol=1e-6, rtol=0)
    scratch = tmp_path / "scratch"
    assert captionbert_train.main(["--out", str(scratch), "--align", str(alignment), "--model", str(tiny_student),
                                   *map(str, DISTILL[:-2]), "--max-length", "32"]) == 0
    metrics = json.loads((scratch / "metrics.json").read_text())
    assert metrics["init"] == {"kind": "scratch"} and metrics["trained_length"] <= 32
    assert json.loads((scratch / "final" / "config.json").read_text())["trained_length"] == metrics["trained_length"]


# ---- end to end -----------------------------------------------------------------------------------------------------

def test_pipeline_end_to_end_exports_a_loadable_folder_with_a_generated_card(tmp_path, alignment, extraction,
                                                                             tiny_teachers, tiny_student, data_dir,
                                                                             monkeypatch):
    from tools.captionbert import train as captionbert_train
    from tools.captionbert import card as captionbert_card
    from tools.captionbert import export as captionbert_export
    from tools.captionbert import long_inputs

    monkeypatch.setattr(encoders.teachers, "CACHE", tmp_path / "cache")  # the model2vec table of the tiny teacher

    distill = tmp_path / "distill"
    teacher_folder, _ = selectable_teacher(tmp_path / "select-from")
    assert captionbert_train.main(["--align", str(alignment), "--out", str(distill), "--model", str(tiny_student),
                                   *map(str, DISTILL), "--init", "select", "--init-teacher", str(teacher_folder),
                                   "--init-texts", "64"]) == 0
    eval_dir = tmp_path / "eval"
    assert evaluate.main(["--out", str(eval_dir), "--gauge-captions", "100",
                          "--encoder", f"captionbert-8192-v2={distill / 'final'}",
                          "--encoder", f"{captionbert_card.FROM_SCRATCH}={distill / 'final'}",
                          "--encoder", f"{captionbert_card.STATIC}=model2vec:{tiny_teachers[0]}",
                          "--encoder", str(tiny_teachers[0]), "--encoder", str(tiny_teachers[1]),
                          "--encoder", f"{captionbert_card.FOR_SCALE}={tiny_teachers[1]}"]) == 0  # a tiny stand-in
    long_dir = tmp_path / "long"
    assert long_inputs.main(["--model", str(distill / "final"), "--teacher", str(tiny_teachers[0]),
                             "--data-dir", str(data_dir), "--out", str(long_dir)]) == 0
    hub = captionbert_copy(tmp_path / "hub-folder", **{**TINY_CAPTIONBERT, "output_dim": 48})
    def export_argv(evaluation):
        return ["--extract", str(extraction), "--align", str(alignment), "--distill", str(distill), "--eval",
                str(evaluation), "--long", str(long_dir), "--out", str(tmp_path / "export"), "--hub", str(hub)]

    without = tmp_path / "eval-without-for-scale"  # the card compares the model with all-MiniLM-L6-v2's row
    shutil.copytree(eval_dir, without)
    metrics = json.loads((without / "metrics.json").read_text())
    del metrics[captionbert_card.FOR_SCALE]
    (without / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(SystemExit, match="has no row 'all-MiniLM-L6-v2'"):
        captionbert_export.main(export_argv(without))
    assert captionbert_export.main(export_argv(eval_dir)) == 0
    target = tmp_path / "export" / "captionbert-8192-v2"  # built inside the export run, from hub's own files
    assert_card_from_records(tmp_path / "export", target)
    # publish holds the build's card to its export run's records, not to file times (a `cp` copy keeps no order)
    exported_card = (target / "README.md").read_text()
    os.utime(target / "README.md", (0, 0))
    assert publish.card_problems(target) == []
    (target / "README.md").write_text(exported_card + "\nAn edit after the export.\n")
    assert publish.card_problems(target) == [f"README.md is not what the run records of {tmp_path / 'export'} give: "
                                             "run `make cards` (a Hub folder) or the export again (a build)"]
    (target / "README.md").write_text(exported_card)
    assert not (hub / "model.safetensors").exists()  # the folder it started from is left as it was

    assert (target / "model.safetensors").read_bytes() == (distill / "final" / "model.safetensors").read_bytes()
    card = (target / "README.md").read_text()
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    student = metrics["captionbert-8192-v2"]
    row = next(line for line in card.splitlines() if line.startswith("| **captionbert-8192-v2**"))
    assert f"{student['mean']:.4f}" in row and f"{student['STS12']:.4f}" in row and f"{student['erank']:.1f}" in row
    report = json.loads((alignment / "report.json").read_text())
    assert f"{report['teachers']['teacher-b']['holdout_cosine_after']:.3f}" in card
    cells = {cell.strip() for line in card.splitlines() if line.startswith("|") for cell in line.split("|")}
    assert not cells & {"None", "nan"} and "{" not in card.split("## Use")[0]
    trained_length = json.loads((distill / "final" / "config.json").read_text())["trained_length"]
    assert json.loads((target / "config.json").read_text())["trained_length"] == trained_length == 80
    assert f"`trained_length` = {trained_length:,} in config.json" in card
    assert "the same budget from a random init" in card and "static distillation of the reference teacher" in card
    assert "**Training.** Started from select-from's own weights by weight selection (`--init select`" in card
    assert "teachers, starting from select-from's own weights (weight selection;" in card  # the first sentence too
    assert "from scratch from" not in card
    assert "positions come from the teacher" in card
    long_rows = json.loads((long_dir / "metrics.json").read_text())["rows"]
    assert f"| first 64 | {long_rows['64']['cosine']:.4f} | {long_rows['64']['top1']:.4f} |" in card

    # The card must refuse numbers that belong to other weights.
    (distill / "final" / "model.safetensors").write_bytes(b"0" * 10)
    with pytest.raises(SystemExit, match="scored other weights"):
        captionbert_export.main(["--extract", str(extraction), "--align", str(alignment), "--distill", str(distill),
                                 "--eval", str(eval_dir), "--out", str(tmp_path / "export-2"), "--hub", str(hub)])


def test_silver_pairs_are_scored_by_the_teachers_cosine(tmp_path, extraction):
    from tools.captionbert.amoe import pairs, silver

    out = tmp_path / "silver"
    assert silver.main(["--extract", str(extraction), "--out", str(out), "--anchors", "40",
                        "--neighbours", "3"]) == 0
    rows = [line.split("\t") for line in (out / "silver.tsv").read_text().splitlines()]
    assert len(rows) == 80 and all(a != b for a, b, _ in rows)
    manifest = json.loads((extraction / "manifest.json").read_text())
    teacher = next(t for t in manifest["teachers"] if t["name"] == manifest["reference"])
    embeddings = pairs.load_embeddings(extraction, teacher)
    row_of = {text: i for i, text in enumerate(corpus.read_texts(extraction / "texts.jsonl"))}
    first, second, score = rows[0]
    assert float(score) == pytest.approx(float(embeddings[row_of[first]] @ embeddings[row_of[second]]), abs=1e-4)
    near, far = [float(s) for _, _, s in rows[:40]], [float(s) for _, _, s in rows[40:]]
    assert min(near) > np.median(far)  # nearest-neighbour partners score above random ones


def test_an_extraction_is_arm_data_of_short_texts_with_the_reference_teachers_embeddings(extraction, data_dir):
    from tools.captionbert.amoe import pairs

    data = pairs.load(str(extraction), data_dir)
    assert data.name == "teacher" and data.kind == "embedded" and len(data) == len(data.target) > 0
    texts = corpus.read_texts(extraction / "texts.jsonl")
    assert all(len(text.split()) <= pairs.EMBEDDED_MAX_WORDS for text in data.first)
    short = [t for t in texts if len(t.split()) <= pairs.EMBEDDED_MAX_WORDS]
    forbidden = pairs.forbidden_texts(data_dir)  # held-out and validation texts: the corpus holds validation ones
    assert len(data) + data.dropped_held_out == len(short)
    assert data.dropped_held_out == sum(corpus.normalised(t) in forbidden for t in short)
    assert not {corpus.normalised(t) for t in data.first} & forbidden
    manifest = json.loads((extraction / "manifest.json").read_text())
    teacher = next(t for t in manifest["teachers"] if t["name"] == manifest["reference"])
    every = pairs.load_embeddings(extraction, teacher)
    row = texts.index(data.first[-1])
    np.testing.assert_allclose(data.target[-1], every[row])
    np.testing.assert_allclose(np.linalg.norm(data.target, axis=1), 1, atol=1e-5)


@pytest.fixture(scope="session")
def arm_trunk(tmp_path_factory):
    """A random tiny captionbert that takes arms (64 dims for the dispatch keys) with the reference teacher's width."""
    return saved_arm_trunk(tmp_path_factory.mktemp("arm-trunk") / "captionbert", output_dim=48)


@pytest.mark.slow
def test_the_teacher_arm_pulls_the_trunk_towards_the_reference_teachers_embeddings(tmp_path, extraction, data_dir,
                                                                                    arm_trunk):
    from transformers import AutoModel

    from tools.captionbert.amoe import pairs, solo

    trunk = arm_trunk
    out = tmp_path / "teacher-seed0"
    assert solo.main(["--data", str(extraction), "--steps", "40", "--learning-rate", "0.01", "--no-sts8",
                      "--validation-rows", "50", "--model", str(trunk), "--data-dir", str(data_dir),
                      "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["name"] == "teacher"
    data = pairs.load(str(extraction), data_dir)
    model = AutoModel.from_pretrained(trunk, trust_remote_code=True)
    bare = (model.encode(data.first) * data.target).sum(axis=1).mean()
    model.attach_amoe(path=out / "amoe")
    with_arm = (model.encode(data.first) * data.target).sum(axis=1).mean()
    assert with_arm > bare + 0.05, (bare, with_arm)


def test_a_sample_of_the_corpus_keeps_corpus_order_and_is_seeded(tmp_path):
    texts = [f"text {i}" for i in range(100)]
    corpus.write_texts(tmp_path / "c.jsonl", texts)
    sampled, description = load_corpus(Config(out=tmp_path / "x", corpus=tmp_path / "c.jsonl", sample=30))
    assert len(set(sampled)) == 30 and sampled == sorted(sampled, key=texts.index)
    assert description["sample"]["rows"] == 30
    assert load_corpus(Config(out=tmp_path / "x", corpus=tmp_path / "c.jsonl", sample=30))[0] == sampled
    with pytest.raises(SystemExit, match="has 100 texts"):
        load_corpus(Config(out=tmp_path / "x", corpus=tmp_path / "c.jsonl", sample=101))


def test_long_input_evaluation_scores_windows_against_the_whole_text(tmp_path, tiny_captionbert, data_dir):
    from helpers import tiny_teacher
    from tools.captionbert import long_inputs

    assert long_inputs.window_ids([[101, 5, 6, 7, 8, 102], [101, 5, 102]], 4) == [[101, 5, 6, 102],
                                                                                       [101, 5, 102]]
    folder, _ = tiny_captionbert
    teacher = tiny_teacher(tmp_path / "teacher", 24, seed=4)  # the tiny student's output width
    out = tmp_path / "long"
    assert long_inputs.main(["--model", str(folder), "--teacher", str(teacher), "--windows", "16", "64",
                             "--data-dir", str(data_dir), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["texts"] == len(corpus.split_imageinwords(data_dir)[1]) >= 500
    assert list(metrics["rows"]) == ["16", "64", "whole"] and metrics["rows"]["whole"]["tokens"] == 8192
    assert metrics["tokens"]["median"] > 64  # long texts: the windows cut them
    for row in metrics["rows"].values():
        assert -1 <= row["cosine"] <= 1 and 0 <= row["top1"] <= 1
    assert metrics["rows"]["16"] != metrics["rows"]["whole"]
    assert "| first 16 |" in (out / "results.md").read_text()


def test_an_alignment_folder_gives_the_consensus_arm_and_one_arm_per_teacher(alignment, extraction, data_dir):
    """tools/captionbert/amoe/pairs.py: the consensus arm fits the consensus shards, a teacher's arm that teacher's
    embeddings through its own map into the reference's frame, each row beside the corpus text it embeds."""
    from tools.captionbert.amoe import pairs

    extracted = json.loads((extraction / "manifest.json").read_text())
    row = {text: i for i, text in enumerate(corpus.read_texts(extraction / extracted["corpus"]["file"]))}
    shards = json.loads((alignment / "manifest.json").read_text())["shards"]
    consensus = np.concatenate([load_file(str(alignment / s["file"]))["embeddings"] for s in shards])
    with safe_open(str(alignment / "maps.safetensors"), "np") as maps:
        names = maps.metadata()["teachers"].split(",")
        matrix, bias = maps.get_tensor("A_1"), maps.get_tensor("b_1")
    narrow = next(t for t in extracted["teachers"] if t["name"] == names[1])

    arm = pairs.load(str(alignment), data_dir)
    index = [row[text] for text in arm.first]
    assert arm.name == "consensus" and arm.kind == "embedded" and len(arm) > 150
    expected = consensus[index].astype(np.float32)
    np.testing.assert_allclose(arm.target, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    arm = pairs.load(str(alignment), data_dir, names[1])
    assert arm.name == names[1] and [row[text] for text in arm.first] == index
    expected = pairs.load_embeddings(extraction, narrow)[index] @ matrix + bias
    np.testing.assert_allclose(arm.target, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)

    with pytest.raises(ValueError, match="it aligned"):
        pairs.load(str(alignment), data_dir, "no-such-teacher")
    with pytest.raises(ValueError, match="only from an alignment folder"):
        pairs.load(str(extraction), data_dir, names[1])


def test_levers_score_every_arm_against_the_bare_trunk_in_one_harness(tmp_path, alignment, extraction, data_dir,
                                                                       arm_trunk, monkeypatch):
    from tools.captionbert import card as captionbert_card
    from tools.captionbert.amoe import levers

    with safe_open(str(alignment / "maps.safetensors"), "np") as maps:
        narrow = maps.metadata()["teachers"].split(",")[1]
    monkeypatch.setattr(levers, "LEVERS", {
        "teacher": ("recipe", "the reference teacher", ["--data", "{extract}", "--steps", "3"]),
        "consensus": ("1 teacher arms", "the consensus", ["--data", "{align}", "--steps", "3"]),
        "narrow": ("1 teacher arms", "the narrow teacher", ["--data", "{align}", "--teacher", narrow, "--steps", "2"]),
        "caption": ("2 pair arms", "Flickr8k captions", ["--data", "caption", "--steps", "2"])})
    monkeypatch.setattr(levers, "COLLECTIVES", {"both": ("1 teacher arms", "both teachers' arms",
                                                         ["teacher", "narrow"])})
    out = tmp_path / "levers"
    args = ["--extract", str(extraction), "--align", str(alignment), "--model", str(arm_trunk), "--data-dir",
            str(data_dir), "--tasks", "BIOSSES", "STS-B", "--validation-rows", "100", "--out", str(out)]
    assert levers.main(args) == 0
    record = json.loads((out / "levers.json").read_text())
    bare = record["trunk"]
    assert record["complete"]
    assert [row["name"] for row in record["rows"]] == ["teacher", "consensus", "narrow", "caption", "both"]
    assert [row["steps"] for row in record["rows"]] == [3, 3, 2, 2, "3 + 2 + 60 dispatch"]
    *solo_rows, both = record["rows"]
    collective = json.loads((out / "both" / "metrics.json").read_text())
    assert collective["roster"] == ["teacher", narrow] and collective["trunk_hash"] == bare["trunk_hash"]
    assert both["training_minutes"] == pytest.approx(solo_rows[0]["training_minutes"] + solo_rows[2]
                                                     ["training_minutes"] + collective["training_minutes"])
    assert both["sts8"] == collective["sts8"]["mean"] and both["validation"] == collective["validation"]["mean"]
    arms = {"teacher": "teacher", "consensus": "consensus", "narrow": narrow, "caption": "caption"}
    for row in solo_rows:
        solo = json.loads((out / row["name"] / "metrics.json").read_text())
        assert solo["trunk_hash"] == bare["trunk_hash"] and solo["name"] == arms[row["name"]]
        assert row["sts8_gain"] == pytest.approx(solo["sts8"]["mean"] - bare["sts8"]["mean"]) and row["tasks"] == 2
        assert row["trunk_validation"] == bare["validation"]["mean"]  # every arm beside the same trunk mean
    assert solo_rows[-1]["validation"] is None  # the caption arm trains on Flickr8k: not judged on it
    table = captionbert_card.levers_table(record).splitlines()
    assert len(table) == 2 + 1 + 5 and "not judged" in table[-2]  # header, the trunk, the levers

    finished = {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.json")}
    assert levers.main(args) == 0  # the same command again trains and scores nothing
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.json")} == finished
    with pytest.raises(SystemExit, match="not a finished alignment"):
        levers.main([*args[:2], "--align", str(extraction), *args[4:]])
