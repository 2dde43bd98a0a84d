"""Put a trained geolip memory (with its frozen base) into the geolip-clip-ctx576 Hub folder and write its model
card from the run records.

Usage (the order make demo runs them in):
    python -m tools.train_geolip --out runs/demo/geolip/train
    python -m tools.evaluate_geolip --train runs/demo/geolip/train --out runs/demo/geolip/eval
    python -m tools.train_geolip --out runs/demo/geolip/train-seg55 --segment-size 55 --segment-stride 43
    python -m tools.evaluate_geolip --train runs/demo/geolip/train-seg55 --out runs/demo/geolip/eval-seg55
    python -m tools.export_geolip --train runs/demo/geolip/train --eval runs/demo/geolip/eval \\
        --ablation runs/demo/geolip/eval-seg55 --out runs/demo/geolip/export

What it does:
    1. checks that the evaluation scored exactly the trained weights (same sha256);
    2. copies the weights (frozen base included), config.json, the tokenizer's files and the training curve into the
       folder; the folder's own remote code stays (it is the source; tools/vendor.py keeps its shared_*.py in sync);
    3. loads the folder with AutoModel in a fresh process with the project NOT importable, and checks that it embeds
       the held-out texts as the trained final/ folder does (max difference <= max_difference);
    4. records the checks in the out folder (metrics.json) and writes README.md from the run records; the
       ablation (a run with other segments, scored by tools/evaluate_geolip.py) is an optional row.
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

from tools import cards, encoders, runs
from tools.evaluate_geolip import training_config
from tools.train_geolip import split_texts

GEOLIP = runs.ROOT / "geolip-clip-ctx576"
ROW_NAMES = {"memory": "**memory (this model)**", "truncated": "base truncated to its first window",
             "segment_mean": "mean of the base's per-segment embeddings"}


@dataclass
class Config:
    train: Path  # tools/train_geolip.py run folder (final/, metrics.json)
    eval: Path  # tools/evaluate_geolip.py run that scored train/final
    out: Path  # run folder for this export's checks
    ablation: Path | None = None  # tools/evaluate_geolip.py run of a training run with other segments
    to: Path = GEOLIP  # the Hub folder to fill
    parity_texts: int = 64  # held-out texts the fresh-process load is checked on
    max_difference: float = 1e-5  # largest allowed |exported - trained| embedding entry
    goal_m_acc: float = 0.90  # the goal the card measures the memory against: this m_acc ...
    goal_gallery: int = 500  # ... on a gallery of at least this many held-out texts


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ablation", type=Path, help="tools/evaluate_geolip.py run of an ablation training run")
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


# ---- the model card ------------------------------------------------------------------------------------------------

def retrieval_table(rows):
    lines = ["| embedding | m_acc (top-1) | recall@5 | MRR | mean cosine to the teacher |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {ROW_NAMES[name]} | {row['m_acc']:.3f} | {row['recall_at_5']:.3f} | {row['mrr']:.3f} | "
                     f"{row['mean_cosine']:.3f} |")
    return "\n".join(lines)


def ablation_table(main_eval, main_train, ablation_eval, ablation_train):
    lines = ["| segments (tokens / stride) | held-out segments per text | texts with >= 5 segments (CV acts) | "
             "training texts in the CV target | m_acc | recall@5 |", "|---|---|---|---|---|---|"]
    for evaluation, train in ((main_eval, main_train), (ablation_eval, ablation_train)):
        row = evaluation["rows"]["memory"]
        lines.append(f"| {evaluation['segment_size']} / {evaluation['segment_stride']} | "
                     f"{evaluation['held_out_segments']['mean']:.1f} | "
                     f"{evaluation['held_out_segments']['share_with_5_or_more']:.0%} | {train['cv_target']['texts']} | "
                     f"{row['m_acc']:.3f} | {row['recall_at_5']:.3f} |")
    return "\n".join(lines)


def build_card(train_config, train, evaluation, export, ablation=None):
    rows = evaluation["rows"]
    memory = rows["memory"]
    beats = all(memory[key] > rows[base][key] for base in ("truncated", "segment_mean")
                for key in ("m_acc", "recall_at_5"))
    goal = ("meets" if memory["m_acc"] >= export["goal_m_acc"] and evaluation["gallery"] >= export["goal_gallery"]
            else "does not meet")
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
    else:
        banner = f"""> **These weights are not the CLIP-L model the name refers to.** No CLIP weights install from PyPI,
> so the bundle's embedded default (`make demo`, preset `{train_config['preset']}`) freezes **{base}**
> ({train['base_parameters']:,} parameters, {export['hidden_size']}-d, {export['base_pooling']} pooling) as the
> short-window base and distils from **{teacher}** reading the whole text. The published recipe (CLIP-L's text
> tower, ModernBERT-large, CC12M captions, a GPU) is `tools/train_geolip.py --preset paper`; at CLIP-L size the
> same memory has {export['clip_l_trainable'] / 1e6:.1f}M trainable parameters (the published model: 34.5M)."""
        space = (f"the base here is {base}, not CLIP: the embedding is in its sentence space, not CLIP's joint "
                 "image-text space, so it does not pair with CLIP image embeddings")
    closest = max(rows, key=lambda name: rows[name]["mean_cosine"])
    cosine_note = "" if closest == "memory" else (
        f" Its mean cosine to the teacher ({memory['mean_cosine']:.3f}) is lower than the {ROW_NAMES[closest]}'s "
        f"({rows[closest]['mean_cosine']:.3f}): InfoNCE trains it to rank the right teacher embedding first, not to "
        "sit closest to it in absolute terms.")
    teacher_precision = " in bf16 autocast" if train_config.get("teacher_bf16") else ""
    teacher_time = (f"teacher embeddings {train['teacher_minutes']} min" if train.get("teacher_minutes")
                    else "teacher embeddings read from a cache")
    ablation_section = ""
    if ablation is not None:
        ablation_eval, ablation_train = ablation
        other = ablation_eval["rows"]["memory"]["m_acc"]
        if other > memory["m_acc"]:
            verdict = (f"Here the published argument does not hold: {ablation_eval['segment_size']}-token segments "
                       f"score higher ({other:.3f} vs {memory['m_acc']:.3f}). These descriptions are long enough that "
                       f"{ablation_eval['held_out_segments']['share_with_5_or_more']:.0%} of them still get 5 "
                       "segments, so the CV term is not dead, and each segment gives the base more context (its "
                       f"first window alone reaches {ablation_eval['rows']['truncated']['m_acc']:.3f}).")
        else:
            verdict = (f"As the published card argues, the {evaluation['segment_size']}-token segments score higher "
                       f"({memory['m_acc']:.3f} vs {other:.3f}).")
        ablation_section = f"""
## Ablation: segment length, with the CV term on

The pentachoron CV term needs at least 5 segment anchors per text. The published card argues that with 55-token
segments it is dead and the projector shortcut wins (m_acc .670), while 18-token segments force the memory to
accumulate (.945). The same recipe here, only the segments changed:

{ablation_table(evaluation, train, ablation_eval, ablation_train)}

(m_acc on the same {evaluation['gallery']} held-out texts, both runs scored by the same evaluation.) {verdict}
"""
    source_id = "google/imageinwords" if source == "ImageInWords" else None
    results = [{"task_type": "feature-extraction", "dataset_type": source_id or source,
                "dataset_name": f"{source} held-out long descriptions ({evaluation['gallery']})",
                "metric_type": metric, "metric_name": name, "metric_value": round(memory[key], 4)}
               for key, metric, name in (("m_acc", "accuracy", "m_acc (top-1 retrieval of the teacher embedding)"),
                                         ("recall_at_5", "recall", "recall@5"), ("mrr", "mrr", "MRR"))]
    metadata = cards.front_matter(library_name="transformers", pipeline_tag="feature-extraction",
                                  tags=["sentence-embeddings", "remote-code", "long-context", "distillation"],
                                  base_model=base_id, datasets=[source_id] if source_id else None,
                                  model_name="geolip-clip-ctx576", results=results)
    return f"""{metadata}
# geolip-clip-ctx576

A frozen short-window text encoder extended to long texts by a trained geometric memory: the text is cut into
overlapping {evaluation['segment_size']}-token segments, every segment runs through the frozen base in one batched call,
and a {train['trainable_parameters'] / 1e6:.1f}M-parameter memory ({train['trainable_parameters']:,} trainable
parameters) reads them in order and writes one {export['hidden_size']}-d, L2-normalised embedding in the base's
own embedding space.

{banner}
> Every number below is generated from the run records by `tools/export_geolip.py`.

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
{evaluation['gallery']} teacher embeddings; m_acc is top-1 retrieval of its own. Each baseline is mapped into the
teacher's space by its own orthogonal Procrustes map, fitted on the same {train_config['init_texts']} training texts
as the projector's initialisation, so all rows get the same kind of linear help.

{retrieval_table(rows)}

The memory {'beats' if beats else 'does not beat'} both baselines on top-1 and recall@5, and {goal} the goal of
m_acc >= {export['goal_m_acc']} on a gallery of >= {export['goal_gallery']} held-out long texts (the published run:
0.945 on its CC12M validation captions).{cosine_note}
{ablation_section}
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
  {train_config['learning_rate']:g}, weight decay {train_config['weight_decay']}), linear warm-up and decay, bf16
  autocast, seed {train_config['seed']}: {train['training_minutes']} min of training on a 2-core CPU,
  {export['train_wall_minutes']} min for the whole run ({teacher_time} and evaluations included).
- **Validation m_acc** during training (steps {', '.join(map(str, steps))}): {history}.

![training curve](training_curve.png)

## Limits

- {space[0].upper() + space[1:]}.
- Trained on {train['training_texts']:,} texts for minutes on a CPU, one seed; the seed-to-seed spread was not
  measured. The held-out texts come from the same source ({source}) as the training descriptions.
- m_acc measures agreement with the teacher, not a downstream task; the model can only approach what the teacher
  encodes.

## Source

Built by `tools/train_geolip.py`, `tools/evaluate_geolip.py` and `tools/export_geolip.py` in the bundle's source
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

    with runs.RunRecord(config.out, config, "export_geolip"):
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
                  "embedding_space": exported["embedding_space"], "goal_m_acc": config.goal_m_acc,
                  "goal_gallery": config.goal_gallery}
        train_run = runs.read_json(config.train / "run.json")
        export["train_wall_minutes"] = round(runs.elapsed_minutes(train_run["started"], train_run["finished"]), 1)
        runs.write_json(config.out / "metrics.json", export)
        path, card = card_from_records(config.out)
        path.write_text(card)
    print(f"wrote {path}\n")
    print(retrieval_table(evaluation["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
