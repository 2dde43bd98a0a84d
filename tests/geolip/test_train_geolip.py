"""tools/geolip/train.py, tools/geolip/evaluate.py and tools/geolip/export.py end to end on a tiny frozen BERT base
and a tiny teacher (real long descriptions); the spliced-tails groups (real descriptions, the real uncased
tokenizer); the retrieval measures on known cases."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer

from helpers import ROOT, assert_card_from_records, tiny_teacher, torchrun
from tools import corpus, runs, teachers
from tools.geolip import evaluate as geolip_evaluate
from tools.geolip import card as geolip_card
from tools.geolip import export as geolip_export
from tools.geolip import train as geolip_train
from tools.geolip import data as geolip_data
from tools.geolip import metrics as geolip_metrics
from tools.training import save_stored


def tiny_run(tmp_path, data_dir, **options):
    """(base folder, out folder, argv) of train.main on a tiny frozen base (32 wide) and teacher (48), 24 held-out
    texts and a tiny memory; options: more --flags (name=value)."""
    base, teacher = tiny_teacher(tmp_path / "base", 32, seed=3), tiny_teacher(tmp_path / "teacher", 48, seed=4)
    out = tmp_path / "run"
    argv = ["--out", str(out), "--data-dir", str(data_dir), "--base", str(base), "--teacher", str(teacher),
            "--validation-texts", "24", "--cv-samples", "4", "--fusion-layers", "2", "--memory-slots", "4",
            "--memory-heads", "2"]
    for name, value in options.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return base, out, argv


@pytest.mark.slow
def test_two_processes_train_one_run_that_the_main_process_alone_records(tmp_path, data_dir):
    """Data-parallel (torchrun, two CPU processes, tools/training.py's loop): the run ends with one record, one
    TensorBoard file and a loadable folder, as a one-process run does."""
    _, out, argv = tiny_run(tmp_path, data_dir, flickr_captions=16, steps=4, batch_size=4, validate_every=2,
                            init_texts=16, cv_target_texts=3, splice_groups=3, hard_negative_groups=0)
    result = torchrun("-m", "tools.geolip.train", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p["step"] for p in runs.read_json(out / "metrics.json")["history"]["validation"]] == [2, 4]
    assert runs.read_json(out / "run.json")["status"] == "ok" and len(list((out / "tensorboard").iterdir())) == 1
    model = AutoModel.from_pretrained(out / "final", trust_remote_code=True)
    assert model.encode(["a dog runs on the beach"]).shape == (1, 32)


@pytest.mark.slow
def test_tiny_run_trains_evaluates_and_exports_a_loadable_folder(tmp_path, data_dir):
    # batches of 4 cannot hold the preset's hard-negative groups of 10: test_hard_negative_groups_of_training_... does
    base, out, argv = tiny_run(tmp_path, data_dir, flickr_captions=16, steps=4, batch_size=4, validate_every=2,
                               checkpoint_every=2, log_every=1, init_texts=16, cv_target_texts=3, splice_groups=3,
                               hard_negative_groups=0, save_dtype="float32")  # the base bit for bit (the preset: fp16)
    assert geolip_train.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["validation_texts"] >= 24 and "final" not in metrics  # the rows are evaluate's
    init = metrics["projector_init"]
    assert init["cosine_after"] > init["cosine_before"]  # Procrustes beats a random projector
    assert metrics["cv_target"]["texts"] == 3 and metrics["cv_target"]["value"] > 0
    assert [p["step"] for p in metrics["history"]["validation"]] == [2, 4]
    assert all(set(p) >= {"info_nce", "procrustes", "cv", "loss"} for p in metrics["history"]["train"])
    assert (out / "training_curve.png").stat().st_size > 0 and list((out / "tensorboard").iterdir())
    checkpoint = torch.load(out / "checkpoint-memory.pt", weights_only=False)
    assert checkpoint["step"] == 4 and not any(key.startswith("base.") for key in checkpoint["model"])
    model = AutoModel.from_pretrained(out / "final", trust_remote_code=True)
    assert model.encode(["a dog runs on the beach"]).shape == (1, 32)
    assert not set(runs.LOAD_LOCATION) & set(runs.read_json(out / "final" / "tokenizer_config.json"))
    base_weights = AutoModel.from_pretrained(base).state_dict()
    assert all(torch.equal(value, model.base.state_dict()[key]) for key, value in base_weights.items())  # frozen
    assert geolip_train.main(argv) == 0  # complete: nothing to do

    # the evaluation scores final/ against every baseline on the same held-out gallery and spliced groups
    assert geolip_evaluate.main(["--train", str(out), "--out", str(tmp_path / "eval")]) == 0
    evaluation = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluation["gallery"] == metrics["validation_texts"]
    assert evaluation["splice"] == {"k": 10, "groups": 3, "skipped": 0} and evaluation["base_window"] == 77
    assert evaluation["whole_window"] == 512  # a plain BERT folder: its position limit
    assert list(evaluation["rows"]) == list(geolip_metrics.ROWS)
    for row in evaluation["rows"].values():
        assert 0 <= row["m_acc"] <= 1 and 0 <= row["spliced_top1"] <= 1
        assert abs(row["mean_cosine"]) <= 1 + 1e-6  # float32 cosines of unit vectors overshoot 1 by rounding
    # the rows that stop at the window see one text per group: exactly 1 in 10; the teacher finds itself
    rows = evaluation["rows"]
    assert rows["window"]["spliced_top1"] == rows["first_segment"]["spliced_top1"] == 1 / 10
    assert rows["window_linear"]["spliced_top1"] == 1 / 10
    assert rows["memory_linear"] != rows["memory"]  # the same embeddings through another head
    assert rows["teacher"]["m_acc"] == rows["teacher"]["spliced_top1"] == 1
    # the folder as users load it scores what the run's last validation measured in its own process
    assert rows["memory"]["m_acc"] == pytest.approx(metrics["history"]["validation"][-1]["m_acc"], abs=1e-5)
    assert evaluation["covered_tokens"] == 452 and evaluation["held_out_segments"]["mean"] > 1

    # the export fills a Hub folder that holds only the folder's own code, then writes the card from the records
    folder = tmp_path / "hub"
    folder.mkdir()
    for path in (ROOT / "geolip-clip-ctx576").glob("*.py"):
        shutil.copy(path, folder)
    assert geolip_export.main(["--train", str(out), "--eval", str(tmp_path / "eval"), "--out",
                               str(tmp_path / "export"), "--to", str(folder), "--parity-texts", "4"]) == 0
    export = json.loads((tmp_path / "export" / "metrics.json").read_text())
    assert export["max_difference"] <= 1e-5 and export["hidden_size"] == 32 and export["teacher_dim"] == 48
    assert export["clip_l_trainable"] == 36_868_614 + 768 * 768  # the readout's residual projection
    card = (folder / "README.md").read_text()
    assert f"| {evaluation['rows']['memory']['m_acc']:.3f} |" in card and "not the CLIP-L model" in card
    assert "452 distinct tokens" in card and not (folder / "model.safetensors").exists()
    assert sorted(export["files_sha256"]) == ["base.safetensors", "memory.safetensors"]
    assert "CLIP-sized window of 77 tokens" in card and "spliced-tails top-1 (of 10, 3 groups)" in card
    for name in geolip_metrics.ROWS:  # every row, in the table
        assert f"| {geolip_card.row_name(name, evaluation)} | {evaluation['rows'][name]['m_acc']:.3f} |" in card
    assert export["goals"]["m_acc_above_window"]["met"] == (rows["memory"]["m_acc"] > rows["window"]["m_acc"])
    assert export["goals"]["spliced_top1"]["value"] == rows["memory"]["spliced_top1"]
    for name in geolip_card.BASELINES:  # said plainly wherever the memory does not beat a baseline on m_acc
        lost = rows["memory"]["m_acc"] <= rows[name]["m_acc"]
        assert (f"{geolip_card.row_name(name, evaluation)} on m_acc (" in card) == lost
    assert_card_from_records(tmp_path / "export", folder)

    # with an ablation run (here the same evaluation, for the code path) the card compares them and names the shipped
    assert geolip_export.main(["--train", str(out), "--eval", str(tmp_path / "eval"), "--ablation",
                               str(tmp_path / "eval"), "--out", str(tmp_path / "export-ablation"), "--to", str(folder),
                               "--parity-texts", "2"]) == 0
    card = (folder / "README.md").read_text()
    assert "## Ablation" in card and "This folder ships the 18 / 14 run. Against the\n18 / 14 run, its memory " \
        "measures the same on m_acc, mean cosine to the teacher, spliced-tails top-1." in card
    above = rows["memory"]["m_acc"] > rows["window"]["m_acc"]  # the ablation's memory against its own window row
    assert f"that memory's m_acc ({rows['memory']['m_acc']:.3f}) is {'still' if above else 'not'} above" in card
    assert_card_from_records(tmp_path / "export-ablation", folder)
    loaded = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert export["embedding_space"] == loaded.embedding_space and export["embedding_space_covers_config"]
    loaded.config.segment_stride += 1  # every tensor keeps its shape: only the config says the space is another
    assert loaded.embedding_space != export["embedding_space"]
    (tmp_path / "eval" / "metrics.json").write_text(json.dumps({**evaluation, "weights_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="other weights"):
        geolip_export.main(["--train", str(out), "--eval", str(tmp_path / "eval"), "--out", str(tmp_path / "x"),
                            "--to", str(folder)])


@pytest.mark.slow
def test_hard_negative_groups_of_training_texts_join_every_batch(tmp_path, data_dir):
    """--hard-negative-groups: spliced groups of training texts (never held out), embedded by the teacher into their
    own cache, --groups-per-batch of them in every batch (here the whole batch). A batch that cannot hold its groups,
    or more groups a batch than there are, is refused. (With the optional cosine term, which then enters the loss and
    its history.)"""
    base, out, argv = tiny_run(tmp_path, data_dir, flickr_captions=0, steps=2, batch_size=6, splice_k=3,
                               splice_groups=2, hard_negative_groups=2, groups_per_batch=2, init_texts=8,
                               cv_target_texts=2, cosine_weight=0.5)
    with pytest.raises(SystemExit, match="hard-negative-groups"):
        geolip_train.main([*argv, "--batch-size", "5"])
    with pytest.raises(SystemExit, match="more than the 2 hard-negative groups"):
        geolip_train.main([*argv, "--groups-per-batch", "3", "--batch-size", "9"])
    with pytest.raises(SystemExit, match="must be >= 0"):
        geolip_train.main([*argv, "--cosine-weight", "-1"])
    assert geolip_train.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["hard_negative_groups"] == 2 and 0 < metrics["history"]["train"][-1]["cosine"] <= 2
    config = geolip_data.training_config(out)
    training, validation = geolip_data.split_texts(config)
    hard, _ = geolip_data.spliced_tails(AutoTokenizer.from_pretrained(base), training, 77, 3, 2, config.seed + 1)
    cached = geolip_data.cached_teacher_embeddings(config, hard, part="hard-negatives-2")
    assert len(hard) == 6 and cached.shape == (6, 48)
    held_out_prefixes = {text[:200] for text in validation}
    assert not any(text[:200] in held_out_prefixes for text in hard)  # built from training texts alone


@pytest.mark.slow
def test_a_float16_save_stores_half_the_bytes_and_records_the_stored_weights_m_acc(tmp_path, data_dir):
    base, out, argv = tiny_run(tmp_path, data_dir, flickr_captions=0, steps=2, batch_size=4, init_texts=8,
                               cv_target_texts=2, splice_groups=2, hard_negative_groups=0, save_dtype="float16")
    with pytest.raises(SystemExit, match="--save-dtype must be one of"):
        geolip_train.main([*argv, "--save-dtype", "int8"])
    assert geolip_train.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for file in ("base.safetensors", "memory.safetensors"):
        with safe_open(out / "final" / file, "pt") as stored:
            assert {stored.get_tensor(name).dtype for name in stored.keys()} == {torch.float16}
    model = AutoModel.from_pretrained(out / "final", trust_remote_code=True)
    assert next(model.parameters()).dtype == torch.float32  # config.json: it computes in float32
    assert metrics["save_dtype"] == "float16"
    # the folder as users load it (the stored weights) scores the m_acc the run recorded for them
    assert geolip_evaluate.main(["--train", str(out), "--out", str(tmp_path / "eval")]) == 0
    evaluation = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluation["rows"]["memory"]["m_acc"] == pytest.approx(metrics["stored_validation_m_acc"], abs=1e-5)


def test_the_blend_weight_is_the_one_whose_map_brings_the_texts_closest_to_the_teacher():
    generator = torch.Generator().manual_seed(0)
    window, segment_mean = torch.randn(64, 16, generator=generator), torch.randn(64, 16, generator=generator)
    rotation = torch.linalg.qr(torch.randn(16, 16, generator=generator))[0]
    targets = geolip_metrics.blend(window, segment_mean, 0.25) @ rotation  # the 0.25 blend, in another frame
    weight, cosine = geolip_metrics.fit_blend_weight({"window": window, "segment_mean": segment_mean}, targets)
    assert weight == 0.25 and cosine == pytest.approx(1, abs=1e-5)


@pytest.mark.slow
def test_a_run_started_from_the_blend_fits_its_weight_on_training_texts_as_the_evaluation_s_blend_row(tmp_path,
                                                                                                   data_dir):
    """--start blend: the weight is fitted on the projector's training sample before the first step, saved in the
    model's config, and the evaluation fits the same weight for its blend row from the same training texts (the
    held-out gallery plays no part); the memory is then the blend plus what training added."""
    base, out, argv = tiny_run(tmp_path, data_dir, flickr_captions=0, steps=2, batch_size=4, init_texts=8,
                               cv_target_texts=2, splice_groups=2, hard_negative_groups=0, start="blend")
    with pytest.raises(SystemExit, match="--start must be window or blend"):
        geolip_train.main([*argv, "--start", "mean"])
    assert geolip_train.main(argv) == 0
    fitted = json.loads((out / "metrics.json").read_text())["projector_init"]["blend_weight"]
    assert AutoModel.from_pretrained(out / "final", trust_remote_code=True).config.blend_weight == fitted
    assert geolip_evaluate.main(["--train", str(out), "--out", str(tmp_path / "eval")]) == 0
    evaluation = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluation["blend_weight"] == evaluation["start_blend_weight"] == fitted
    assert "blend" in evaluation["rows"]
    # the frozen base in a file of its own: an untrained model on the same base stores it byte for byte the same
    config = geolip_data.training_config(out)
    untrained = geolip_data.build_model(config, 48)
    save_stored(untrained, tmp_path / "untrained", config.save_dtype)
    geolip_data.store_base_apart(tmp_path / "untrained")
    untrained, trained = tmp_path / "untrained", out / "final"
    assert (untrained / "base.safetensors").read_bytes() == (trained / "base.safetensors").read_bytes()
    assert (untrained / "memory.safetensors").read_bytes() != (trained / "memory.safetensors").read_bytes()


@pytest.mark.slow
def test_levers_train_and_evaluate_each_and_set_the_memory_against_every_no_training_reader(tmp_path, data_dir):
    """tools/geolip/levers.py on two levers at a tiny size: each a training run and its evaluation, levers.json a row
    each with the readers (both runs read 18-token segments: one segment_mean and one blend row) it does not beat."""
    from tools.geolip import levers

    _, _, argv = tiny_run(tmp_path, data_dir, flickr_captions=0, steps=2, batch_size=4, init_texts=8,
                          cv_target_texts=2, splice_groups=2, hard_negative_groups=0)
    options = [option for option in argv[argv.index("--data-dir"):]]  # every training option but --out
    assert levers.main(["--out", str(tmp_path / "levers"), "--only", "recipe", "window", "--teacher-cache",
                        str(tmp_path / "cache" / "teacher.npy"), *options]) == 0
    table = runs.read_json(tmp_path / "levers" / "levers.json")
    assert table["complete"] and [row["name"] for row in table["rows"]] == ["recipe", "window"]
    assert sorted(table["readers"]) == ["blend (18)", "first_segment", "segment_mean (18)", "window", "window_linear"]
    for row in table["rows"]:
        evaluation = runs.read_json(tmp_path / "levers" / f"{row['name']}-eval" / "metrics.json")
        memory = evaluation["rows"]["memory"]
        assert row["m_acc"] == memory["m_acc"] and row["steps"] == 2
        lost = [label for label, reader in table["readers"].items() if memory["m_acc"] <= reader["m_acc"]]
        assert [entry.split(" on ")[0] for entry in row["loses_to"] if " on m_acc " in entry] == lost
        assert row["linear"]["mean_cosine"] == evaluation["rows"]["memory_linear"]["mean_cosine"]


def test_retrieval_measures_on_known_cases():
    gallery = torch.eye(4)
    perfect = geolip_metrics.retrieval(gallery * 3, gallery)
    assert perfect == {"m_acc": 1.0, "recall_at_5": 1.0, "mrr": 1.0, "mean_cosine": pytest.approx(1.0)}
    shifted = geolip_metrics.retrieval(gallery.roll(1, dims=0), gallery)  # every query finds another row first
    assert shifted["m_acc"] == 0 and shifted["recall_at_5"] == 1.0 and shifted["mean_cosine"] == 0
    assert shifted["mrr"] == pytest.approx(0.5)  # its own row ties with the other two zeros: rank 2


def test_the_paper_preset_keeps_the_published_recipe_on_clip_s_77_token_window(tmp_path):
    """The paper preset (the Hub and a GPU) parses offline and stays the published CLIP-L / ModernBERT-large recipe,
    its readout and loss included, with CLIP's own 77-token window."""
    paper = geolip_train.parse_config(["--preset", "paper", "--out", str(tmp_path / "paper"),
                                       "--texts", str(tmp_path / "captions.txt")])
    assert (paper.base, paper.base_pooling, paper.base_window) == ("openai/clip-vit-large-patch14", "eos", 77)
    assert paper.teacher == "answerdotai/ModernBERT-large" and (paper.segment_size, paper.segment_stride) == (18, 14)
    assert (paper.readout_anchors, paper.hard_negative_groups, paper.cosine_weight) == ("none", 0, 0)


def test_the_model_is_built_in_eval_mode(tmp_path):
    """The projector's Procrustes initialisation and the baselines' maps embed before the loop sets modes: the
    base's dropout must already be off then."""
    config = geolip_data.Config(out=tmp_path, base=str(tiny_teacher(tmp_path / "base", 32, seed=3)),
                                fusion_layers=2, memory_slots=4, memory_heads=2)
    model = geolip_data.build_model(config, teacher_dim=48)
    assert not any(module.training for module in model.modules())


def test_the_teacher_cache_is_used_only_for_the_same_teacher_precision_and_texts(tmp_path):
    calls = []

    class CountingTeacher:
        def encode(self, texts):
            calls.append(list(texts))
            return torch.randn(len(texts), 4).numpy()

    shared = tmp_path / "shared" / "teacher.npy"
    config = geolip_data.Config(out=tmp_path / "a", teacher="t", teacher_cache=shared)
    first = geolip_data.teacher_embeddings(config, CountingTeacher(), ["one", "two"])
    other_run = geolip_data.Config(out=tmp_path / "b", teacher="t", teacher_cache=shared)
    assert (geolip_data.teacher_embeddings(other_run, CountingTeacher(), ["one", "two"]) == first).all()
    assert len(calls) == 1  # the second run read the shared cache
    for changed in (dataclasses.replace(config, teacher_precision="bf16"), dataclasses.replace(config, teacher="u")):
        geolip_data.teacher_embeddings(changed, CountingTeacher(), ["one", "two"])
    geolip_data.teacher_embeddings(config, CountingTeacher(), ["one", "three"])
    assert len(calls) == 4  # another precision, teacher or text list is embedded again
    assert geolip_data.cached_teacher_embeddings(config, ["one", "two"]) is None  # the file now holds the last


def test_a_teacher_pass_killed_between_chunks_resumes_at_its_last_saved_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(geolip_data, "TEACHER_CHUNK", 2)
    texts = [f"text {i}" for i in range(7)]
    seen = []

    class Teacher:
        def __init__(self, fail_at=None):
            self.fail_at = fail_at

        def encode(self, chunk):
            if len(seen) == self.fail_at:
                raise KeyboardInterrupt  # the kill
            seen.append(list(chunk))
            return np.array([[float(text.split()[1]), 1.0] for text in chunk], dtype=np.float32)

    config = geolip_data.Config(out=tmp_path, teacher="t")
    with pytest.raises(KeyboardInterrupt):
        geolip_data.teacher_embeddings(config, Teacher(fail_at=2), texts)
    assert seen == [texts[0:2], texts[2:4]] and geolip_data.cached_teacher_embeddings(config, texts) is None
    embeddings = geolip_data.teacher_embeddings(config, Teacher(), texts)
    assert seen[2:] == [texts[4:6], texts[6:7]]  # only the chunks not saved before the kill
    assert embeddings[:, 0].tolist() == list(range(7))
    assert (geolip_data.cached_teacher_embeddings(config, texts) == embeddings).all()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["teacher-texts.json", "teacher.npy"]
    # A partial pass of other texts is never resumed for these.
    with pytest.raises(KeyboardInterrupt):
        geolip_data.teacher_embeddings(config, Teacher(fail_at=len(seen) + 1), ["text 8", "text 9", "text 10"])
    seen.clear()
    geolip_data.teacher_embeddings(config, Teacher(), texts[:5])
    assert seen == [texts[0:2], texts[2:4], texts[4:5]]


@pytest.fixture(scope="module")
def held_out(data_dir):
    """Real held-out ImageInWords descriptions and all-MiniLM-L6-v2's (uncased WordPiece) tokenizer."""
    from transformers import AutoTokenizer

    texts = corpus.split_by_image(corpus.imageinwords_by_image(data_dir), 120, seed=0)[1]
    return texts, AutoTokenizer.from_pretrained(teachers.minilm_l6_folder())


def test_spliced_texts_share_their_first_base_window_tokens_exactly_and_differ_after(held_out):
    texts, tokenizer = held_out
    spliced, skipped = geolip_data.spliced_tails(tokenizer, texts, 77, 10, 8, seed=0)
    assert len(spliced) == 8 * 10 and skipped == 0
    for g in range(8):
        group = spliced[g * 10:(g + 1) * 10]
        tokens = tokenizer(group, verbose=False)["input_ids"]  # special tokens included, as the base reads them
        assert all(row[:77] == tokens[0][:77] for row in tokens)
        assert len({tuple(row[77:]) for row in tokens}) == 10  # ... and all differ after them
    assert spliced != geolip_data.spliced_tails(tokenizer, texts, 77, 10, 8, seed=1)[0]  # the seed draws the groups


def test_spliced_groups_whose_tokens_do_not_reproduce_the_prefix_are_skipped(held_out):
    texts, tokenizer = held_out

    def shifts_long_texts(batch, **options):
        """The real tokenizer, except that in a list a text longer than 800 characters gets one more first token:
        a spliced text no longer starts with its prefix's tokens (the prefix is tokenised alone, a str)."""
        encoded = tokenizer(batch, **options)
        if isinstance(batch, list) and not options.get("return_offsets_mapping"):
            for text, row in zip(batch, encoded["input_ids"]):
                if len(text) > 800:
                    row.insert(0, 0)
        return encoded

    spliced, skipped = geolip_data.spliced_tails(shifts_long_texts, texts, 77, 10, 8, seed=0)
    assert skipped > 0 and len(spliced) == (8 - skipped) * 10


def test_texts_that_end_within_the_window_give_no_spliced_groups(held_out, capsys):
    _, tokenizer = held_out
    assert geolip_data.spliced_tails(tokenizer, ["a dog runs on the beach"] * 30, 77, 10, 8, seed=0) == ([], 0)
    assert "0 held-out texts run past the 77-token window" in capsys.readouterr().out


def test_the_ridge_map_is_the_ridge_least_squares_fit():
    """ridge_map (the window_linear and memory_linear rows' map) recovers a linear relation that holds exactly between
    the embeddings and the targets (up to its small ridge), and otherwise solves the ridge normal equations: the
    residual's correlation with the embeddings equals ridge x the map."""
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(40, 6, generator=generator), dim=-1)
    exact = torch.linalg.qr(torch.randn(6, 6, generator=generator)).Q
    targets = embeddings @ exact  # unit rows: normalising changes nothing
    torch.testing.assert_close(geolip_metrics.ridge_map(embeddings * 3, targets), exact, atol=5e-3, rtol=0)
    noisy = torch.randn(40, 9, generator=generator)
    fitted = geolip_metrics.ridge_map(embeddings, noisy)
    residual = torch.nn.functional.normalize(noisy, dim=-1) - embeddings @ fitted
    torch.testing.assert_close(embeddings.T @ residual, geolip_metrics.RIDGE * fitted, atol=1e-5, rtol=1e-4)


def test_spliced_top1_on_known_cases():
    targets = torch.eye(6)
    assert geolip_metrics.spliced_top1(targets * 2, targets, 3) == 1  # each finds its own within its group
    one_per_group = targets.view(2, 3, 6)[:, :1].expand(2, 3, 6).reshape(6, 6)  # a group's texts share one embedding
    assert geolip_metrics.spliced_top1(one_per_group, targets, 3) == 1 / 3


def test_goals_and_rows_of_a_clip_base_that_has_no_whole_text_row():
    """A CLIP base reads no more than its 77-token window: the whole-text row is n/a, and so is the share of the gap
    to it; the other goals are marked from the numbers."""
    def row(m_acc, cosine, spliced):
        return {"m_acc": m_acc, "recall_at_5": m_acc, "mrr": m_acc, "mean_cosine": cosine, "spliced_top1": spliced}

    evaluation = {"gallery": 500, "base_window": 77, "whole_window": None, "segment_size": 18,
                  "splice": {"k": 10, "groups": 50, "skipped": 0},
                  "rows": {"memory": row(0.95, 0.70, 0.92), "window": row(0.90, 0.80, 0.1),
                           "first_segment": row(0.6, 0.5, 0.1), "segment_mean": row(0.96, 0.6, 0.5),
                           "teacher": row(1.0, 1.0, 1.0)}}
    config = geolip_export.Config(train=ROOT, eval=ROOT, out=ROOT)
    goals = geolip_export.goals(evaluation, config)
    assert goals["gap_closed"]["met"] is None and "no whole-text row" in goals["gap_closed"]["why"]
    assert goals["m_acc_above_window"]["met"] and goals["spliced_top1"]["met"] and goals["gallery"]["met"]
    assert not goals["cosine_above_window"]["met"]
    table = geolip_card.retrieval_table(evaluation)
    assert "| the base reading the whole text | n/a: the base reads no more than its window |" in table
    assert "| **memory (this model)** | 0.950 | 0.950 | 0.950 | 0.700 | 0.920 |" in table
    assert geolip_card.shortfalls(evaluation) == (
        "**Where the memory does not beat a baseline:** the base on its window (77 tokens) on mean cosine to the "
        "teacher (0.700 vs 0.800); the mean of the base's per-segment embeddings on m_acc (0.950 vs 0.960), "
        "recall@5 (0.950 vs 0.960), MRR (0.950 vs 0.960).")
    assert "| mean cosine to the teacher above the base on its window | 0.700 | > 0.800 | **missed** |" in \
        geolip_card.goals_table(goals, evaluation)
