"""Levers for geolip's memory (issue 41): training runs that each change one thing against today's recipe (the cpu
preset), every one evaluated by tools/geolip/evaluate.py on the same held-out gallery and spliced groups, and set
against every reader of the same base that needs no training.

Usage:
    python -m tools.geolip.levers --out runs/levers/geolip                        # every lever, the cpu preset
    python -m tools.geolip.levers --out runs/levers/geolip --only recipe blend    # some
    python -m tools.geolip.levers --out O --only recipe --steps 4 --validation-texts 24 ...  # train options, for all

Each lever is a resumable training run in out/<name> (a finished one is skipped) and its evaluation in
out/<name>-eval; every run shares one teacher cache (--teacher-cache, default runs/geolip-teacher/teacher.npy, the
demo's), and each count of hard-negative groups has its own part beside it. Options after the tool's own go to every
training run. out/levers.json holds one row per lever (its training minutes, the memory's measures, the share of the
window-to-whole gap it closes, and every no-training reader it does not beat: the window, window_linear, the first
segment, and the segment mean and the blend of every segment size the levers used; the same for the memory through a
ridge map fitted like window_linear's in place of its projector: linear, linear_loses_to), rewritten after each lever
("complete" once every lever named ran).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import runs
from tools.geolip.metrics import MEASURES, READERS, not_beaten

LEVERS = {  # name: (lever, what it changes against today's recipe, its training options)
    "recipe": ("recipe", "today's recipe: the cpu preset (it starts from the best fixed blend)", []),
    "window": ("1 start", "starts from the window, the recipe before issue 41 (from the blend)", ["--start", "window"]),
    "seg55": ("2 segments", "55-token segments every 43, twice the steps (a step costs about half)",
              ["--segment-size", "55", "--segment-stride", "43", "--steps", "640"]),
    "cosine0.6": ("3 loss", "the cosine term x .6 (x .3)", ["--cosine-weight", "0.6"]),
    "cosine1.0": ("3 loss", "the cosine term x 1.0 (x .3)", ["--cosine-weight", "1.0"]),
    "groups3": ("3 loss", "three spliced groups in every batch of 32 (one): InfoNCE mostly among texts that share "
                "their window", ["--groups-per-batch", "3"]),
    "hard300": ("4 hard negatives", "300 hard-negative groups (100)", ["--hard-negative-groups", "300"]),
    "readout-all": ("5 readout", "the readout attends to every segment's own base embedding (those past the window)",
                    ["--readout-anchors", "all"]),
}
TEACHER_CACHE = Path("runs/geolip-teacher/teacher.npy")


@dataclass
class Config:
    out: Path = field(metadata={"help": "the levers' folder: out/<lever>, out/<lever>-eval, levers.json"})
    only: list[str] = field(default_factory=lambda: list(LEVERS), metadata={
        "choices": list(LEVERS), "help": "the levers to run"})
    teacher_cache: Path = TEACHER_CACHE  # every training run's
    # No flag: the options after the tool's own, passed to every training run after the lever's own
    training_options: list[str] = field(init=False, default_factory=list)


def reader_rows(evaluations):
    """{reader label: its row} over every evaluation: the window rows once, the segment rows per segment size."""
    readers = {}
    for evaluation in evaluations:
        for name in READERS:
            if name in evaluation["rows"]:
                label = f"{name} ({evaluation['segment_size']})" if name in ("segment_mean", "blend") else name
                readers.setdefault(label, evaluation["rows"][name])
    return readers


def lever_row(name, steps, train, evaluation, readers):
    """levers.json's row of a finished lever: the memory's measures, the gap closed and the readers it does not beat."""
    lever, change, _ = LEVERS[name]
    rows = evaluation["rows"]
    memory, window, whole = rows["memory"], rows["window"], rows.get("whole")
    gap = None if whole is None else (memory["m_acc"] - window["m_acc"]) / (whole["m_acc"] - window["m_acc"])
    return {"name": name, "lever": lever, "change": change, "steps": steps,
            "training_minutes": train["training_minutes"], **{key: memory[key] for key in (*MEASURES, "mrr")},
            "gap_closed": gap,
            "loses_to": not_beaten(memory, readers),
            # the memory through a ridge map fitted like window_linear's, in place of its trained projector
            "linear": {key: rows["memory_linear"][key] for key in MEASURES} if "memory_linear" in rows else None,
            "linear_loses_to": not_beaten(rows["memory_linear"], readers) if "memory_linear" in rows else None}


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__, pass_on="training_options",
                               allow_abbrev=False)  # else train's --teacher passes for --teacher-cache
    with runs.RunRecord(config.out, config, "geolip.levers"):
        finished = {}
        for name in config.only:
            options = [*LEVERS[name][2], *config.training_options]
            print(f"lever {name}: train {' '.join(options)}")
            runs.run_tool("tools.geolip.train", "--out", config.out / name, "--teacher-cache", config.teacher_cache,
                          *options)
            evaluation = config.out / f"{name}-eval"
            if not (evaluation / "metrics.json").is_file():
                runs.run_tool("tools.geolip.evaluate", "--train", config.out / name, "--out", evaluation)
            finished[name] = (runs.read_json(config.out / name / "config.json")["steps"],
                              runs.read_json(config.out / name / "metrics.json"),
                              runs.read_json(evaluation / "metrics.json"))
            readers = reader_rows([evaluation for _, _, evaluation in finished.values()])
            rows = [lever_row(lever, *result, readers) for lever, result in finished.items()]
            runs.write_json(config.out / "levers.json", {"readers": readers, "rows": rows,
                                                         "complete": len(rows) == len(config.only)})
    for row in rows:
        spliced = "n/a" if row["spliced_top1"] is None else f"{row['spliced_top1']:.3f}"
        print(f"{row['name']:>15}: m_acc {row['m_acc']:.3f}, cosine {row['mean_cosine']:.3f}, spliced {spliced}, "
              f"{row['training_minutes']:.1f} min; does not beat: {'; '.join(row['loses_to']) or 'none'}")
        if row["linear"] is not None:
            print(f"{'through a ridge map':>15}: m_acc {row['linear']['m_acc']:.3f}, cosine "
                  f"{row['linear']['mean_cosine']:.3f}; does not beat: {'; '.join(row['linear_loses_to']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
