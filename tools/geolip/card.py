"""geolip-clip-ctx576's model card: CARD, its Markdown template (card.md, Jinja), and card_context, the values that
fill it, computed from run records alone (tools/cards.py renders them: `make cards`, and the export's card)."""

from pathlib import Path


from tools import card_engine, registry
from tools.geolip.metrics import ROWS


CARD = Path(__file__).with_name("card.md")  # the Markdown template (Jinja) card_context fills
BASELINES = ("window", "window_linear", "first_segment", "segment_mean", "blend", "whole")


MEASURES = {"m_acc": "m_acc", "recall_at_5": "recall@5", "mrr": "MRR", "mean_cosine": "mean cosine to the teacher",
            "spliced_top1": "spliced-tails top-1"}


def row_name(name, evaluation):
    """A row's name in the card: the windows it reads and the blend's weight are the evaluation's."""
    if name == "blend":
        weight = evaluation["blend_weight"]
        return (f"the best fixed blend of the window and the segment mean (unit vectors; the window's weight "
                f"{weight:.2f}, fitted on training texts)")
    return {"memory": "**memory (this model)**",
            "memory_linear": "memory, through a linear map fitted on every training text (not its trained projector)",
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
            ("cosine_above_window", "mean cosine to the teacher above the base on its window", "{:.3f}", "> {:.3f}"),
            ("beats_every_reader", "measures (m_acc, mean cosine, spliced top-1) on which a reader with no training "
             "(window, window through a linear map, first segment, segment mean, blend) scores at least as high",
             "{}", "{}")):
        if key not in goals:  # a release before the goal
            continue
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


def card_context(records):
    """The values card.md shows, from the run records (a card_engine.Records of the export run): the records themselves
    (for numbers printed as they are) and ready-made strings (formatted numbers, tables, the YAML front matter). Read:
    the training and evaluation runs the export names, and the ablation's evaluation and training metrics (or
    None)."""
    train_config, train = records.read("train", "config.json"), records.read("train")
    evaluation, export = records.read("eval"), records.own()
    ablation = None if records.read("ablation") is None else (records.read("ablation"),
                                                              records.follow("ablation", "train"))
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
    overview = card_engine.Overview(
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
        "metadata": card_engine.front_matter(
            library_name="transformers", pipeline_tag="feature-extraction",
            tags=["sentence-embeddings", "remote-code", "long-context", "distillation"],
            base_model=f"sentence-transformers/{base}" if base == "all-MiniLM-L6-v2" else base,
            datasets=[source_id] if source_id else None, model_name=registry.GEOLIP.folder, results=results),
        "train_config": train_config, "train": train, "evaluation": evaluation, "export": export,
        "start": train_config.get("start", "window"),  # runs before the option started from the window
        "blend_weight": f"{train['projector_init'].get('blend_weight', 0):.2f}",
        "base": base, "teacher": teacher, "source": source,
        "clip_base": export["base_model_type"] == "clip_text_model",
        "trainable_millions": f"{train['trainable_parameters'] / 1e6:.1f}",
        "trainable": f"{train['trainable_parameters']:,}", "base_parameters": f"{train['base_parameters']:,}",
        "clip_l_trainable_millions": f"{export['clip_l_trainable'] / 1e6:.1f}",
        "parameters": f"{export['parameters']:,}",
        "embedding_space_paragraph": card_engine.embedding_space_paragraph(export, "model.embedding_space"),
        "inputs_and_threads_paragraph": card_engine.inputs_and_threads_paragraph(),
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
