"""tools/runs.py: a run folder's recorded config decides whether a rerun resumes it, skips it or is refused."""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools import runs


@dataclass
class Before:
    out: Path
    steps: int = 10


@dataclass
class After(Before):
    weight_decay: float = 0.0  # a field added since, whose default keeps the old behaviour


def test_a_field_added_with_its_default_keeps_older_runs_resumable(tmp_path):
    runs.write_json(tmp_path / "config.json", dataclasses.asdict(Before(tmp_path)))
    assert runs.run_state(tmp_path, After(tmp_path)) == "partial"
    assert runs.records_config(tmp_path, After(tmp_path))
    assert not runs.records_config(tmp_path, After(tmp_path, weight_decay=0.1))  # not the behaviour it ran with
    with pytest.raises(SystemExit, match="another config"):
        runs.run_state(tmp_path, After(tmp_path, steps=12))
    runs.write_json(tmp_path / "metrics.json", {})
    assert runs.run_state(tmp_path, After(tmp_path)) == "complete"
    assert runs.run_state(tmp_path / "new", After(tmp_path / "new")) == "new"
