"""Build a geolip-clip-ctx576 folder from a trained geolip memory (with its frozen base) and write its model card from
the run records. The folder is built inside the export run (<out>/geolip-clip-ctx576/, starting from the Hub folder's
own files); `make release` (tools/release.py) copies a build into the Hub folder.

Usage (the order make demo runs them in):
    python -m tools.geolip.train --out runs/demo/geolip/train
    python -m tools.geolip.evaluate --train runs/demo/geolip/train --out runs/demo/geolip/eval
    python -m tools.geolip.train --out runs/demo/geolip/train-seg55 --segment-size 55 --segment-stride 43
    python -m tools.geolip.evaluate --train runs/demo/geolip/train-seg55 --out runs/demo/geolip/eval-seg55
    python -m tools.geolip.export --train runs/demo/geolip/train --eval runs/demo/geolip/eval \\
        --ablation runs/demo/geolip/eval-seg55 --out runs/demo/geolip/export

What it does:
    1. checks that the evaluation scored exactly the trained weights (same sha256);
    2. copies the weights (frozen base included), config.json, the tokenizer's files and the training curve into the
       folder; the Hub folder's own remote code stays (it is the source; tools/vendor.py keeps its shared_*.py in sync);
    3. loads the folder with AutoModel in a fresh process with the project NOT importable, and checks that it embeds
       the held-out texts as the trained final/ folder does (max difference <= max_difference);
    4. records the checks and the goals (met or missed, from the evaluation's numbers) in the out folder
       (metrics.json) and writes README.md from the run records (its template: tools/geolip/card.md); the ablation
       (a run with other segments, scored by tools/geolip/evaluate.py) is optional: with it, the card compares the
       two runs and says which one it ships.
"""

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModel

from tools import cards, encoders, registry, runs
from tools.geolip.card import retrieval_table
from tools.geolip.metrics import READERS, not_beaten
from tools.geolip.data import split_texts, training_config

# the rows the memory is measured against


@dataclass
class Config:
    train: Path  # tools/geolip/train.py run folder (final/, metrics.json)
    eval: Path  # tools/geolip/evaluate.py run that scored train/final
    out: Path  # run folder for this export's checks
    ablation: Path | None = field(default=None, metadata={
        "help": "tools/geolip/evaluate.py run of an ablation training run (one with other segments)"})
    to: Path | None = field(default=None, metadata={
        "help": "the folder to build (default: <out>/<its Hub folder's name>); make release copies it into the Hub "
                "folder"})
    parity_texts: int = 64  # held-out texts the fresh-process load is checked on
    max_difference: float = 1e-5  # largest allowed |exported - trained| embedding entry
    goal_gallery: int = 500  # the goals hold on a gallery of at least this many held-out texts:
    goal_gap_closed: float = 0.75  # m_acc closes this share of the gap from the window row to the whole-text row
    goal_spliced: float = 0.90  # spliced-tails top-1 (the window row: 1 / k)


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    config.to = config.to or config.out / registry.GEOLIP.folder
    needed = [config.train / "final" / "config.json", config.train / "metrics.json",
              config.eval / "metrics.json"]
    if config.ablation is not None:
        needed.append(config.ablation / "metrics.json")
    for path in needed:
        if not path.exists():
            raise SystemExit(f"{path} not found: run the steps in this tool's usage first")
    return config


def published_trainable_parameters(folder):
    """Trainable parameters of the folder's code at the published shape (every GeolipConfig default: CLIP-L's text
    tower, a 1,024-d teacher), built on the meta device, so nothing is allocated."""
    config_class = type(AutoConfig.from_pretrained(folder, trust_remote_code=True))
    published = config_class(name_or_path=str(folder),
                             auto_map=runs.read_json(Path(folder) / "config.json")["auto_map"])
    with torch.device("meta"):
        model = AutoModel.from_config(published, trust_remote_code=True)
    return sum(p.numel() for p in model.trainable_parameters())


# ---- the goals -----------------------------------------------------------------------------------------------------

def goals(evaluation, config):
    """The issue's goals, measured on the evaluation: {goal: {"value", "target", "met", "why" (when not measurable
    here: met is None)}}."""
    rows = evaluation["rows"]
    memory, window, whole = rows["memory"], rows["window"], rows.get("whole")
    lost = not_beaten(memory, {name: rows[name] for name in READERS if name in rows})
    gap = {"value": None, "target": config.goal_gap_closed, "met": None}
    if whole is None:
        gap["why"] = "no whole-text row: the base reads no more than its window"
    elif whole["m_acc"] <= window["m_acc"]:
        gap["why"] = "the window row already scores as high as the whole-text row"
    else:
        gap["value"] = (memory["m_acc"] - window["m_acc"]) / (whole["m_acc"] - window["m_acc"])
        gap["met"] = gap["value"] >= config.goal_gap_closed
    spliced = {"value": memory["spliced_top1"], "target": config.goal_spliced, "met": None}
    if spliced["value"] is None:
        spliced["why"] = "no spliced-tails group: no held-out text runs past the window"
    else:
        spliced["met"] = spliced["value"] >= config.goal_spliced
    return {"gallery": {"value": evaluation["gallery"], "target": config.goal_gallery,
                        "met": evaluation["gallery"] >= config.goal_gallery},
            "m_acc_above_window": {"value": memory["m_acc"], "target": window["m_acc"],
                                   "met": memory["m_acc"] > window["m_acc"]},
            "gap_closed": gap, "spliced_top1": spliced,
            "cosine_above_window": {"value": memory["mean_cosine"], "target": window["mean_cosine"],
                                    "met": memory["mean_cosine"] > window["mean_cosine"]},
            "beats_every_reader": {"value": len(lost), "target": 0, "met": not lost, "lost": lost}}


def main(argv=None):
    config = parse_config(argv)
    final = config.train / "final"
    evaluation = runs.read_json(config.eval / "metrics.json")
    encoders.require_scored(evaluation["weights_sha256"], final, config.eval)

    with runs.RunRecord(config.out, config, "geolip.export"):
        registry.GEOLIP.start_build(config.to)
        for path in sorted(final.iterdir()):
            if path.suffix != ".py":  # the weights, config.json and the tokenizer's files; the code is the folder's
                shutil.copy(path, config.to / path.name)
        shutil.copy(config.train / "training_curve.png", config.to / "training_curve.png")

        texts = split_texts(training_config(config.train))[1][:config.parity_texts]
        exported = runs.load_isolated(config.to, texts, auto_model=True)["auto_model"]
        trained = runs.load_isolated(final, texts, auto_model=True)["auto_model"]
        difference = float(np.abs(np.array(exported["embeddings"]) - np.array(trained["embeddings"])).max())
        if difference > config.max_difference:
            raise SystemExit(f"{config.to} embeds differently from {final}: max difference {difference}")
        print(f"{config.to} loads with AutoModel in a fresh process ({exported['parameters']:,} parameters) and embeds "
              f"{len(texts)} held-out texts as {final} does (max difference {difference:.1e})")
        model_config = runs.read_json(config.to / "config.json")
        export = {"clip_l_trainable": published_trainable_parameters(config.to), "parity_texts": len(texts),
                  "max_difference": difference, "parameters": exported["parameters"],
                  "trainable": exported["trainable"], "hidden_size": len(exported["embeddings"][0]),
                  "teacher_dim": model_config["teacher_dim"], "base_model_type": model_config["base_model_type"],
                  "base_pooling": model_config["base_pooling"], "weights_sha256": encoders.weights_hash(config.to),
                  "files_sha256": registry.GEOLIP.weights_sha256(config.to),
                  "embedding_space": exported["embedding_space"], "embedding_space_covers_config": True,
                  "goals": goals(evaluation, config)}
        train_run = runs.read_json(config.train / "run.json")
        export["train_wall_minutes"] = round(runs.elapsed_minutes(train_run["started"], train_run["finished"]), 1)
        runs.write_json(config.out / "metrics.json", export)
        path = config.to / "README.md"
        path.write_text(cards.card_from_records(config.out))
    print(f"wrote {path}\n")
    print(retrieval_table(evaluation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
