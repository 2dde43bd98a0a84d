"""tools/timings.py: only a complete run's time reaches records/timings.json (a whole passing suite, a demo build of
the three models); a command with no complete run keeps the entry it had; make cards prints what it holds."""

import json

import pytest

from tools import cards, registry, runs, timings


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "ROOT", tmp_path)
    for name, path in (("TIMINGS", "records/timings.json"), ("SETUP", "runs/setup.json"),
                       ("TEST_SESSION", "runs/test/session.json")):
        monkeypatch.setattr(timings, name, tmp_path / path)
    monkeypatch.setattr(cards, "TIMINGS", tmp_path / "records/timings.json")
    (tmp_path / "records").mkdir()
    (tmp_path / "runs/test").mkdir(parents=True)
    return tmp_path


def session(root, **changes):
    record = {"seconds": 780.0, "cpus": 2, "finished": "2026-12-04T18:00:00+0000", "whole_suite": True,
              "exit_status": 0, "tests": 421, **changes}
    (root / "runs/test/session.json").write_text(json.dumps(record))


def steps(root, models, minutes=(30.0, 90.0)):
    (root / "runs/demo").mkdir(parents=True, exist_ok=True)
    runs.write_json(root / "runs/demo/steps.json", {
        "models": models, "cpus": 2, "finished": "2026-12-04T20:00:00+0000",
        "steps": {f"step{i}": {"minutes": m} for i, m in enumerate(minutes)}})


def test_only_a_whole_passing_suite_and_a_demo_of_the_three_models_are_recorded(project):
    session(project, whole_suite=False)  # make test-fast, or pytest tests/x.py
    steps(project, [registry.GLYPH.folder])  # make demo MODEL=glyph-embedder-v2
    assert timings.main([]) == 0
    assert runs.read_json(project / "records/timings.json") == {}
    session(project)
    steps(project, list(registry.BY_FOLDER))
    timings.main([])
    recorded = runs.read_json(project / "records/timings.json")
    assert recorded["make test"]["minutes"] == 13.0 and recorded["make demo BUDGET=cpu"]["minutes"] == 120.0
    session(project, exit_status=1)  # a failing run later does not replace the last passing one
    timings.main([])
    assert runs.read_json(project / "records/timings.json")["make test"]["minutes"] == 13.0


def test_the_readme_commands_table_shows_the_recorded_times(project):
    session(project, seconds=6000.0)
    timings.main([])
    table = "\n".join(cards.commands_table())
    assert "| `make test` | ruff (`make lint`), then the test suite" in table
    assert "| 1.7 h on 2 cores (2026-12-04) |" in table
    assert "| `make demo` | creates `.venv`" in table and "not measured yet" in table


def test_only_a_setup_that_compiled_llama_cpp_python_is_recorded(project):
    """A reinstall from pip's wheel cache takes a minute; a first install compiles llama-cpp-python (minutes)."""
    record = {"seconds": 61, "cpus": 2, "finished": "2026-12-05T04:50:16+0000", "compiled": False}
    (project / "runs/setup.json").write_text(json.dumps(record))
    timings.main([])
    assert "make setup" not in runs.read_json(project / "records/timings.json")
    (project / "runs/setup.json").write_text(json.dumps({**record, "seconds": 600, "compiled": True}))
    timings.main([])
    assert runs.read_json(project / "records/timings.json")["make setup"]["minutes"] == 10.0
