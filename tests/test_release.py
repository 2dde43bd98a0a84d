"""tools/release.py and the build folders of tools/registry.py: an export builds beside the Hub folder, and a release
copies the build in with the JSON records its card is regenerated from, refusing a weaker build unless forced. The
card tool is faked (its card prints one number of one record); the real exports' cards are tested in each pipeline's
end-to-end test."""


import pytest

from tools import card_engine, cards, registry, release, runs

GLYPH = registry.GLYPH


def card(score):
    return card_engine.front_matter(library_name="sentence-transformers", pipeline_tag="sentence-similarity",
                                    tags=["x"], datasets=None, model_name=GLYPH.folder,
                                    results=[{"task_type": "sentence-similarity", "dataset_type": "glyph",
                                              "dataset_name": "held out", "metric_type": "accuracy",
                                              "metric_name": "win rate", "metric_value": score}]
                                    ) + f"\nwin rate {score}\n"


def card_values(folder, root=None):
    """The fake card library's (template, values): the win rate of the evaluation its config names (relative to
    root), and the overview the README's tables show, with the alternative's win rate."""
    config = runs.read_json(folder / "config.json")
    metrics = runs.read_json((root or runs.ROOT) / config["eval"] / "metrics.json")
    return None, {"score": metrics["win_rate"],
                  "overview": card_engine.Overview(model=GLYPH.folder, job="glyph", reads="256 tokens", width=256,
                                             similarity="cosine", alternative="general",
                                             results=[("win rate", "held out", metrics["win_rate"],
                                                       metrics["general"])])}


def card_from_records(folder, root=None):
    return card(card_values(folder, root)[1]["score"])


@pytest.fixture
def project(tmp_path, monkeypatch):
    """runs.ROOT in a temporary folder holding a shipped glyph folder (own files, weights, an old f32 GGUF)."""
    monkeypatch.setattr(runs, "ROOT", tmp_path)
    monkeypatch.setattr(cards, "RECORDS", tmp_path / "records")
    monkeypatch.setattr(cards, "README", tmp_path / "README.md")
    monkeypatch.setattr(cards, "TIMINGS", tmp_path / "records" / "timings.json")
    monkeypatch.setattr(cards, "card_values", card_values)
    monkeypatch.setattr(cards, "card_from_records", card_from_records)
    (tmp_path / "README.md").write_text("# bundle\n" + "".join(
        f"<!-- {name}: written by `make cards` from records/ -->\nold\n<!-- end of {name} -->\n"
        for name in ("models", "commands", "measured")))
    for name in registry.BY_FOLDER:
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(card(0.5))
    hub = GLYPH.path
    (hub / "1_Pooling").mkdir()
    (hub / "1_Pooling" / "config.json").write_text("{}")
    (hub / "tokenizer.json").write_text("{}")
    (hub / "model.safetensors").write_bytes(b"shipped")
    (hub / "glyph-embedder-v2-f32.gguf").write_bytes(b"old")
    return tmp_path


def build(root, score, absolute=False):
    """A finished glyph export of the demo's cpu budget with an evaluation run, its built folder and its card."""
    evaluation, export = root / "runs/demo/glyph/eval", root / "runs/demo/glyph/export"
    evaluation.mkdir(parents=True)
    runs.write_json(evaluation / "metrics.json", {"win_rate": score, "general": 0.125})
    runs.write_json(evaluation / "run.json", {"status": "ok"})
    runs.write_json(evaluation / "tokenizer_config.json", {"kept": False})
    (evaluation / "checkpoint.pt").write_bytes(b"not a record")
    GLYPH.start_build(export / GLYPH.folder)
    built = export / GLYPH.folder
    (built / "model.safetensors").write_bytes(b"new")
    (built / "glyph-embedder-v2-f16.gguf").write_bytes(b"f16")
    eval_path = str(evaluation) if absolute else "runs/demo/glyph/eval"
    runs.write_json(export / "config.json", {"eval": eval_path, "to": f"runs/demo/glyph/export/{GLYPH.folder}",
                                             "hub": str(GLYPH.path)})  # a model folder, named as a user gave it
    runs.write_json(export / "run.json", {"status": "ok"})
    (built / "README.md").write_text(card(score))
    return export


def test_a_build_starts_from_the_hub_folders_own_files_and_never_is_the_hub_folder(project):
    built = project / "b" / GLYPH.folder
    GLYPH.start_build(built)
    assert sorted(path.relative_to(built).as_posix() for path in built.rglob("*") if path.is_file()) == [
        "1_Pooling/config.json", "tokenizer.json"]  # no weights, GGUF or card: the export writes those
    with pytest.raises(SystemExit, match="is a Hub folder"):
        GLYPH.start_build(GLYPH.path)
    with pytest.raises(SystemExit, match="is not a folder"):  # a mistyped source would build an empty folder
        GLYPH.start_build(project / "c" / GLYPH.folder, project / "no-such-folder")


def test_a_release_copies_the_build_and_mirrors_its_json_records(project):
    build(project, 0.75)
    assert release.main(["--budget", "cpu", "--model", GLYPH.folder]) == 0
    hub, records = GLYPH.path, project / "records" / GLYPH.folder
    assert (hub / "model.safetensors").read_bytes() == b"new" and (hub / "glyph-embedder-v2-f16.gguf").is_file()
    assert not (hub / "glyph-embedder-v2-f32.gguf").exists()  # another build's file, not this one's
    assert (hub / "1_Pooling" / "config.json").is_file() and (hub / "README.md").read_text() == card(0.75)
    mirrored = sorted(path.relative_to(records).as_posix() for path in records.rglob("*") if path.is_file())
    assert mirrored == ["release.json", "runs/demo/glyph/eval/metrics.json", "runs/demo/glyph/eval/run.json",
                        "runs/demo/glyph/export/config.json", "runs/demo/glyph/export/run.json"]  # no Hub folder files
    assert cards.released(GLYPH) == (records, records / "runs/demo/glyph/export")
    readme = (project / "README.md").read_text()
    assert f"| {GLYPH.folder} | cpu budget | win rate | held out | 0.7500 | general | 0.1250 |" in readme
    assert (f"| `{GLYPH.folder}` | glyph | 256 tokens | 256-d | cosine | win rate: **0.7500** | general: 0.1250 |"
            in readme)
    assert "| captionbert-8192-v2 | not released | | | | | |" in readme
    assert "| `make test` | ruff (`make lint`), then the test suite" in readme and "not measured yet" in readme


def test_a_release_below_the_shipped_headline_is_refused_unless_forced(project):
    build(project, 0.25)
    with pytest.raises(SystemExit, match="below the shipped 0.5"):
        release.main(["--budget", "cpu", "--model", GLYPH.folder])
    assert (GLYPH.path / "model.safetensors").read_bytes() == b"shipped"
    (GLYPH.path / "README.md").write_text(card(0.1).replace("win rate", "MRR"))  # another measure: no comparison
    with pytest.raises(SystemExit, match="cannot be compared"):
        release.main(["--budget", "cpu", "--model", GLYPH.folder])
    assert release.main(["--budget", "cpu", "--model", GLYPH.folder, "--force"]) == 0
    assert (GLYPH.path / "model.safetensors").read_bytes() == b"new"


def test_records_the_card_cannot_be_regenerated_from_leave_the_hub_folder_and_its_records_alone(project):
    shipped_records = project / "records" / GLYPH.folder
    shipped_records.mkdir(parents=True)
    runs.write_json(shipped_records / "release.json", {"export": "the shipped one"})
    export = build(project, 0.75, absolute=True)
    with pytest.raises(SystemExit, match="absolute path"):
        release.main(["--budget", "cpu", "--model", GLYPH.folder])
    runs.write_json(export / "config.json", {"eval": "runs/demo/glyph/eval",
                                             "to": f"runs/demo/glyph/export/{GLYPH.folder}"})
    (export / GLYPH.folder / "README.md").write_text(card(0.9))  # a card the records do not give
    with pytest.raises(SystemExit, match="differs from"):
        release.main(["--budget", "cpu", "--model", GLYPH.folder])
    assert (GLYPH.path / "model.safetensors").read_bytes() == b"shipped"
    assert [path.name for path in (project / "records").iterdir()] == [GLYPH.folder]  # no staged copy left behind
    assert [path.name for path in shipped_records.iterdir()] == ["release.json"]
    assert runs.read_json(shipped_records / "release.json") == {"export": "the shipped one"}


def test_a_budget_without_a_finished_export_is_named(project):
    with pytest.raises(SystemExit, match="make demo BUDGET=quick MODEL=glyph-embedder-v2"):
        release.main(["--budget", "quick", "--model", GLYPH.folder])


def test_a_released_card_is_regenerated_from_the_records_alone(project):
    export = build(project, 0.75)
    release.main(["--budget", "cpu", "--model", GLYPH.folder])
    runs.write_json(project / "runs/demo/glyph/eval/metrics.json", {"win_rate": 0.1, "general": 0.125})  # not in git
    assert cards.write_cards([export], check=True) == [str(export / GLYPH.folder / "README.md")]
    root, released = cards.released(GLYPH)
    assert cards.card_from_records(released, root) == (GLYPH.path / "README.md").read_text()
    assert runs.read_json(root / cards.RELEASE)["budget"] == "cpu"
