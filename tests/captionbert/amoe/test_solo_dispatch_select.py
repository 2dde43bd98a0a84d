"""AMOE training: the arm losses, the pair datasets (never STS-8 text), the tools' flags, greedy selection against
the control, and the tools end to end on a tiny trunk (tools/captionbert/amoe/solo.py -> dispatch.py -> select.py)."""

import dataclasses
import itertools
import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from safetensors import safe_open
import torch
import torch.nn.functional as F

from shared_modeling.losses import cosent, info_nce_with_hard_negatives
from helpers import ROOT
from tools import corpus, runs, sts
from tools.captionbert.amoe import arms, dispatch, pairs, select, solo


# ---- losses --------------------------------------------------------------------------------------------------------

def test_cosent_matches_its_definition_and_rewards_the_gold_order():
    cosines = torch.tensor([0.9, 0.1, 0.5, 0.4])
    scores = torch.tensor([5.0, 1.0, 3.0, 3.0])
    terms = [20 * (cosines[j] - cosines[i]) for i, j in itertools.product(range(4), repeat=2) if scores[i] > scores[j]]
    expected = torch.log(1 + torch.exp(torch.stack(terms)).sum())
    torch.testing.assert_close(cosent(cosines, scores), expected)
    assert cosent(cosines, scores) < cosent(-cosines, scores)  # the reversed order costs more
    assert cosent(cosines, torch.ones(4)) == 0  # all scores tie: nothing to rank


def test_hard_negative_info_nce_matches_cross_entropy_over_positives_and_negatives():
    torch.manual_seed(0)
    anchors, positives, negatives = torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8)
    candidates = F.normalize(torch.cat([positives, negatives]), dim=-1)
    logits = F.normalize(anchors, dim=-1) @ candidates.T / 0.05
    expected = F.cross_entropy(logits, torch.arange(3))
    torch.testing.assert_close(info_nce_with_hard_negatives(anchors, positives, negatives, 0.05), expected)
    without = info_nce_with_hard_negatives(anchors, positives, None, 0.05)
    assert without < expected  # fewer candidates, an easier task
    with pytest.raises(ValueError, match="temperature"):
        info_nce_with_hard_negatives(anchors, positives, None, 0.0)


def test_the_cosent_triples_loss_ranks_each_positive_above_every_hard_negative(monkeypatch, capsys):
    """solo --triples-loss cosent: CoSENT over the rows' anchor-positive (score 1) and anchor-negative (score 0)
    cosines, in place of in-batch InfoNCE; any other name is refused."""
    anchors = F.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), dim=-1)
    near, far = F.normalize(anchors + 0.1, dim=-1), F.normalize(-anchors + 0.1, dim=-1)
    data = pairs.PairSet("equiv", "triples", "test", first=["a0", "a1"], second=["p0", "p1"], negative=["n0", "n1"])
    config = SimpleNamespace(max_length=8, temperature=0.05, cosent_scale=20.0)

    def loss(positives, negatives, triples_loss):
        monkeypatch.setattr(arms, "embed", lambda model, texts, max_length: torch.cat([anchors, positives, negatives]))
        return arms.batch_loss(None, data, [0, 1], config, triples_loss=triples_loss)

    cosines = torch.cat([(anchors * near).sum(-1), (anchors * far).sum(-1)])
    torch.testing.assert_close(loss(near, far, "cosent"), cosent(cosines, torch.tensor([1.0, 1.0, 0.0, 0.0])))
    assert loss(near, far, "cosent") < 1e-6 < loss(far, near, "cosent")  # the reversed rows cost, the right ones not
    torch.testing.assert_close(loss(near, far, "infonce"), info_nce_with_hard_negatives(anchors, near, far, 0.05))
    with pytest.raises(SystemExit) as refused:
        solo.main(["--triples-loss", "triplet", "--out", "o"])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert "--triples-loss/--triples_loss: invalid choice: 'triplet' (choose from 'infonce', 'cosent')" in error


# ---- data ----------------------------------------------------------------------------------------------------------

def test_training_pairs_hold_no_held_out_and_no_validation_text(data_dir):
    held_out = corpus.held_out_texts(data_dir)
    validation = pairs.validation_sets(data_dir)
    assert set(validation) == set(pairs.VALIDATION_SOURCES)
    validation_texts = {corpus.normalised(t) for name, rows in validation.items() if name != "flickr8k-dev"
                        for a, b, _ in rows for t in (a, b)}
    validation_texts |= {corpus.normalised(c) for _, captions in validation["flickr8k-dev"] for c in captions[:2]}
    assert not validation_texts & held_out
    assert pairs.forbidden_texts(data_dir) == held_out | validation_texts
    expected = {"paraphrase": ("labelled", "MRPC"), "equiv": ("triples", "SNLI"), "sts": ("scored", "STS-B"),
                "caption": ("pairs", "Flickr8k")}
    for name, (kind, source) in expected.items():
        data = pairs.load(name, data_dir)
        assert (data.kind, data.labelled_source) == (kind, source) and len(data) > 500
        texts = {corpus.normalised(t) for t in data.first + data.second + data.negative}
        assert not texts & held_out and not texts & validation_texts, name
    assert pairs.load("sts", data_dir).dropped_held_out > 4000  # STS-B train is mostly STS 2012-2016 test text
    assert set(pairs.load("paraphrase", data_dir).score) == {0.0, 1.0}
    assert {name: len(rows) > 300 for name, rows in validation.items()} == dict.fromkeys(validation, True)
    assert 990 < len(validation["flickr8k-dev"]) < 1000  # the dev images, less 5 whose caption is also a test text


def test_every_roster_is_judged_on_the_same_sets_and_never_on_its_own_source():
    scores = {"stsb-dev": 0.9, "mrpc-test": 0.1, "snli-test": 0.5, "flickr8k-dev": 0.7}
    assert pairs.validation_mean(scores, set()) == pytest.approx(0.8)  # STS-B dev and Flickr8k dev only
    assert pairs.validation_mean(scores, {"MRPC", "SNLI", ""}) == pytest.approx(0.8)  # "": teacher-labelled
    assert pairs.validation_mean(scores, {"STS-B"}) is None and pairs.validation_mean(scores, {"Flickr8k"}) is None
    assert [name for name, source in pairs.TRAINING_SOURCES.items() if pairs.judged_on_own_source(source)] == [
        "sts", "caption"]


def test_tsv_pairs_kinds_and_errors(tmp_path, data_dir):
    heron = "the heron waits by the weir\ta grey heron stands at the weir"
    (tmp_path / "p.tsv").write_text(f"{heron}\nthe kettle whistles twice\tthe kettle sings\n")
    (tmp_path / "s.tsv").write_text(f"{heron}\t4.5\nthe kettle whistles twice\ta ferry leaves port\t0.5\n")
    (tmp_path / "t.tsv").write_text(f"{heron}\tthe heron has flown off\n")
    (tmp_path / "bad.tsv").write_text("one field only\n")
    assert pairs.load(str(tmp_path / "p.tsv"), data_dir).kind == "pairs"
    assert pairs.load(str(tmp_path / "s.tsv"), data_dir).score == [4.5, 0.5]
    assert pairs.load(str(tmp_path / "t.tsv"), data_dir).negative == ["the heron has flown off"]
    with pytest.raises(ValueError, match="2 or 3 tab-separated"):
        pairs.load(str(tmp_path / "bad.tsv"), data_dir)
    with pytest.raises(ValueError, match="unknown pair data"):
        pairs.load("simplify", data_dir)
    first, second, _ = sts.load_task(data_dir, "SICK-R")[0]  # STS-8 test text is refused as training text
    (tmp_path / "leak.tsv").write_text(f"{first}\t{second}\n")
    with pytest.raises(ValueError, match="no rows left"):
        pairs.load(str(tmp_path / "leak.tsv"), data_dir)


# ---- greedy selection ----------------------------------------------------------------------------------------------

def toy_rosters(gains):
    """evaluate_roster for greedy_selection: each arm adds its per-set gains to a trunk at .5 (the control adds
    nothing), and the rosters asked for."""
    seen = []

    def evaluate_roster(roster):
        seen.append(list(roster))
        scores = {name: 0.5 + sum(gains.get(arm, {}).get(name, 0.0) for arm in roster)
                  for name in pairs.VALIDATION_SOURCES}
        return SimpleNamespace(validation=scores)

    return evaluate_roster, seen


def test_greedy_selection_compares_with_the_control_at_the_same_count_and_stops_at_the_bar():
    everywhere = dict.fromkeys(pairs.VALIDATION_SOURCES, 1.0)
    gains = {"equiv": {k: 0.10 * v for k, v in everywhere.items()},
             "paraphrase": {k: 0.05 * v for k, v in everywhere.items()},
             "teacher": {k: 0.004 * v for k, v in everywhere.items()}}
    evaluate_roster, seen = toy_rosters(gains)
    accepted, steps = select.greedy_selection(["teacher", "paraphrase", "equiv"], evaluate_roster, 0.01)
    assert accepted == ["equiv", "paraphrase"]
    assert [s.verdict for s in steps] == ["accepted", "accepted", "rejected"]  # teacher gains .004 < bar .01
    assert ["equiv", arms.CONTROL] in seen and ["equiv", "paraphrase", arms.CONTROL] in seen
    assert steps[1].margin == pytest.approx(0.05)
    assert select.greedy_selection(["teacher"], evaluate_roster, 0.01)[0] == []


def test_an_arm_that_gains_only_on_sets_outside_the_selection_is_not_selected():
    # The quick build's sts arm pattern, now on the paraphrase arm: a large gain on MRPC test, a loss on the sets that
    # select. MRPC and SNLI are recorded, never averaged, so the arm that gains on the selection sets wins.
    gains = {"paraphrase": {"stsb-dev": -0.01, "mrpc-test": 0.2, "snli-test": 0.05, "flickr8k-dev": -0.01},
             "teacher": dict.fromkeys(pairs.VALIDATION_SOURCES, 0.02)}
    evaluate_roster, _ = toy_rosters(gains)
    accepted, steps = select.greedy_selection(["paraphrase", "teacher"], evaluate_roster, 0.01)
    assert accepted == ["teacher"]
    assert steps[0].margins["paraphrase"] == pytest.approx(-0.01)
    assert select.greedy_selection(["paraphrase"], evaluate_roster, 0.01)[0] == []


def test_never_worse_compares_the_collective_with_the_bare_trunk_on_the_selection_sets():
    trunk = {"stsb-dev": 0.80, "mrpc-test": 0.40, "snli-test": 0.60, "flickr8k-dev": 0.70}
    collective = {"stsb-dev": 0.79, "mrpc-test": 0.60, "snli-test": 0.70, "flickr8k-dev": 0.70}
    check = select.never_worse(trunk, collective, bar=0.005)
    assert check["gain"] == pytest.approx(-0.005) and not check["passed"]  # its MRPC and SNLI gains do not count
    collective["flickr8k-dev"] = 0.72
    assert select.never_worse(trunk, collective, bar=0.005)["passed"]


def test_a_fresh_arm_is_inert_whatever_its_gate():
    trunk = SimpleNamespace(config=SimpleNamespace(hidden_size=64, num_hidden_layers=2))
    arm = arms.fresh_arm(trunk, seed=0, gate_init=0.0)
    assert all(site.gate.item() == 0.0 for site in arm.blocks)
    assert all(not site.head_out.weight.any() and not site.head_out.bias.any() for site in arm.blocks)
    assert all(site.gate.item() == -3.0 for site in arms.fresh_arm(trunk, seed=0).blocks)  # the spec's


# ---- the flags ------------------------------------------------------------------------------------------------------

def test_each_tool_s_flags_parse_to_its_config_with_their_names_and_types():
    """The dataclass fields through HfArgumentParser: --x-y flags, paths as Path, a bool as --x / --no-x, a list as
    --x A B, --arm repeated into the roster, choices refused, sizes checked."""
    config = arms.parse_config(solo.SoloConfig, ["--data", "equiv", "--no-sts8", "--gate-init", "0", "--sites", "6",
                                                 "--triples-loss", "cosent", "--tasks", "BIOSSES", "STS-B",
                                                 "--learning-rate", "3e-3", "--out", "o"], "")
    assert config == solo.SoloConfig(out=Path("o"), data="equiv", sts8=False, gate_init=0.0, sites=6,
                                     triples_loss="cosent", tasks=["BIOSSES", "STS-B"], learning_rate=3e-3)
    assert isinstance(config.data_dir, Path) and config.steps == 480  # solo's own default over Common's
    config = arms.parse_config(dispatch.DispatchConfig, ["--arm", "a", "--arm", arms.CONTROL, "--sts8", "--out", "o"],
                               "")
    assert (config.arms, config.sts8, config.steps) == (["a", arms.CONTROL], True, 60)
    config = arms.parse_config(select.SelectConfig, ["--solo", "s", "--candidates", "equiv", "paraphrase",
                                                     "--tau-sweep", "0.05", "--out", "o"], "")
    assert (config.solo, config.candidates, config.tau_sweep) == (Path("s"), ["equiv", "paraphrase"], [0.05])
    for refused in (["--tasks", "STS-X"], []):  # no such task; a dispatch without --arm
        with pytest.raises(SystemExit):
            arms.parse_config(dispatch.DispatchConfig, [*refused, "--out", "o"], "")
    with pytest.raises(SystemExit, match="--steps must be positive"):
        arms.parse_config(select.SelectConfig, ["--steps", "0", "--out", "o"], "")
    with pytest.raises(SystemExit, match="--batch-size must be at least 2"):
        arms.parse_config(solo.SoloConfig, ["--batch-size", "1", "--out", "o"], "")


def test_the_recorded_amoe_runs_parse_from_their_command_lines_to_their_recorded_configs():
    """Every AMOE run under records/ (the former train.py's solo, dispatch and select) gives, from the command line it
    recorded, the config it recorded (runs.records_config), so the same command finds it finished."""
    jobs = {"solo": solo.SoloConfig, "dispatch": dispatch.DispatchConfig, "select": select.SelectConfig}
    checked = 0
    for path in sorted((ROOT / "records").rglob("run.json")):
        run = json.loads(path.read_text())
        package, _, job = run["tool"].split()[0].rpartition(".")
        if run["tool"].startswith("captionbert.amoe.train "):  # the command was train.py <job> ...
            job, argv = run["tool"].split()[1], run["argv"][2:]
        elif package == "captionbert.amoe" and job in jobs:
            argv = run["argv"][1:]
        else:
            continue
        recorded = json.loads((path.parent / "config.json").read_text())
        config = dataclasses.replace(arms.parse_config(jobs[job], argv, ""), device=recorded["device"])
        assert runs.records_config(path.parent, config), path.parent
        checked += 1
    assert checked


# ---- the tools end to end on a tiny trunk --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_trunk(tmp_path_factory):
    from helpers import saved_arm_trunk

    return saved_arm_trunk(tmp_path_factory.mktemp("trunk") / "captionbert")


@pytest.mark.slow
def test_a_solo_arm_at_its_last_sites_adds_exact_zeros_at_the_others(tiny_trunk, tmp_path, data_dir):
    run = ["--data", "equiv", "--steps", "3", "--learning-rate", "0.01", "--batch-size", "8", "--no-sts8",
           "--validation-rows", "40", "--model", str(tiny_trunk), "--data-dir", str(data_dir)]
    assert solo.main([*run, "--sites", "1", "--out", str(tmp_path / "last1")]) == 0
    with safe_open(tmp_path / "last1" / "amoe" / "arms" / "equiv.safetensors", "pt") as arm:
        last = max(int(key.split(".")[1]) for key in arm.keys())
        for block in range(last + 1):
            moved = any(arm.get_tensor(f"blocks.{block}.head_out.{name}").any() for name in ("weight", "bias"))
            assert moved == (block == last), block  # three Adam steps moved the trained site only
    with pytest.raises(SystemExit, match="--sites must be in"):
        solo.main([*run, "--sites", str(last + 2), "--out", str(tmp_path / "too-many")])


@pytest.mark.slow
def test_solo_dispatch_select_end_to_end(tiny_trunk, tmp_path, data_dir, monkeypatch):
    from transformers import AutoModel

    common = ["--model", str(tiny_trunk), "--data-dir", str(data_dir), "--batch-size", "16",
              "--tasks", "BIOSSES", "STS-B", "--validation-rows", "150"]
    solo_runs = tmp_path / "solo"
    def solo_run(name, seed, out, steps=10):
        return ["--data", name, "--seed", str(seed), "--steps", str(steps), "--learning-rate", "0.01",
                "--checkpoint-every", "4", "--out", str(out), *common]

    for name in ("equiv", "paraphrase", "sts"):
        for seed in (0, 1):
            assert solo.main(solo_run(name, seed, solo_runs / f"{name}-seed{seed}")) == 0
    record = json.loads((solo_runs / "equiv-seed0" / "metrics.json").read_text())
    assert record["status"] == "complete"
    assert set(record["sts8"]) == {"BIOSSES", "STS-B", "mean", "flickr8k_recall@1", "flickr8k_mrr", "flickr8k_images"}
    assert set(record["validation"]) == {*pairs.VALIDATION_SOURCES, "mean"}
    assert record["validation"]["mean"] == pytest.approx(pairs.validation_mean(record["validation"], set()))
    assert [point["step"] for point in record["history"]] == [10]  # log_every 10
    run = json.loads((solo_runs / "equiv-seed0" / "run.json").read_text())
    assert (run["status"], run["tool"]) == ("ok", "captionbert.amoe.solo")
    assert solo.main(solo_run("equiv", 0, solo_runs / "equiv-seed0")) == 0  # complete: skipped
    with pytest.raises(SystemExit, match="another config"):
        solo.main(solo_run("equiv", 0, solo_runs / "equiv-seed0", steps=12))

    # A solo run killed after its checkpoint at step 8 resumes there and ends with the uninterrupted run's arm.
    killed = tmp_path / "killed"
    real_loss = arms.batch_loss

    def dies_at_step_9(model, data, rows, config, *weights):
        if (killed / "checkpoint-solo.pt").exists() and torch.load(killed / "checkpoint-solo.pt",
                                                                   weights_only=True)["step"] == 8:
            raise KeyboardInterrupt
        return real_loss(model, data, rows, config, *weights)

    monkeypatch.setattr(arms, "batch_loss", dies_at_step_9)
    with pytest.raises(KeyboardInterrupt):
        solo.main(solo_run("equiv", 0, killed))
    monkeypatch.setattr(arms, "batch_loss", real_loss)
    assert solo.main(solo_run("equiv", 0, killed)) == 0
    for file in ("arms/equiv.safetensors", "solo/dispatch.safetensors"):
        resumed, straight = (safe_open(folder / "amoe" / file, "pt") for folder in (killed, solo_runs / "equiv-seed0"))
        assert resumed.metadata() == straight.metadata(), file  # the content hash of the same tensors and header
        assert all(torch.equal(resumed.get_tensor(key), straight.get_tensor(key)) for key in straight.keys())

    model = AutoModel.from_pretrained(tiny_trunk, trust_remote_code=True).eval()
    bare = model._amoe_fingerprint()
    model.attach_amoe(path=solo_runs / "equiv-seed0" / "amoe")  # a solo run is an attachable amoe/ folder
    assert not torch.equal(model._amoe_fingerprint(), bare)  # three Adam steps moved the arm
    model.detach_amoe()

    mixed = tmp_path / "dispatch"
    assert dispatch.main(["--arm", str(solo_runs / "equiv-seed0"), "--arm", "control", "--arm",
                          str(solo_runs / "sts-seed0"), "--alarm-every", "1", "--steps", "3", "--out", str(mixed),
                          *common]) == 0
    record = json.loads((mixed / "metrics.json").read_text())
    assert record["roster"] == ["equiv", "control", "sts"] and record["steps_run"] == 3
    for check in record["history"]:
        assert sum(check["shares"].values()) == pytest.approx(1.0) and 0 < check["amplitude_budget"] < 1
        assert 1.0 <= check["perplexity"] <= 3.0 and 0 <= check["routing_spread"] < 1
    model.attach_amoe(path=mixed / "amoe")
    assert model._amoe.dispatch.roster == ["equiv", "control", "sts"]
    model.detach_amoe()

    # An arm that trains on a selection set's source (sts: STS-B) trains and scores solo, with no validation mean,
    # and select refuses it as a candidate before anything trains.
    assert json.loads((solo_runs / "sts-seed0" / "metrics.json").read_text())["validation"]["mean"] is None
    with pytest.raises(SystemExit, match=r"sts \(STS-B\).*judged on its own source"):
        select.main(["--solo", str(solo_runs), "--candidates", "equiv", "sts", "--out",
                     str(tmp_path / "select-sts"), "--steps", "3", *common])

    # Arms on a random tiny trunk do not clear the seed-spread bar (the decision rules are tested above), so the
    # selection here runs with no bar, to drive the whole shipping path: every comparison is still trained and scored.
    real_selection, real_never_worse = select.greedy_selection, select.never_worse
    monkeypatch.setattr(select, "greedy_selection",
                        lambda names, score, bar: real_selection(names, score, -1.0))
    monkeypatch.setattr(select, "never_worse",
                        lambda trunk, collective, bar: real_never_worse(trunk, collective, -1.0))
    selected = tmp_path / "select"
    assert select.main(["--solo", str(solo_runs), "--candidates", "equiv", "paraphrase", "--out",
                        str(selected), "--tau-sweep", "0.05", "--steps", "3", *common]) == 0
    record = json.loads((selected / "metrics.json").read_text())
    arms_json = json.loads((selected / "amoe" / "arms" / "ARMS.json").read_text())
    assert set(arms_json["arms"]) == {"equiv", "paraphrase"} and arms_json["roster"] == record["shipped"]["roster"]
    first = record["steps"][0]
    assert set(first["candidates"]) == {"equiv", "paraphrase"}
    assert first["control"]["validation"]["mean"] == pytest.approx(
        record["trunk_validation"]["mean"], abs=1e-6)  # one untrained arm alone is the trunk itself
    assert [step["verdict"] for step in record["steps"]] == ["accepted", "accepted"]
    assert record["steps"][1]["control"]["steps_run"] == 3  # the control's dispatch trains like the candidate's
    assert [row["tau"] for row in record["tau_sweep"]] == [0.1, 0.05]
    assert {"trunk", "solo equiv", "solo paraphrase", "collective"} <= set(record["rows"])
    model.attach_amoe(path=selected / "amoe")
    assert model._amoe.dispatch.roster == record["shipped"]["roster"]

    # What tools/captionbert/export.py ships and writes: the folder loads the collective in a fresh process, every
    # arm off is the bare trunk there, and the card's AMOE section is generated from these records.
    from tools.captionbert import card as captionbert_card
    from tools.captionbert import export as captionbert_export

    folder = tmp_path / "hub"
    shutil.copytree(tiny_trunk, folder)
    shutil.copytree(selected / "amoe", folder / "amoe")
    loaded = runs.load_isolated(folder, captionbert_export.PROBE_TEXTS, auto_model=True, amoe=True)
    bare, attached = loaded["auto_model"]["embeddings"], loaded["amoe"]
    assert attached["off"] == bare and attached["embeddings"] != bare and attached["no_collective"] is None
    assert attached["roster"] == record["shipped"]["roster"]
    card = captionbert_card.amoe_section(record, arms_json)
    collective = record["rows"]["collective"]
    gain = collective["mean"] - record["rows"]["trunk"]["mean"]
    assert f"{collective['mean']:.4f}" in card and f"{gain:+.4f}" in card
    assert f"{record['bar']:.4f}" in card and f"{record['tau_sweep'][1]['STS-B']:.4f}" in card
    assert any(line.startswith("| control (") for line in card.splitlines())
    cells = {cell.strip() for line in card.splitlines() if line.startswith("|") for cell in line.split("|")}
    assert not cells & {"None", "nan"}
    recall_gain = collective["flickr8k_recall@1"] - record["rows"]["trunk"]["flickr8k_recall@1"]
    assert f"its recall@1 is {recall_gain:+.4f}" in card and "the caption domain is " in card
    assert f"What ships (the collective) scores STS-8 {collective['mean']:.4f}" in " ".join(card.split())
    trained = sum(len(step["candidates"]) + 1 for step in record["steps"])  # every candidate and the control
    verdicts = {"accepted", "rejected", "not best", "control"}
    assert sum(line.split("|")[3].strip() in verdicts for line in card.splitlines()
               if line.count("|") == 8) == trained  # the routing table: one row per roster trained

    diagnostic = record["validation_against_sts8"]
    assert [(row["candidate"], row["seed"]) for row in diagnostic["solo"]] == [
        ("equiv", 0), ("equiv", 1), ("paraphrase", 0), ("paraphrase", 1)]
    assert -1 <= diagnostic["spearman_solo"] <= 1 and len(diagnostic["rosters"]) == 3  # 2 at A=1, 1 at A=2
    assert {"flickr8k_recall@1", "flickr8k_mrr"} <= set(record["rows"]["collective"])

    # A selection where no candidate clears the bar is a result, not a failure: the run completes, records every
    # comparison, ships the solo arms without a collective, and the card's section says so and why.
    monkeypatch.setattr(select, "greedy_selection",
                        lambda names, score, bar: real_selection(names, score, math.inf))
    rejected = tmp_path / "select-rejected"
    assert select.main(["--solo", str(solo_runs), "--candidates", "equiv", "paraphrase", "--out",
                        str(rejected), "--steps", "3", *common]) == 0
    record = json.loads((rejected / "metrics.json").read_text())
    assert record["shipped"] is None and "no arm beat the untrained control" in record["reason"]
    assert [step["verdict"] for step in record["steps"]] == ["rejected"]
    assert set(record["rows"]) == {"trunk", "solo equiv", "solo paraphrase"}
    assert not list((rejected / "amoe").glob("*/dispatch.safetensors"))
    assert json.loads((rejected / "amoe" / "arms" / "ARMS.json").read_text())["roster"] is None
    card = captionbert_card.amoe_section(record, json.loads((rejected / "amoe" / "arms" / "ARMS.json").read_text()))
    assert "**No collective ships with this build.**" in card and f"{record['bar']:.4f}" in card
    assert f"{record['steps'][0]['margin_over_control']:+.4f}" in card
    assert f"{record['rows']['solo paraphrase']['mean']:.4f}" in card
    assert f"What ships (the bare trunk) scores STS-8 {record['rows']['trunk']['mean']:.4f}" in " ".join(card.split())

    # Such a folder: attach_amoe() raises naming its solo arms, and one arm attaches alone under its solo routing.
    folder = tmp_path / "hub-no-collective"
    shutil.copytree(tiny_trunk, folder)
    shutil.copytree(rejected / "amoe", folder / "amoe")
    loaded = runs.load_isolated(folder, captionbert_export.PROBE_TEXTS, auto_model=True, amoe=True)
    bare, attached = loaded["auto_model"]["embeddings"], loaded["amoe"]
    assert "ships no collective" in attached["no_collective"]
    assert "equiv" in attached["no_collective"] and "paraphrase" in attached["no_collective"]
    assert attached["roster"] == ["equiv"] and attached["off"] == bare and attached["embeddings"] != bare


@pytest.mark.slow
def test_select_ships_no_collective_when_every_candidate_is_worse_than_the_trunk(tiny_trunk, tmp_path, data_dir):
    """Never worse by default, on a real run: arms trained at a learning rate that wrecks the trunk's embeddings
    score below it on validation, and select, with its measured bar, ships none of them."""
    common = ["--model", str(tiny_trunk), "--data-dir", str(data_dir), "--batch-size", "16",
              "--tasks", "BIOSSES", "--validation-rows", "150"]
    for name in ("equiv", "paraphrase"):
        for seed in (0, 1):
            assert solo.main(["--data", name, "--seed", str(seed), "--steps", "12", "--learning-rate", "1.0",
                              "--out", str(tmp_path / "solo" / f"{name}-seed{seed}"), *common]) == 0
    out = tmp_path / "select"
    assert select.main(["--solo", str(tmp_path / "solo"), "--candidates", "equiv", "paraphrase",
                        "--steps", "3", "--out", str(out), *common]) == 0
    record = json.loads((out / "metrics.json").read_text())
    first = record["steps"][0]
    assert all(trial["margin_over_control"] < 0 for trial in first["candidates"].values())  # worse than the trunk
    assert record["shipped"] is None and first["verdict"] == "rejected"
    assert not list((out / "amoe").glob("*/dispatch.safetensors"))
