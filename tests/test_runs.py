"""tools/runs.py: a run folder's recorded config decides whether a rerun resumes it, skips it or is refused; a tool's
command line parses to its dataclass config (parse_config)."""

import dataclasses
from dataclasses import dataclass, field
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


@dataclass
class Options:
    out: Path  # required: no default
    preset: str = "cpu"
    batch_size: int = 8
    learning_rate: float = 1e-3
    shuffle: bool = True
    tiny: bool = False
    tasks: list[str] = field(default_factory=lambda: ["a", "b"], metadata={"choices": ["a", "b", "c"]})
    encoders: list[str] = field(default_factory=list, metadata={"aliases": ["--encoder"], "action": "extend"})
    passed_on: list[str] = field(init=False, default_factory=list)  # no flag: pass_on's

    def __post_init__(self):
        if self.learning_rate <= 0:
            raise ValueError("--learning-rate must be positive")


PRESETS = {"cpu": {"batch_size": 16}, "paper": {"batch_size": 64, "learning_rate": 5e-4}}


def test_a_flag_left_out_takes_the_preset_s_value_else_the_field_s_default_and_a_flag_given_overrides_both():
    config = runs.parse_config(Options, ["--out", "o"], presets=PRESETS)
    assert (config.preset, config.batch_size, config.learning_rate) == ("cpu", 16, 1e-3)  # cpu: the field's default
    config = runs.parse_config(Options, ["--preset", "paper", "--out", "o"], presets=PRESETS)
    assert (config.batch_size, config.learning_rate) == (64, 5e-4)
    config = runs.parse_config(Options, ["--preset", "paper", "--out", "o", "--batch-size", "4",
                                         "--learning-rate", "1e-3"], presets=PRESETS)
    assert (config.batch_size, config.learning_rate) == (4, 1e-3)  # given, though it is the field's default
    assert runs.parse_config(Options, ["--out", "o"]).batch_size == 8  # no presets: the field's default
    with pytest.raises(SystemExit) as exited:
        runs.parse_config(Options, ["--preset", "gpu", "--out", "o"], presets=PRESETS)
    assert exited.value.code == 2


def test_a_flag_per_field_in_both_spellings_bools_lists_aliases_and_the_checks():
    config = runs.parse_config(Options, ["--out", "o", "--batch_size", "3", "--learning-rate", "0.5", "--no-shuffle",
                                         "--tiny", "--tasks", "c", "a", "--encoder", "x", "--encoders", "y"])
    assert config == Options(out=Path("o"), batch_size=3, learning_rate=0.5, shuffle=False, tiny=True,
                             tasks=["c", "a"], encoders=["x", "y"])
    config = runs.parse_config(Options, ["--out", "o"])
    assert (config.shuffle, config.tiny, config.tasks, config.encoders) == (True, False, ["a", "b"], [])
    assert runs.parse_config(Options, ["--out", "o", "--no_shuffle", "--shuffle"]).shuffle
    for refused in ([], ["--out", "o", "--tasks", "d"], ["--out", "o", "--passed-on", "x"], ["--out", "o", "-x"]):
        with pytest.raises(SystemExit) as exited:  # --out is required; no such task; not a flag; unknown
            runs.parse_config(Options, refused)
        assert exited.value.code == 2
    with pytest.raises(SystemExit, match="--batch-size must be positive"):
        runs.parse_config(Options, ["--out", "o", "--batch-size", "0"], positive=("batch_size",))
    with pytest.raises(SystemExit) as exited:  # the config's own check: a usage error
        runs.parse_config(Options, ["--out", "o", "--learning-rate", "0"])
    assert exited.value.code == 2


def test_pass_on_keeps_the_options_the_parser_does_not_know():
    config = runs.parse_config(Options, ["--out", "o", "--steps", "4", "--tiny", "--teacher", "t"],
                               pass_on="passed_on", allow_abbrev=False)
    assert (config.tiny, config.passed_on) == (True, ["--steps", "4", "--teacher", "t"])
