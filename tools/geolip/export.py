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

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModel

from tools import cards, encoders, registry, runs
from tools.geolip.data import split_texts, training_config
from tools.geolip.metrics import ROWS

# the rows the memory is measured against
BASELINES = ("window", "window_linear", "first_segment", "segment_mean", "blend", "whole")
MEASURES = {"m_acc": "m_acc", "recall_at_5": "recall@5", "mrr": "MRR", "mean_cosine": "mean cosine to the teacher",
            "spliced_top1": "spliced-tails top-1"}


@dataclass
class Config:
    train: Path  # tools/geolip/train.py run folder (final/, metrics.json)
    eval: Path  # tools/geolip/evaluate.py run that scored train/final
    out: Path  # run folder for this export's checks
    ablation: Path | None = None  # tools/geolip/evaluate.py run of a training run with other segments
    to: Path | None = None  # the folder to build (default <out>/<its Hub folder's name>); make release copies it
    #                         into the Hub folder
    parity_texts: int = 64  # held-out texts the fresh-process load is checked on
    max_difference: float = 1e-5  # largest allowed |exported - trained| embedding entry
    goal_gallery: int = 500  # the goals hold on a gallery of at least this many held-out texts:
    goal_gap_closed: float = 0.75  # m_acc closes this share of the gap from the window row to the whole-text row
    goal_spliced: float = 0.90  # spliced-tails top-1 (the window row: 1 / k)


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ablation", type=Path, help="tools/geolip/evaluate.py run of an ablation training run")
    parser.add_argument("--to", type=Path, default=None, help="the folder to build (default: <out>/<Hub folder name>)")
    parser.add_argument("--parity-texts", type=int, default=Config.parity_texts)
    parser.add_argument("--max-difference", type=float, default=Config.max_difference)
    config = Config(**vars(parser.parse_args(argv)))
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
                                    "met": memory["mean_cosine"] > window["mean_cosine"]}}


# ---- the model card ------------------------------------------------------------------------------------------------

def row_name(name, evaluation):
    """A row's name in the card: the windows it reads and the blend's weight are the evaluation's."""
    if name == "blend":
        weight = evaluation["blend_weight"]
        return (f"the best fixed blend of the window and the segment mean (unit vectors; the window's weight "
                f"{weight:.2f}, fitted on training texts)")
    return {"memory": "**memory (this model)**",
            "window": f"the base on its window ({evaluation['base_window']} tokens)",
            "window_linear": "the base on its window, through a linear map fitted on every training text",
            "first_segment": f"the base on its first segment ({evaluation['segment_size']} tokens)",
            "segment_mean": "the mean of the base's per-segment embeddings",
            "whole": f"the base reading the whole text (up to {evaluation['whole_window']} tokens)",
            "teacher": "the teacher itself (the reference)"}[name]


def shown(value, form="{:.3f}"):
    return "n/a" if value is None else form.format(value)


def retrieval_table(evaluation):
    rows, splice = evaluation["rows"], evaluation["splice"]
    header = (f"| embedding | m_acc (top-1 of {evaluation['gallery']}) | recall@5 | MRR | mean cosine to the teacher | "
              f"spliced-tails top-1 (of {splice['k']}, {splice['groups']} groups) |")
    lines = [header, "|---|---|---|---|---|---|"]
    for name in ROWS:
        if name in rows:
            row = rows[name]
            lines.append(f"| {row_name(name, evaluation)} | {row['m_acc']:.3f} | {row['recall_at_5']:.3f} | "
                         f"{row['mrr']:.3f} | {row['mean_cosine']:.3f} | {shown(row['spliced_top1'])} |")
        elif name == "whole":  # the whole-text row of a base that reads no more than its window (CLIP)
            lines.append("| the base reading the whole text | n/a: the base reads no more than its window | | | | |")
    return "\n".join(lines)


def shortfalls(evaluation):
    """The card's sentence on every baseline row and measure where the memory does not score higher."""
    rows = evaluation["rows"]
    memory, lost = rows["memory"], []
    for base in (name for name in BASELINES if name in rows):
        measures = [f"{label} ({memory[key]:.3f} vs {rows[base][key]:.3f})" for key, label in MEASURES.items()
                    if None not in (memory[key], rows[base][key]) and memory[key] <= rows[base][key]]
        if measures:
            lost.append(f"{row_name(base, evaluation)} on {', '.join(measures)}")
    if not lost:
        return "The memory scores higher than every baseline row on every measure."
    return "**Where the memory does not beat a baseline:** " + "; ".join(lost) + "."


def goals_table(goals, evaluation):
    window = evaluation["rows"]["window"]
    lines = ["| goal | measured | target | |", "|---|---|---|---|"]
    for key, goal, value, target in (
            ("gallery", "held-out gallery (texts)", "{}", ">= {}"),
            ("m_acc_above_window", "m_acc above the base on its window", "{:.3f}", "> {:.3f}"),
            ("gap_closed", "m_acc: share of the gap from the window row to the whole-text row closed", "{:.0%}",
             ">= {:.0%}"),
            ("spliced_top1", f"spliced-tails top-1 (the window row: {shown(window['spliced_top1'])})", "{:.3f}",
             ">= {:.3f}"),
            ("cosine_above_window", "mean cosine to the teacher above the base on its window", "{:.3f}", "> {:.3f}")):
        result = goals[key]
        verdict = {True: "met", False: "**missed**", None: f"n/a ({result.get('why')})"}[result["met"]]
        lines.append(f"| {goal} | {shown(result['value'], value)} | {target.format(result['target'])} | {verdict} |")
    return "\n".join(lines)


def ablation_comparison(evaluation, train, ablation_eval, ablation_train):
    """The ablation's values for the card: its evaluation, the table rows of the two runs (the shipped one first) and
    the measures on which the shipped run's memory is higher, lower or the same; and whether the ablation's memory
    still beats the base on its window on m_acc (with its CV term's reach)."""
    rows = []
    for run, run_train, shipped in ((evaluation, train, "shipped"), (ablation_eval, ablation_train, "")):
        row = run["rows"]["memory"]
        rows.append(f"| {run['segment_size']} / {run['segment_stride']} | {run['held_out_segments']['mean']:.1f} | "
                    f"{run['held_out_segments']['share_with_5_or_more']:.0%} | {run_train['cv_target']['texts']} | "
                    f"{row['m_acc']:.3f} | {row['mean_cosine']:.3f} | {shown(row['spliced_top1'])} | {shipped} |")
    ours, theirs = evaluation["rows"]["memory"], ablation_eval["rows"]["memory"]
    compared = {"higher": [], "lower": [], "the same": []}
    for key in ("m_acc", "mean_cosine", "spliced_top1"):
        if None not in (ours[key], theirs[key]):
            side = "higher" if ours[key] > theirs[key] else "lower" if ours[key] < theirs[key] else "the same"
            compared[side].append(MEASURES[key])
    return {"evaluation": ablation_eval, "rows": "\n".join(rows),
            "verdict": "; ".join(f"{side} on {', '.join(measures)}" for side, measures in compared.items() if measures),
            "cv_share": f"{ablation_eval['held_out_segments']['share_with_5_or_more']:.0%}",
            "m_acc": f"{theirs['m_acc']:.3f}", "window_m_acc": f"{ablation_eval['rows']['window']['m_acc']:.3f}",
            "above_window": theirs["m_acc"] > ablation_eval["rows"]["window"]["m_acc"]}


def card_context(train_config, train, evaluation, export, ablation=None):
    """The values card.md shows, from the run records: the records themselves (for numbers printed as they are)
    and ready-made strings (formatted numbers, tables, the YAML front matter); ablation: (its evaluation, its
    training metrics) or None."""
    rows, splice, memory = evaluation["rows"], evaluation["splice"], evaluation["rows"]["memory"]
    base, teacher = train_config["base"], train_config["teacher"].split(":")[-1]
    source = "ImageInWords" if train_config["texts"] is None else Path(train_config["texts"]).name
    source_id = "google/imageinwords" if source == "ImageInWords" else None
    measured = [(key, metric, name) for key, metric, name in (
        ("m_acc", "accuracy", "m_acc (top-1 retrieval of the teacher embedding)"),
        ("recall_at_5", "recall", "recall@5"), ("mrr", "mrr", "MRR"),
        ("spliced_top1", "accuracy", f"spliced-tails top-1 (of {splice['k']}, {splice['groups']} groups)"))
        if memory[key] is not None]
    held_out = f"{source} held-out long descriptions ({evaluation['gallery']})"
    results = [{"task_type": "feature-extraction", "dataset_type": source_id or source, "dataset_name": held_out,
                "metric_type": metric, "metric_name": name, "metric_value": round(memory[key], 4)}
               for key, metric, name in measured]
    validation = train["history"]["validation"]
    # What a user would pick instead: the base reading the whole text where it can (all-MiniLM-L6-v2 reads 256
    # tokens natively; CLIP's text tower cannot), else the base on its own window.
    alternative = "whole" if "whole" in rows else "window"
    overview = cards.Overview(
        model=registry.GEOLIP.folder, job="long image descriptions and captions, embedded in its base's space",
        reads=f"{evaluation['covered_tokens']} tokens ({evaluation['base_window']} through the base's window, the "
              f"rest through the memory's {evaluation['segment_size']}-token segments)",
        width=export["hidden_size"], similarity="cosine (the dot product of its unit vectors)",
        alternative=f"{base} reading the whole text" if alternative == "whole" else f"{base} on its window",
        results=[(name, held_out, memory[key], rows[alternative][key]) for key, _, name in measured
                 if rows[alternative][key] is not None])
    return {
        "overview": overview,
        "hard_negative_groups": train.get("hard_negative_groups", 0),  # runs before the option trained without
        "metadata": cards.front_matter(
            library_name="transformers", pipeline_tag="feature-extraction",
            tags=["sentence-embeddings", "remote-code", "long-context", "distillation"],
            base_model=f"sentence-transformers/{base}" if base == "all-MiniLM-L6-v2" else base,
            datasets=[source_id] if source_id else None, model_name=registry.GEOLIP.folder, results=results),
        "train_config": train_config, "train": train, "evaluation": evaluation, "export": export,
        "base": base, "teacher": teacher, "source": source,
        "clip_base": export["base_model_type"] == "clip_text_model",
        "trainable_millions": f"{train['trainable_parameters'] / 1e6:.1f}",
        "trainable": f"{train['trainable_parameters']:,}", "base_parameters": f"{train['base_parameters']:,}",
        "clip_l_trainable_millions": f"{export['clip_l_trainable'] / 1e6:.1f}",
        "parameters": f"{export['parameters']:,}",
        "embedding_space_paragraph": cards.embedding_space_paragraph(export, "model.embedding_space"),
        "inputs_and_threads_paragraph": cards.inputs_and_threads_paragraph(),
        "token_slots": evaluation["segment_size"] * evaluation["max_segments"],
        "mean_tokens": f"{evaluation['held_out_tokens']['mean']:.0f}",
        "median_tokens": f"{evaluation['held_out_tokens']['median']:.0f}",
        "window_spliced_top1": shown(rows["window"]["spliced_top1"]),
        "retrieval_table": retrieval_table(evaluation), "shortfalls": shortfalls(evaluation),
        "cosine_above_baselines": all(memory["mean_cosine"] > rows[name]["mean_cosine"]
                                      for name in BASELINES if name in rows),
        "goals_table": goals_table(export["goals"], evaluation),
        "ablation": None if ablation is None else ablation_comparison(evaluation, train, *ablation),
        "training_texts": f"{train['training_texts']:,}", "flickr_captions": f"{train_config['flickr_captions']:,}",
        "teacher_bf16": train_config["teacher_precision"] == "bf16", "teacher_minutes": train.get("teacher_minutes"),
        "init_cosine_before": f"{train['projector_init']['cosine_before']:.3f}",
        "init_cosine_after": f"{train['projector_init']['cosine_after']:.3f}",
        "cv_target": f"{train['cv_target']['value']:.4f}",
        "steps": f"{train_config['steps']:,}", "learning_rate": f"{train_config['learning_rate']:g}",
        "validation_steps": ", ".join(str(point["step"]) for point in validation),
        "validation_m_acc": ", ".join(f"{point['m_acc']:.3f}" for point in validation),
    }


def context_from_records(folder, root=runs.ROOT):
    """card_context's values from run records alone: this export run's config.json and metrics.json, and the
    training, evaluation and ablation runs its config names, relative to root."""
    config = runs.read_json(Path(folder) / "config.json")
    train = root / config["train"]
    ablation = None
    if config["ablation"] is not None:
        ablation_train = root / runs.read_json(root / config["ablation"] / "config.json")["train"]
        ablation = (runs.read_json(root / config["ablation"] / "metrics.json"),
                    runs.read_json(ablation_train / "metrics.json"))
    return card_context(runs.read_json(train / "config.json"), runs.read_json(train / "metrics.json"),
                        runs.read_json(root / config["eval"] / "metrics.json"),
                        runs.read_json(Path(folder) / "metrics.json"), ablation)


def card_from_records(folder, root=runs.ROOT):
    """The card's text from run records alone (tools/cards.py regenerates cards with it)."""
    return cards.render(Path(__file__).with_name("card.md"), **context_from_records(folder, root))


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
                  "embedding_space": exported["embedding_space"], "goals": goals(evaluation, config)}
        train_run = runs.read_json(config.train / "run.json")
        export["train_wall_minutes"] = round(runs.elapsed_minutes(train_run["started"], train_run["finished"]), 1)
        runs.write_json(config.out / "metrics.json", export)
        path = config.to / "README.md"
        path.write_text(card_from_records(config.out))
    print(f"wrote {path}\n")
    print(retrieval_table(evaluation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
