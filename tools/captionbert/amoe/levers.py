"""Levers for AMOE arms (issue 40), measured on one trunk in one harness: solo arms of other data and settings beside
today's recipe, and the bare trunk, each scored on the validation suite, STS-8 and the Flickr8k gauge
(tools/captionbert/amoe/harness.py).

Usage (the cpu build's step, on the trunk it distilled; --model defaults to the shipped captionbert-8192-v2):
    python -m tools.captionbert.amoe.levers --extract runs/demo/extract --align runs/demo/align \\
        --model runs/demo/distill/final --out runs/demo/amoe/levers
    python -m tools.captionbert.amoe.levers --extract runs/demo/extract --align runs/demo/align \\
        --out runs/levers --only teacher consensus

Today's recipe is the teacher arm: the reference teacher's embeddings of the corpus texts, 960 steps of 16 texts,
learning rate 1e-3, every gate logit at -3. Each lever changes one thing (LEVERS). The embedded arms (teacher,
consensus, one aligned teacher) embed 16 texts a step; the pair arms keep the cpu recipe's 480 steps (32 texts a step,
48 with a hard negative). Every row shows its measured training minutes; "twice the steps" is the one row at twice
the minutes. Each lever is a seed-0 solo run in out/<name> (resumable; a finished one is skipped). A collective lever
(COLLECTIVES) routes between the arms of other levers: a dispatch trained on the union of their streams
(dispatch.py), in out/<name>, its minutes the arms' plus its own. The bare trunk's scores are
out/trunk/metrics.json, and out/levers.json holds the rows, rewritten after each lever ("complete" once every lever
named ran; export --levers puts their table on the card).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tools import registry, runs, sts
from tools.captionbert.amoe import harness, pairs

RECIPE = ["--data", "{extract}", "--steps", "960"]
LEVERS = {  # name: (lever, what it changes against today's recipe, its solo options)
    "teacher": ("recipe", "today's recipe: all-mpnet-base-v2's embeddings", RECIPE),
    "consensus": ("1 teacher arms", "the consensus of the three aligned teachers",
                  ["--data", "{align}", "--steps", "960"]),
    "minilm-l6": ("1 teacher arms", "all-MiniLM-L6-v2's embeddings, mapped into the reference's frame",
                  ["--data", "{align}", "--teacher", "all-MiniLM-L6-v2", "--steps", "960"]),
    "minilm-l3": ("1 teacher arms", "paraphrase-MiniLM-L3-v2's embeddings, mapped into the reference's frame",
                  ["--data", "{align}", "--teacher", "paraphrase-MiniLM-L3-v2", "--steps", "960"]),
    "caption": ("2 pair arms", "Flickr8k captions of one image (in-batch InfoNCE), 480 steps",
                ["--data", "caption", "--steps", "480"]),
    "paraphrase": ("2 pair arms", "MRPC paraphrases (in-batch InfoNCE + CoSENT over its labels), 480 steps",
                   ["--data", "paraphrase", "--steps", "480"]),
    "equiv": ("2 pair arms", "SNLI entailment, its contradiction as the hard negative (in-batch InfoNCE), 480 steps",
              ["--data", "equiv", "--steps", "480"]),
    "equiv-cosent": ("2 pair arms", "the same triples, CoSENT instead (entailment ranked above contradiction)",
                     ["--data", "equiv", "--steps", "480", "--triples-loss", "cosent"]),
    "teacher-lr3e-3": ("3 optimisation", "learning rate 3e-3", [*RECIPE, "--learning-rate", "3e-3"]),
    "teacher-gate0": ("3 optimisation", "every gate logit at 0 (sigmoid .5) instead of -3 (.047)",
                      [*RECIPE, "--gate-init", "0"]),
    "teacher-relational10": ("3 optimisation", "+ 10 x MSE of the batch's cosine matrices",
                             [*RECIPE, "--relational-weight", "10"]),
    "teacher-1920": ("3 optimisation", "twice the steps (twice the minutes)",
                     ["--data", "{extract}", "--steps", "1920"]),
    "teacher-sites6": ("3 capacity", "the arm at the last 6 of the 12 blocks only (the others add exact zeros)",
                       [*RECIPE, "--sites", "6"]),
}
COLLECTIVES = {  # name: (lever, what it changes, the levers whose arms it routes between): a dispatch trained on the
    #              union of their streams, its minutes the arms' plus its own
    "teachers-collective": ("1 teacher arms", "the three teachers' arms under one dispatch (blends them per token)",
                            ["teacher", "minilm-l6", "minilm-l3"]),
}


@dataclass
class Config:
    extract: Path  # tools/captionbert/extract.py folder (the teacher arm's targets)
    align: Path  # tools/captionbert/align.py folder of that extraction (the consensus and per-teacher targets)
    out: Path  # run folder: one solo run per lever, trunk/, levers.json
    model: Path = registry.CAPTIONBERT.path  # the frozen trunk
    data_dir: Path = field(default_factory=runs.default_data_dir)
    only: list[str] = field(default_factory=lambda: [*LEVERS, *COLLECTIVES], metadata={
        "choices": [*LEVERS, *COLLECTIVES], "help": "the levers to run (default all)"})
    tasks: list[str] = field(default_factory=lambda: list(sts.TASKS), metadata={
        "choices": sts.TASKS, "help": "STS-8 tasks to score (default all; fewer for quick trials)"})
    validation_rows: int = 0  # rows per validation set (0 = all; fewer for quick trials)


@dataclass
class TrunkConfig:
    """The bare trunk's scoring run (out/trunk): what the harness reads."""
    out: Path
    model: Path
    data_dir: Path
    tasks: list[str]
    validation_rows: int
    device: str = "cuda" if torch.cuda.is_available() else "cpu"


def trunk_scores(config):
    """The bare trunk on the validation suite and STS-8 with the gauge, in out/trunk (scored once)."""
    trunk = TrunkConfig(config.out / "trunk", config.model, config.data_dir, config.tasks, config.validation_rows)
    if runs.run_state(trunk.out, trunk) != "complete":
        with runs.RunRecord(trunk.out, trunk, "captionbert.amoe.levers trunk"):
            model, trunk_id = harness.load_trunk(trunk)
            print(f"scoring the bare trunk {config.model}")
            validation = pairs.validation_sets(config.data_dir, config.validation_rows)
            runs.write_json(trunk.out / "metrics.json", {
                "status": "complete", "trunk_hash": trunk_id,
                "validation": harness.validation_score(model, validation, set()),
                "sts8": harness.sts8_score(model, trunk)})
    return runs.read_json(trunk.out / "metrics.json")


def scored_row(name, lever, change, steps, minutes, metrics, trunk):
    """levers.json's row of a finished run (a solo arm or a collective) against the bare trunk: its validation mean
    over the selection sets (None for an arm that trains on one of their sources: it is not judged on its own
    source), STS-8 and the gauge."""
    sts8, base = metrics["sts8"], trunk["sts8"]
    tasks = [task for task in sts.TASKS if task in base]
    return {"name": name, "lever": lever, "change": change, "steps": steps, "training_minutes": minutes,
            "validation": metrics["validation"]["mean"],
            "trunk_validation": pairs.validation_mean(trunk["validation"], set()),
            "sts8": sts8["mean"], "sts8_gain": sts8["mean"] - base["mean"],
            "tasks_above_trunk": sum(sts8[task] > base[task] for task in tasks), "tasks": len(tasks),
            "flickr8k_recall@1": sts8["flickr8k_recall@1"], "flickr8k_mrr": sts8["flickr8k_mrr"]}


def checked_metrics(folder, trunk, model):
    metrics = runs.read_json(folder / "metrics.json")
    if metrics["trunk_hash"] != trunk["trunk_hash"]:
        raise SystemExit(f"{folder} trained on another trunk than {model}")
    return metrics


def solo_lever(config, name, trunk):
    """Train (or find finished) the lever's seed-0 solo arm in out/<name>; its row."""
    lever, change, options = LEVERS[name]
    options = [option.format(extract=config.extract, align=config.align) for option in options]
    print(f"lever {name}: solo {' '.join(options)}")
    runs.run_tool("tools.captionbert.amoe.solo", *options, "--seed", "0", "--model", config.model,
                  "--data-dir", config.data_dir, "--tasks", *config.tasks,
                  "--validation-rows", config.validation_rows, "--out", config.out / name)
    metrics = checked_metrics(config.out / name, trunk, config.model)
    steps = runs.read_json(config.out / name / "config.json")["steps"]
    return scored_row(name, lever, change, steps, metrics["training_minutes"], metrics, trunk)


def collective_lever(config, name, trunk, done):
    """Its member arms' solo levers (the rows `done` this run already holds, else trained or found finished), then a
    dispatch over them trained on the union of their streams, in out/<name>; its row, whose minutes are the arms'
    and the dispatch's."""
    lever, change, members = COLLECTIVES[name]
    arms = [done.get(member) or solo_lever(config, member, trunk) for member in members]
    print(f"lever {name}: dispatch over {', '.join(members)}")
    runs.run_tool("tools.captionbert.amoe.dispatch", *[item for member in members
                                                        for item in ("--arm", config.out / member)],
                  "--sts8", "--seed", "0", "--model", config.model, "--data-dir", config.data_dir,
                  "--tasks", *config.tasks, "--validation-rows", config.validation_rows, "--out", config.out / name)
    metrics = checked_metrics(config.out / name, trunk, config.model)
    steps = " + ".join(str(arm["steps"]) for arm in arms) + f" + {metrics['steps_run']} dispatch"
    minutes = sum(arm["training_minutes"] for arm in arms) + metrics["training_minutes"]
    return scored_row(name, lever, change, steps, minutes, metrics, trunk)


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    if not (config.extract / "manifest.json").is_file():
        raise SystemExit(f"--extract {config.extract} is not a finished extraction (no manifest.json)")
    if not (config.align / "maps.safetensors").is_file():
        raise SystemExit(f"--align {config.align} is not a finished alignment (no maps.safetensors)")
    with runs.RunRecord(config.out, config, "captionbert.amoe.levers"):
        trunk = trunk_scores(config)
        rows = []
        for name in config.only:
            rows.append(collective_lever(config, name, trunk, {row["name"]: row for row in rows})
                        if name in COLLECTIVES else solo_lever(config, name, trunk))
            runs.write_json(config.out / "levers.json", {  # after every lever: a stopped run keeps its table so far
                "model": str(config.model), "trunk": trunk, "rows": rows, "complete": len(rows) == len(config.only)})
    for row in rows:
        validation = "not judged (own source)" if row["validation"] is None else f"{row['validation']:.4f}"
        print(f"{row['name']:>22}: STS-8 {row['sts8']:.4f} ({row['sts8_gain']:+.4f} vs the trunk's "
              f"{trunk['sts8']['mean']:.4f}, above it on {row['tasks_above_trunk']}/{row['tasks']} tasks), validation "
              f"{validation} (trunk {row['trunk_validation']:.4f}), {row['training_minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
