"""tools/demo.py's bookkeeping: finished steps are skipped, a step whose inputs changed is rebuilt from scratch with
everything that reads it, an interrupted step resumes, --force rebuilds all, a folder built by the same command
before is adopted. The tool runs are faked (each writes a file whose content counts its runs); the real steps are
what make demo runs."""

import json
import subprocess

import pytest

from tools import demo, registry, runs
from tools.captionbert.align import Config


@pytest.fixture
def project(tmp_path, monkeypatch):
    """runs.ROOT in a temporary folder, and a fake `python -m tools.<tool>` that records each call."""
    monkeypatch.setattr(runs, "ROOT", tmp_path)
    calls = []

    def fake_run(command, cwd, env):
        args = command[3:]
        out = cwd / args[args.index("--out") + 1]
        calls.append(out.name)
        if "--fail" in args:
            return subprocess.CompletedProcess(command, 1)
        resumed = (out / "partial").exists()
        (out / "result.txt").write_text(f"{out.name} run {len(calls)}")
        (out / "resumed.txt").write_text(str(resumed))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(demo.subprocess, "run", fake_run)
    return tmp_path, calls


def steps(*extra):
    return [demo.Step("first", ["--out", "runs/demo/a"]),
            demo.Step("second", ["--input", "runs/demo/a/result.txt", "--out", "runs/demo/b", *extra]),
            demo.Step("third", ["--out", "runs/demo/c"])]


def test_finished_steps_are_skipped_and_changed_inputs_rebuild_their_readers(project):
    root, calls = project
    assert [how for _, how in demo.build(steps()).values()] == ["built"] * 3
    assert [how for _, how in demo.build(steps()).values()] == ["skipped"] * 3 and len(calls) == 3
    (root / "runs/demo/a/result.txt").write_text("edited by hand")  # first's results changed
    assert [how for _, how in demo.build(steps()).values()] == ["built", "built", "skipped"]
    assert calls[3:] == ["a", "b"]
    demo.build(steps("--option"))  # second's own command changed: only second
    assert calls[5:] == ["b"]
    demo.build(steps(), force=True)
    assert calls[6:] == ["a", "b", "c"]


def test_an_interrupted_step_resumes_and_a_stale_one_starts_from_scratch(project):
    root, calls = project
    with pytest.raises(SystemExit, match="failed"):
        demo.build(steps("--fail"))
    assert json.loads((root / "runs/demo/b" / demo.STATE).read_text())["status"] == "running"
    (root / "runs/demo/b/partial").write_text("a checkpoint")
    with pytest.raises(SystemExit):
        demo.build(steps("--fail"))
    assert (root / "runs/demo/b/partial").exists()  # same command: its checkpoint is kept to resume from
    demo.build(steps())  # another command: the folder is cleared first
    assert (root / "runs/demo/b/resumed.txt").read_text() == "False"


def test_a_folder_built_by_the_same_command_is_adopted(project):
    root, calls = project
    folder = root / "runs/demo/c"
    folder.mkdir(parents=True)
    (folder / "result.txt").write_text("built before")
    runs.write_json(folder / "run.json", {"argv": ["tools/x.py", "--out", "runs/demo/c"], "status": "ok",
                                          "started": "2026-11-30T10:00:00+0000",
                                          "finished": "2026-11-30T10:30:00+0000"})
    outcome = demo.build(steps())
    assert outcome["c"] == (30.0, "adopted") and "c" not in calls
    assert demo.build(steps())["c"] == (30.0, "skipped")


@pytest.mark.parametrize("budget", sorted(demo.BUDGETS))
def test_the_demo_steps_name_their_inputs(budget):
    listed = demo.demo_steps("../shared/data", demo.BUDGETS[budget])
    names = [step.name for step in listed]
    assert len(set(names)) == len(names)  # one folder per step
    assert all(step.out == f"{demo.BUDGETS[budget].root}/{step.name}" for step in listed)
    by_name = dict(zip(names, listed))
    assert demo.reads(by_name["amoe/select"], by_name["amoe/solo/teacher-seed1"])  # --solo holds the solo runs
    assert demo.reads(by_name["amoe/solo/silver-seed0"], by_name["amoe/silver"])  # its pairs file
    assert not demo.reads(by_name["geolip/train"], by_name["distill"])
    # The card's rows: the same budget from scratch beside the shipped init, and the long-input table.
    assert demo.reads(by_name["eval"], by_name["distill"]) and demo.reads(by_name["eval"], by_name["distill-scratch"])
    assert demo.reads(by_name["long"], by_name["distill"])
    assert demo.reads(by_name["captionbert/export"], by_name["long"])
    assert "--init" in by_name["distill-scratch"].args
    assert {step.pipeline for step in listed} == set(registry.PIPELINES)
    option = {(step.name, flag): value for step in listed for flag, value in zip(step.args, step.args[1:])}
    sample = int(option.get(("extract", "--sample"), 10**9))  # the rows align may split, at most
    fit, held = option.get(("align", "--fit-rows"), Config.fit_rows), option.get(("align", "--holdout-rows"),
                                                                                 Config.holdout_rows)
    assert int(fit) + int(held) <= sample
    if budget == "cpu":
        assert demo.reads(by_name["geolip/export"], by_name["geolip/eval-seg55"])  # the ablation row
        assert demo.reads(by_name["amoe/levers"], by_name["distill"])  # the levers measured on the trunk built
        assert demo.reads(by_name["captionbert/export"], by_name["amoe/levers"])  # the card's levers table


def test_a_folder_built_by_another_command_is_adopted_only_when_vouched_for(project):
    root, calls = project
    folder = root / "runs/demo/c"
    folder.mkdir(parents=True)
    runs.write_json(folder / "run.json", {"argv": ["tools/x.py", "--out", "runs/elsewhere"], "status": "ok",
                                          "started": "2026-11-30T10:00:00+0000",
                                          "finished": "2026-11-30T10:06:00+0000"})
    with pytest.raises(SystemExit, match="names no step"):
        demo.build(steps(), adopt=["d"])
    assert demo.build(steps(), adopt=["c"])["c"] == (6.0, "adopted") and "c" not in calls
    assert json.loads((folder / demo.STATE).read_text())["recorded_argv"][-1] == "runs/elsewhere"
    folder_b = root / "runs/demo/b"
    (folder_b / demo.STATE).unlink()  # b, unvouched and not the same command: rebuilt from scratch
    runs.write_json(folder_b / "run.json", {"argv": ["tools/x.py", "--out", "runs/elsewhere"], "status": "ok"})
    demo.build(steps())
    assert calls.count("b") == 2 and not (folder_b / "run.json").exists()


def test_a_model_named_lists_and_builds_only_its_own_steps(project, capsys):
    demo.main(["--data-dir", "../shared/data", "--budget", "cpu", "--model", "geolip-clip-ctx576", "--list"])
    listed = capsys.readouterr().out.splitlines()
    geolip = [step for step in demo.demo_steps("../shared/data", demo.BUDGETS["cpu"])
              if step.pipeline == registry.GEOLIP]
    assert len(listed) == len(geolip) and all("python -m tools.geolip." in line for line in listed)
    with pytest.raises(SystemExit):
        demo.main(["--model", "no-such-model", "--list"])
