"""Build a captionbert-8192-v2 folder from a distilled student (and its arms) and write its model card from the run
records. The folder is built inside the export run (<out>/captionbert-8192-v2/, starting from the Hub folder's own
files); `make release` (tools/release.py) copies a build into the Hub folder.

Usage (the order make demo runs them in):
    python -m tools.captionbert.evaluate --out runs/demo/eval --encoder captionbert-8192-v2=runs/demo/distill/final \\
        --encoder teacher:all-mpnet-base-v2 --encoder teacher:all-MiniLM-L6-v2 --encoder teacher:paraphrase-MiniLM-L3-v2
    python -m tools.captionbert.export --extract runs/demo/extract --align runs/demo/align \\
        --distill runs/demo/distill --eval runs/demo/eval

What it does:
    1. checks that the student's config matches the folder's architecture and that the evaluation scored exactly
       these weights (same sha256), so every number in the card belongs to the weights beside it;
    2. copies model.safetensors and the loss curve into the folder (config, code and tokenizer are the folder's own;
       `make check-vendor` guards the vendored code) and writes its sentence-transformers files (modules.json,
       sentence_bert_config.json, config_sentence_transformers.json) from its config;
    3. loads the folder with AutoModel in a fresh process and checks it embeds like the trained student, and with
       SentenceTransformer(trust_remote_code=True) in the same process, which must give AutoModel's embeddings;
    4. with --amoe (a tools/captionbert/amoe/train.py select run on these weights): copies its amoe/ library into the
       folder
       and checks, in a fresh process, that attach_amoe() loads the shipped collective and that amoe_off() gives
       the bare embeddings bit for bit (a selection where no roster beat the trunk ships the solo arms and no
       collective: attach_amoe() must then raise naming them, and one attaches alone; the card says so);
    5. writes README.md from its template, card.md, filled by card_context from the run records: the STS-8 table
       (student, every teacher, all-MiniLM-L6-v2 for scale), how it was built (corpus, teachers, alignment,
       training), the AMOE arms (trunk, solo arms, collective, control; selection, amplitude budget, tau sweep; with
       --levers, the tools/captionbert/amoe/levers.py table) and the known limits re-measured on this run. Nothing
       is typed.
"""

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools import cards, encoders, registry, runs, sts

STUDENT = registry.CAPTIONBERT.folder  # its row in the evaluation
FOR_SCALE = "all-MiniLM-L6-v2"
FROM_SCRATCH = "captionbert-8192-v2 (from scratch)"  # the same budget trained from a random init (evaluate row)
STATIC = "model2vec(all-mpnet-base-v2)"  # the static distillation of the reference teacher (evaluate row)
ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "output_dim", "layer_norm_eps", "pad_token_id", "model_type")
PROBE_TEXTS = ["A dog runs across the grass.", "Two men play chess in a park at dusk."]
STS_DATASETS = {"STS12": "mteb/sts12-sts", "STS13": "mteb/sts13-sts", "STS14": "mteb/sts14-sts",
                "STS15": "mteb/sts15-sts", "STS16": "mteb/sts16-sts", "STS-B": "mteb/stsbenchmark-sts",
                "SICK-R": "mteb/sickr-sts", "BIOSSES": "mteb/biosses-sts"}  # the MTEB copies of the eight test sets
ST_TOLERANCE = 1e-5  # SentenceTransformer vs AutoModel encode: the same forward, batched differently


@dataclass
class Config:
    extract: Path  # tools/captionbert/extract.py folder
    align: Path  # tools/captionbert/align.py folder
    distill: Path  # tools/captionbert/train.py folder (final/ holds the student)
    eval: Path  # tools/captionbert/evaluate.py run that scored the student (row STUDENT) and the teachers
    out: Path  # run folder for this export's checks (config.json, run.json, metrics.json)
    goal_mean: float = 0.76  # the cpu budget's STS-8 mean goal (issue 18) the card measures the student against
    to: Path | None = None  # the folder to build (default <out>/<its Hub folder's name>); make release copies it
    #                         into the Hub folder
    hub: Path | None = None  # the folder whose own files (code, config, tokenizer) the build starts from (default:
    #                          the Hub folder; None keeps the record free of this machine's absolute paths)
    amoe: Path | None = None  # tools/captionbert/amoe/train.py select run whose amoe/ library ships with these weights
    long: Path | None = None  # tools/captionbert/long_inputs.py run that scored the student's long inputs
    levers: Path | None = None  # tools/captionbert/amoe/levers.py run (its levers.json): the card's levers table


def check_inputs(config):
    """(student folder, eval metrics), after checking that the records describe one consistent build."""
    final = config.distill / "final"
    for path in (final / "model.safetensors", config.eval / "metrics.json", config.align / "report.json",
                 config.extract / "manifest.json", config.distill / "metrics.json"):
        if not path.exists():
            raise SystemExit(f"{path} not found: run the steps in this tool's usage first")
    student, folder = runs.read_json(final / "config.json"), runs.read_json(config.to / "config.json")
    differ = {k: (student.get(k), folder.get(k)) for k in ARCHITECTURE_KEYS if student.get(k) != folder.get(k)}
    if differ:
        raise SystemExit(f"the student's architecture differs from {config.to}: {differ}")
    metrics = runs.read_json(config.eval / "metrics.json")
    if STUDENT not in metrics:
        raise SystemExit(f"{config.eval} has no row {STUDENT!r}: evaluate with --encoder {STUDENT}={final}")
    encoders.require_scored(metrics[STUDENT]["weights_sha256"], final, config.eval)
    if FOR_SCALE not in metrics:  # the card and the README compare the model with it
        raise SystemExit(f"{config.eval} has no row {FOR_SCALE!r}: evaluate with --encoder teacher:{FOR_SCALE} too")
    if config.long is not None and runs.read_json(config.long / "metrics.json")["weights_sha256"] != metrics[STUDENT][
            "weights_sha256"]:
        raise SystemExit(f"{config.long} scored other weights than {final}: run tools.captionbert.long_inputs again")
    return final, metrics


def sentence_transformers_files(model_config):
    """{file name: JSON} that make a captionbert folder a Sentence Transformers model. One module, the folder's own
    sentence_transformers_module.CaptionBertTransformer: the stock Transformer running the model's forward and taking
    its pooler_output (the normalised embedding `encode` returns), so no Pooling or Normalize module follows; inputs
    are truncated at the positions training reached (else the model's positions), as `encode` does."""
    return {
        "modules.json": [{"idx": 0, "name": "0", "path": "",
                          "type": "sentence_transformers_module.CaptionBertTransformer"}],
        "sentence_bert_config.json": {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "pooler_output"}},
            "module_output_name": "sentence_embedding",
            "max_seq_length": model_config.get("trained_length") or model_config["max_position_embeddings"],
        },
        "config_sentence_transformers.json": {"model_type": "SentenceTransformer", "prompts": {},
                                              "default_prompt_name": None, "similarity_fn_name": "cosine"},
    }


def write_sentence_transformers_files(folder):
    """Write those files into `folder`, from its config.json."""
    for name, payload in sentence_transformers_files(runs.read_json(Path(folder) / "config.json")).items():
        runs.write_json(Path(folder) / name, payload)


# ---- the model card ------------------------------------------------------------------------------------------------

CARD = Path(__file__).with_name("card.md")  # the card's Markdown template (Jinja), filled by card_context's values


def sts_table(metrics, extract_manifest):
    """The STS-8 table: the student, the from-scratch and static rows when evaluated, every teacher, and FOR_SCALE."""
    teachers = [t["name"] for t in extract_manifest["teachers"]]
    order = [STUDENT] + [name for name in (FROM_SCRATCH, STATIC) if name in metrics] + teachers
    order += [FOR_SCALE] if FOR_SCALE in metrics and FOR_SCALE not in teachers else []
    missing = [name for name in order if name not in metrics]
    if missing:
        raise SystemExit(f"the evaluation lacks rows for {missing}: evaluate every teacher beside the student")
    header = ["model", "role", *sts.TASKS, "mean", "self_cos", "erank", "erank_sts"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in order:
        row = metrics[name]
        role = {STUDENT: "student", FROM_SCRATCH: "the same budget from a random init",
                STATIC: "what a user might pick instead: static distillation of the reference teacher, no training",
                teachers[0]: "teacher (reference frame)"}.get(name, "teacher")
        if name == FOR_SCALE:
            role += "; for scale, not as a peer" if name in teachers else "for scale, not as a peer"
        cells = [f"**{name}**" if name == STUDENT else name, role]
        cells += [f"{row[t]:.4f}" for t in (*sts.TASKS, "mean")]
        cells += [f"{row['self_cos']:+.3f}", f"{row['erank']:.1f}", f"{row['erank_sts']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def amoe_table(select, references=None):
    """STS-8 and caption-gauge rows with arms: the trunk, each solo arm, the shipped collective and its control, then
    the references (eval rows, e.g. all-MiniLM-L6-v2 and the reference teacher) in the same harness."""
    rows, tasks = select["rows"], [t for t in sts.TASKS if t in select["rows"]["trunk"]]
    trunk, roster = rows["trunk"], (select["shipped"] or {}).get("roster", [])
    lines = ["| row | " + " | ".join(tasks) + " | mean | vs trunk | tasks above trunk | Flickr8k R@1 | Flickr8k MRR |",
             "|" + "---|" * (len(tasks) + 6)]
    for name, row in {**rows, **(references or {})}.items():
        above = sum(row[t] > trunk[t] for t in tasks)
        label = f"**collective ({' + '.join(roster)})**" if name == "collective" else name
        lines.append(f"| {label} | " + " | ".join(f"{row[t]:.4f}" for t in tasks)
                     + f" | {row['mean']:.4f} | {row['mean'] - trunk['mean']:+.4f} | "
                     + ("-" if name == "trunk" else f"{above}/{len(tasks)}")
                     + f" | {row['flickr8k_recall@1']:.4f} | {row['flickr8k_mrr']:.4f} |")
    return "\n".join(lines)


def levers_table(levers):
    """The card's table of a tools/captionbert/amoe/levers.py run (levers.json): the bare trunk, one row per lever."""
    trunk = levers["trunk"]
    lines = ["| lever | arm | what changes | steps | minutes | validation (trunk on the same sets) | STS-8 | vs trunk "
             "| tasks above trunk | Flickr8k R@1 | Flickr8k MRR |", "|" + "---|" * 11,
             f"| - | bare trunk | - | - | - | {trunk['validation']['mean']:.4f} | {trunk['sts8']['mean']:.4f} | | | "
             f"{trunk['sts8']['flickr8k_recall@1']:.4f} | {trunk['sts8']['flickr8k_mrr']:.4f} |"]
    for row in levers["rows"]:
        validation = ("not judged: trains on a selection set's source" if row["validation"] is None else
                      f"{row['validation']:.4f} ({row['trunk_validation']:.4f})")
        lines.append(f"| {row['lever']} | {row['name']} | {row['change']} | {row['steps']} | "
                     f"{row['training_minutes']:.1f} | {validation} | "
                     f"{row['sts8']:.4f} | {row['sts8_gain']:+.4f} | {row['tasks_above_trunk']}/{row['tasks']} | "
                     f"{row['flickr8k_recall@1']:.4f} | {row['flickr8k_mrr']:.4f} |")
    return "\n".join(lines)


def origin(init):
    """The card's first sentence's account of where the weights started (train.py's `init` record)."""
    teacher = Path(init.get("teacher", "").removeprefix("teacher:")).name
    if init["kind"] == "select":
        return (f"distilled from the geometric consensus of several teachers, starting from {teacher}'s own weights "
                "(weight selection; the table below has the same budget from scratch)")
    if init["kind"] == "static":
        return (f"distilled from the geometric consensus of several teachers, its token embeddings starting from a "
                f"static distillation of {teacher}")
    return "distilled from scratch from the geometric consensus of several teachers"


def training_start(init):
    """The training paragraph's opening: where the student's weights started (train.py's `init` record)."""
    if init["kind"] == "select":
        teacher = Path(init["teacher"].removeprefix("teacher:")).name
        return (f"Started from {teacher}'s own weights by weight selection "
                f"(`--init select`, {init['selection']}; tools/captionbert/teacher_init.py): "
                f"{len(init['dims'])} of its residual "
                f"dimensions, {len(init['heads'][0])} heads and as many FFN units as the student has per layer, "
                f"{init['tokens_mapped']:,} of {init['vocab_size']:,} token embeddings mapped by token string, "
                f"{init['positions_from_teacher']} positions; " + (
                    f"the sentence head's last layer fitted by least squares to the consensus rows of those "
                    f"{init['importance_texts']:,} texts (cosine {init['head']['fit_cosine']:.3f})"
                    if init["head"]["kind"] == "fit" else "the sentence head starts random") + ". Then trained")
    if init["kind"] == "static":
        teacher = Path(init["teacher"].removeprefix("teacher:")).name
        return (f"Started from model2vec's static distillation of {teacher} (`--init static`; "
                "tools/captionbert/teacher_init.py) "
                f"for {init['tokens_mapped']:,} of its {init['vocab_size']:,} token embeddings (PCA to "
                f"{init['pca_dims']}), every other weight random" + (
                    f", the sentence head's last layer fitted by least squares to the consensus rows of "
                    f"{init['head']['texts']:,} training texts (cosine {init['head']['fit_cosine']:.3f})"
                    if init["head"]["kind"] == "fit" else "") + ". Then trained")
    return "From scratch (a random init, the published recipe)"


def long_inputs_context(long_inputs):
    """The long-input paragraph's values and table rows, from tools/captionbert/long_inputs.py's metrics."""
    tokens, rows = long_inputs["tokens"], long_inputs["rows"]
    first = next(iter(rows))
    return {"texts": long_inputs["texts"], "median": tokens["median"], "p90": tokens["p90"], "longest": tokens["max"],
            "teacher": long_inputs["teacher"].removeprefix("teacher:"),
            "teacher_max_length": long_inputs["teacher_max_length"], "first": first,
            "whole_at_least_as_close": rows["whole"]["cosine"] >= rows[first]["cosine"],
            "rows": [{"name": name, "tokens": row["tokens"], "cosine": f"{row['cosine']:.4f}",
                      "top1": f"{row['top1']:.4f}"} for name, row in rows.items()]}


def amoe_context(select, arms_json, references=None, levers=None):
    """The AMOE section's values and table rows, from a tools/captionbert/amoe/train.py select run (metrics.json)
    and its ARMS.json; references: eval rows shown beside the arms (amoe_table); levers: a
    tools/captionbert/amoe/levers.py run's levers.json."""
    if "validation_against_sts8" not in select:
        return legacy_amoe_context(select, arms_json)
    selection = [{"arm_count": step["arm_count"], "candidate": name,
                  "validation": f"{trial['validation']['mean']:.4f}",
                  "margin": f"{trial['margin_over_control']:+.4f}",
                  "verdict": step["verdict"] if name == step["best"] else "not best"}
                 for step in select["steps"]
                 for name, trial in sorted(step["candidates"].items(),
                                           key=lambda item: -item[1]["margin_over_control"])]
    diagnostic = select["validation_against_sts8"]
    rows = [{"run": f"solo {row['candidate']} seed {row['seed']}", "validation_gain": f"{row['validation_gain']:+.4f}",
             "sts8_gain": f"{row['sts8_gain']:+.4f}"} for row in diagnostic["solo"]]
    rows += [{"run": " + ".join(row["roster"]), "validation_gain": f"{row['validation_gain']:+.4f}",
              "sts8_gain": f"{row['sts8_gain']:+.4f}"} for row in diagnostic["rosters"] if len(row["roster"]) > 1]
    library = arms_json["arms"]
    trains_on = {name: arm["data"].get("labelled_source") or "teacher-labelled" for name, arm in library.items()}
    context = {"legacy": False, "shipped": select["shipped"] is not None, "table": amoe_table(select, references),
               "bar": f"{select['bar']:.4f}", "selection": selection, "diagnostic": rows,
               "spearman": "-" if diagnostic["spearman_solo"] is None else f"{diagnostic['spearman_solo']:+.2f}",
               "sources": "; ".join(f"{name}: {source}" for name, source in trains_on.items()),
               "gauge_images": f"{select['rows']['trunk']['flickr8k_images']:,}",
               "arm_count": len(library), "first_arm": min(library),
               "library": [{"name": name, "source": arm["data"]["source"], "rows": f"{arm['data']['rows']:,}",
                            "held_out": f"{arm['data']['dropped_held_out']:,}", "trains_on": trains_on[name],
                            "steps": arm["training"]["steps"], "batch_size": arm["training"]["batch_size"],
                            "solo": f"{arm['solo_validation']['mean']:.4f}",
                            "seed_spread": f"{arm['seed_spread_validation']:.4f}",
                            "in_collective": arm["in_collective"], "sha256": arm["content_hash"][:12]}
                           for name, arm in library.items()],
               "levers": None if levers is None else {"model": levers["model"], "table": levers_table(levers)},
               "learning_rate": f"{library[min(library)]['training']['learning_rate']:g}",
               "temperature": library[min(library)]["training"]["temperature"]}
    rows, tasks = select["rows"], [t for t in sts.TASKS if t in select["rows"]["trunk"]]
    trunk = rows["trunk"]
    # the diagnostic of the selection's choice: what ships (the collective, or with none the bare trunk) against the
    # best by STS-8 of the rosters tried and the trunk
    tried = [(" + ".join(row["roster"]), row["sts8_gain"]) for row in diagnostic["rosters"]] + [("the bare trunk", 0.0)]
    best_roster, best_gain = max(tried, key=lambda item: item[1])
    chosen = rows["collective"] if select["shipped"] else trunk
    context |= {"selected_sts8": f"{chosen['mean']:.4f}", "best_sts8": f"{trunk['mean'] + best_gain:.4f}",
                "best_roster": best_roster, "within": trunk["mean"] + best_gain - chosen["mean"] <= 0.005,
                **routing_rows(select)}
    if select["shipped"] is None:
        return context | {"reason": select["reason"][0].upper() + select["reason"][1:]}
    collective, roster = rows["collective"], select["shipped"]["roster"]
    gain, above = collective["mean"] - trunk["mean"], sum(collective[t] > trunk[t] for t in tasks)
    gauge = {name: collective[f"flickr8k_{name}"] - trunk[f"flickr8k_{name}"] for name in ("recall@1", "mrr")}
    return context | {
        "collective": select["shipped"]["collective"], "roster": " + ".join(roster), "first_arm": roster[0],
        "gain": f"{gain:+.4f}", "above": above, "tasks": len(tasks), "meets_bar": gain > 0 and above >= len(tasks) - 1,
        "gauge_gain": f"{gauge['mrr']:+.4f}", "gauge_recall_gain": f"{gauge['recall@1']:+.4f}",
        "caption_domain_kept": min(gauge.values()) >= -0.005}


def routing_rows(select, accepted_only=False):
    """The card's rows of every roster's amplitude budget and routing the selection trained ("budget": each
    candidate and control at each arm count, with its verdict; accepted_only: the accepted rosters alone, as the
    legacy card shows them) and of the shipped collective's tau sweep ("sweep", empty when none ships), from a select
    run."""
    trials = [(step, name, trial, step["verdict"] if name == step["best"] else "not best")
              for step in select["steps"] for name, trial in step["candidates"].items()]
    trials += [(step, "control", step["control"], "control") for step in select["steps"]]
    if accepted_only:
        trials = [trial for trial in trials if trial[3] == "accepted"]
    return {
        "budget": [{"arm_count": step["arm_count"], "roster": " + ".join(step["roster_before"] + [name]),
                    "verdict": verdict,
                    "amplitude_budget": None if trial["amplitude_budget"] is None
                    else f"{trial['amplitude_budget']:.3f}",
                    "routing_spread": None if trial["routing_spread"] is None else f"{trial['routing_spread']:.3f}",
                    "alarms": trial["alarms"], "stopped": trial["stopped"]}
                   for step, name, trial, verdict in sorted(trials, key=lambda item: item[0]["arm_count"])],
        "sweep": [{"tau": f"{row['tau']:.2f}", "stsb": f"{row['STS-B']:.4f}",
                   "amplitude_budget": None if row["amplitude_budget"] is None else f"{row['amplitude_budget']:.3f}"}
                  for row in select["tau_sweep"]]}


def legacy_amoe_table(select):
    """legacy_amoe_context's table: STS-8 rows of the trunk, each solo arm, the shipped collective and its control."""
    rows, tasks = select["rows"], [t for t in sts.TASKS if t in select["rows"]["trunk"]]
    trunk, roster = rows["trunk"], (select["shipped"] or {}).get("roster", [])
    lines = ["| row | " + " | ".join(tasks) + " | mean | vs trunk | tasks above trunk |",
             "|" + "---|" * (len(tasks) + 4)]
    for name, row in rows.items():
        above = sum(row[t] > trunk[t] for t in tasks)
        label = f"**collective ({' + '.join(roster)})**" if name == "collective" else name
        lines.append(f"| {label} | " + " | ".join(f"{row[t]:.4f}" for t in tasks)
                     + f" | {row['mean']:.4f} | {row['mean'] - trunk['mean']:+.4f} | "
                     + ("-" if name == "trunk" else f"{above}/{len(tasks)}") + " |")
    return "\n".join(lines)


def legacy_amoe_context(select, arms_json):
    """amoe_context for a selection made before issue 40 (its metrics.json has no validation_against_sts8): the
    card keeps the text of that build's own protocol until the next release replaces it. Delete with the legacy
    branch of card.md's amoe block once records/captionbert-8192-v2 holds a newer selection."""
    selection = [{"arm_count": step["arm_count"], "candidate": name,
                  "validation": f"{trial['validation']['mean']:.4f}",
                  "control": f"{step['control']['validation']['mean']:.4f}",
                  "margin": f"{trial['validation']['mean'] - step['control']['validation']['mean']:+.4f}",
                  "verdict": step["verdict"] if name == step["best"] else "not best"}
                 for step in select["steps"]
                 for name, trial in sorted(step["candidates"].items(), key=lambda item: -item[1]["validation"]["mean"])]
    context = {"legacy": True, "shipped": select["shipped"] is not None, "table": legacy_amoe_table(select),
               "bar": f"{select['bar']:.4f}",
               "selection": selection}
    if select["shipped"] is None:
        first = select["steps"][0]
        return context | {"best": first["best"], "margin": f"{first['margin_over_control']:+.4f}"}
    rows, tasks = select["rows"], [t for t in sts.TASKS if t in select["rows"]["trunk"]]
    trunk, collective, roster = rows["trunk"], rows["collective"], select["shipped"]["roster"]
    gain, above = collective["mean"] - trunk["mean"], sum(collective[t] > trunk[t] for t in tasks)
    training = arms_json["arms"][roster[0]]["training"]
    return context | {
        "arm_count": len(arms_json["arms"]), "collective": select["shipped"]["collective"],
        "roster": " + ".join(roster), "first_arm": roster[0], "gain": f"{gain:+.4f}", "above": above,
        "tasks": len(tasks), "meets_bar": gain > 0 and above >= len(tasks) - 1, "reaches_goal": gain >= 0.06,
        **routing_rows(select, accepted_only=True),
        "library": [{"name": name, "source": arm["data"]["source"], "rows": f"{arm['data']['rows']:,}",
                     "held_out": f"{arm['data']['dropped_held_out']:,}", "steps": arm["training"]["steps"],
                     "batch_size": arm["training"]["batch_size"], "solo": f"{arm['solo_validation']['mean']:.4f}",
                     "seed_spread": f"{arm['seed_spread_validation']:.4f}", "in_collective": arm["in_collective"],
                     "sha256": arm["content_hash"][:12]} for name, arm in arms_json["arms"].items()],
        "learning_rate": f"{training['learning_rate']:g}", "temperature": training["temperature"]}


def amoe_section(select, arms_json, references=None, levers=None):
    """The card's AMOE part alone: card.md's block `amoe`, rendered with amoe_context's values."""
    return cards.render(CARD, block="amoe", amoe=amoe_context(select, arms_json, references, levers))


def card_context(metrics, extract_manifest, extraction, align_report, distill_metrics, distill_config, export,
                 select=None, arms_json=None, long_inputs=None, levers=None):
    """The values card.md shows, as ready-made strings, table rows and the flags its conditional sentences read, from
    the run records: the evaluation's, the extraction's manifest and extraction.json, the alignment report, the
    distillation's metrics and config, this export's metrics, and optionally the arm selection (select's metrics.json,
    with its ARMS.json when a collective shipped), the long-input run's metrics and the levers run's levers.json."""
    student, teachers = metrics[STUDENT], extract_manifest["teachers"]
    best_teacher = max((t["name"] for t in teachers), key=lambda name: metrics[name]["mean"])
    lowest_teacher_self_cos = min(metrics[t["name"]]["self_cos"] for t in teachers)
    corpus, train, init = extraction["corpus"], distill_metrics["final_train"], distill_metrics["init"]
    parameters = export["parameters"]
    results = [{"task_type": "sentence-similarity", "dataset_type": "sts-8", "dataset_split": "test",
                "dataset_name": "STS-8 (the eight English STS test sets above)", "metric_type": "spearman",
                "metric_name": "mean Spearman (cosine)", "metric_value": round(student["mean"], 4)}]
    results += [{"task_type": "sentence-similarity", "dataset_type": STS_DATASETS[task], "dataset_name": task,
                 "dataset_split": "test", "metric_type": "spearman", "metric_name": f"{task} Spearman (cosine)",
                 "metric_value": round(student[task], 4)} for task in sts.TASKS]
    return {
        "metadata": cards.front_matter(
            library_name="transformers", pipeline_tag="sentence-similarity",
            tags=["sentence-embeddings", "sentence-transformers", "remote-code", "distillation"],
            datasets=["nlphuji/flickr8k", "google/imageinwords", "nyu-mll/glue", "stanfordnlp/snli",
                      "sentence-transformers/stsb"], model_name=STUDENT, results=results),
        "overview": overview(metrics, f"{distill_metrics['trained_length']:,}", select),
        "parameters_millions": f"{parameters / 1e6:.1f}", "parameters": f"{parameters:,}",
        "preset": distill_config["preset"], "teacher_count": len(teachers),
        "training_rows": f"{distill_metrics['training_rows']:,}", "steps": f"{distill_metrics['steps']:,}",
        "batch_size": distill_config["batch_size"], "trained_length": f"{distill_metrics['trained_length']:,}",
        "inputs_and_threads": cards.inputs_and_threads_paragraph(", `attach_amoe()`, `set_amoe()` and `detach_amoe()`"),
        "embedding_space": cards.embedding_space_paragraph(export, "model.embedding_space"),
        "embedding_space_with_arms": export["embedding_space_with_arms"],
        "gauge_rows": f"{student['gauge_rows']:,}", "sts_table": sts_table(metrics, extract_manifest),
        "long": None if long_inputs is None else long_inputs_context(long_inputs),
        "reaches_goal": student["mean"] >= export["goal_mean"], "goal_mean": export["goal_mean"],
        "mean": f"{student['mean']:.4f}", "best_teacher": best_teacher,
        "best_teacher_mean": f"{metrics[best_teacher]['mean']:.4f}", "self_cos": f"{student['self_cos']:+.3f}",
        "self_cos_below": student["self_cos"] < lowest_teacher_self_cos,
        "lowest_teacher_self_cos": f"{lowest_teacher_self_cos:+.3f}", "for_scale": FOR_SCALE,
        "corpus_rows": f"{extract_manifest['corpus']['rows']:,}",
        "corpus_sha256": extract_manifest["corpus"]["sha256"][:12], "corpus_source": corpus["source"],
        "sample": None if "sample" not in corpus else {"rows": f"{corpus['sample']['rows']:,}",
                                                       "seed": corpus["sample"]["seed"]},
        "sources": [{"name": name, "kept": f"{stats['kept']:,}", "held_out": f"{stats['dropped_held_out']:,}",
                     "duplicate": f"{stats['dropped_duplicate']:,}"}
                    for name, stats in corpus.get("stats", {}).items()],
        "reference": align_report["reference"], "shrinkage": align_report["shrinkage"],
        "fit_rows": f"{align_report['fit_rows']:,}", "holdout_rows": f"{align_report['holdout_rows']:,}",
        "teachers": [{"name": t["name"], "dim": t["dim"], "kind": t["kind"], "pooling": t["pooling"],
                      "sha256": t["weights_sha256"][:12], "after": f"{a['holdout_cosine_after']:.3f}",
                      "before": None if a["holdout_cosine_before"] is None else f"{a['holdout_cosine_before']:.3f}",
                      "centred_after": f"{a['holdout_centred_cosine_after']:.3f}",
                      "shared_directions": a["shared_directions"]}
                     for t, a in ((t, align_report["teachers"][t["name"]]) for t in teachers)],
        "consensus_rows": f"{align_report['consensus_rows']:,}", "chunks_kept": align_report["chunks_kept"],
        "chunks_dropped": len(align_report["chunks_dropped"]),
        "origin": origin(init), "training_start": training_start(init), "temperature": distill_config["temperature"],
        "mse_weight": f"{distill_config['mse_weight']:g}", "learning_rate": f"{distill_config['learning_rate']:g}",
        "warmup_steps": distill_config["warmup_steps"], "precision": distill_config["precision"],
        "max_length": distill_config["max_length"], "seed": distill_config["seed"],
        "epochs": f"{distill_metrics['epochs']:.2f}", "loss": f"{train['loss']:.3f}",
        "info_nce": f"{train['info_nce']:.3f}", "validation_rows": f"{distill_metrics['validation_rows']:,}",
        "validation_cosine": f"{distill_metrics['final_validation_cosine']:.4f}",
        "training_minutes": distill_metrics["training_minutes"],
        "tokens_per_second": f"{train['tokens_per_second']:,.0f}",
        "amoe": None if select is None else amoe_context(select, arms_json, {
            name: metrics[name] for name in (FOR_SCALE, teachers[0]["name"]) if name in metrics}, levers),
        "consensus_erank": f"{align_report['consensus_erank_holdout']:.1f}", "dim": student["dim"],
        "shared_directions_all_teachers": align_report["shared_directions_all_teachers"],
        "erank": f"{student['erank']:.1f}", "erank_sts": f"{student['erank_sts']:.1f}",
        "positions_from_teacher": init["positions_from_teacher"] if init["kind"] == "select" else None}


def overview(metrics, trained_length, select=None):
    """The card's opening and its README rows: STS-8 of the bare trunk (what `encode` gives) and, when a collective
    ships, with its arms on, each beside FOR_SCALE (smaller, and the stronger of the cheap alternatives)."""
    on = "the eight English STS test sets"
    results = [("STS-8 mean Spearman, bare trunk (`encode`)", on, metrics[STUDENT]["mean"], metrics[FOR_SCALE]["mean"])]
    if select is not None and select["shipped"] is not None:
        results.append(("STS-8 mean Spearman, arms on (`attach_amoe()`)", on, select["rows"]["collective"]["mean"],
                        metrics[FOR_SCALE]["mean"]))
    return cards.Overview(
        model=STUDENT, job="English sentence and caption embeddings for semantic similarity, search and clustering",
        reads=f"{trained_length} tokens (the positions it was trained to; of its 8,192, `encode` truncates there)",
        width=metrics[STUDENT]["dim"], similarity="cosine (the dot product of its unit vectors)",
        alternative=FOR_SCALE, results=results)


def context_from_records(folder, root=runs.ROOT):
    """card_context's values from run records alone: this export run's config.json and metrics.json, and the
    extraction, alignment, distillation, evaluation and arm-selection runs its config names, relative to root."""
    config = runs.read_json(Path(folder) / "config.json")
    extract, align, distill = root / config["extract"], root / config["align"], root / config["distill"]
    select = arms_json = None
    if config["amoe"] is not None:
        select = runs.read_json(root / config["amoe"] / "metrics.json")
        arms_json = runs.read_json(root / config["amoe"] / "amoe" / "arms" / "ARMS.json")
    return card_context(runs.read_json(root / config["eval"] / "metrics.json"),
                        runs.read_json(extract / "manifest.json"), runs.read_json(extract / "extraction.json"),
                        runs.read_json(align / "report.json"), runs.read_json(distill / "metrics.json"),
                        runs.read_json(distill / "config.json"), runs.read_json(Path(folder) / "metrics.json"),
                        select, arms_json,
                        runs.read_json(root / config["long"] / "metrics.json") if config.get("long") else None,
                        runs.read_json(root / config["levers"] / "levers.json") if config.get("levers") else None)


def card_from_records(folder, root=runs.ROOT):
    """The card's text from run records alone (tools/cards.py regenerates cards with it)."""
    return cards.render(CARD, **context_from_records(folder, root))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extract", type=Path, required=True)
    parser.add_argument("--align", type=Path, required=True)
    parser.add_argument("--distill", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="run folder for this export's checks")
    parser.add_argument("--to", type=Path, default=None, help="the folder to build (default: <out>/<Hub folder name>)")
    parser.add_argument("--hub", type=Path, default=None,
                        help="the folder whose code, config and tokenizer the build starts from (default: the Hub "
                             "folder)")
    parser.add_argument("--amoe", type=Path, default=None, help="tools/captionbert/amoe/train.py select run to ship")
    parser.add_argument("--long", type=Path, default=None, help="tools/captionbert/long_inputs.py run of the student")
    parser.add_argument("--levers", type=Path, default=None,
                        help="tools/captionbert/amoe/levers.py run whose table goes on the card (needs --amoe)")
    config = Config(**vars(parser.parse_args(argv)))
    config.to = config.to or config.out / STUDENT
    registry.CAPTIONBERT.start_build(config.to, config.hub)
    final, metrics = check_inputs(config)
    select = None
    if config.amoe is not None:
        if not (config.amoe / "metrics.json").is_file():
            raise SystemExit(f"{config.amoe} is not a finished tools/captionbert/amoe/train.py select run")
        select = runs.read_json(config.amoe / "metrics.json")
    if config.levers is not None and (config.amoe is None or not (config.levers / "levers.json").is_file()
                                      or not runs.read_json(config.levers / "levers.json")["complete"]):
        raise SystemExit(f"--levers {config.levers}: needs --amoe and a finished tools/captionbert/amoe/levers.py run "
                         "(levers.json, complete)")

    with runs.RunRecord(config.out, config, "captionbert.export"):
        shutil.copy(final / "model.safetensors", config.to / "model.safetensors")
        folder_config = runs.read_json(config.to / "config.json")  # the student's trained length travels with it
        folder_config["trained_length"] = runs.read_json(final / "config.json").get("trained_length")
        runs.write_json(config.to / "config.json", folder_config)
        shutil.copy(config.distill / "loss_curve.png", config.to / "loss_curve.png")
        write_sentence_transformers_files(config.to)
        if (config.to / "amoe").exists():  # arms belong to one trunk: never leave another build's arms behind
            shutil.rmtree(config.to / "amoe")
        arms = select is not None
        if arms:  # the solo arms always, the collective when one ships
            shutil.copytree(config.amoe / "amoe", config.to / "amoe")
        loaded = runs.load_isolated(config.to, PROBE_TEXTS, auto_model=True, amoe=arms, sentence_transformers=True)
        exported, trained = loaded["auto_model"], runs.load_isolated(final, PROBE_TEXTS, auto_model=True)["auto_model"]
        if exported["embeddings"] != trained["embeddings"]:
            raise SystemExit(f"{config.to} embeds differently from {final} after the copy")
        print(f"{config.to} loads with AutoModel in a fresh process: {exported['parameters']:,} parameters, "
              f"embeddings identical to the trained student")
        st = loaded["sentence_transformers"]
        st_gap = float(abs(np.array(st["embeddings"]) - np.array(exported["embeddings"])).max())
        if st_gap > ST_TOLERANCE or st["dimension"] != len(exported["embeddings"][0]):
            raise SystemExit(f"{config.to}: SentenceTransformer differs from AutoModel's encode (max gap "
                             f"{st_gap:.2e}, width {st['dimension']})")
        print(f"it loads with SentenceTransformer (trust_remote_code=True) too: max gap to encode {st_gap:.1e}")
        attached = loaded.get("amoe")
        if arms:
            roster = select["shipped"]["roster"] if select["shipped"] else attached["roster"]
            if attached["off"] != exported["embeddings"] or attached["roster"] != roster:
                raise SystemExit(f"{config.to}: the shipped arms break the toggle law or the roster differs")
            if select["shipped"] is None:
                solo = sorted(runs.read_json(config.amoe / "amoe" / "arms" / "ARMS.json")["arms"])
                if attached["no_collective"] is None or not all(name in attached["no_collective"] for name in solo):
                    raise SystemExit(f"{config.to}: with no collective, attach_amoe() must raise naming the solo "
                                     f"arms {solo}")
                print(f"attach_amoe() raises naming the solo arms {solo} (no collective ships); "
                      f"attach_amoe({roster}) attaches one alone")
            else:
                print(f"attach_amoe() loads the collective {roster}")
            print("amoe_off() equals the bare trunk exactly")
        export = {"parameters": exported["parameters"], "sentence_transformers_max_gap": st_gap,
                  "embedding_space": exported["embedding_space"], "embedding_space_covers_config": True,
                  "embedding_space_with_arms": attached and attached["embedding_space"],
                  "roster": attached and attached["roster"], "weights_sha256": encoders.weights_hash(config.to),
                  "files_sha256": registry.CAPTIONBERT.weights_sha256(config.to), "goal_mean": config.goal_mean}
        runs.write_json(config.out / "metrics.json", export)
        path = config.to / "README.md"
        path.write_text(card_from_records(config.out))
    print(f"wrote {path}\n")
    print(sts_table(metrics, runs.read_json(config.extract / "manifest.json")))
    if select is not None:
        shipped = "none cleared the bar" if select["shipped"] is None else " + ".join(select["shipped"]["roster"])
        print(f"\nAMOE arms on the trunk (shipped collective: {shipped})\n")
        reference = runs.read_json(config.extract / "manifest.json")["reference"]
        print(amoe_table(select, {name: metrics[name] for name in (FOR_SCALE, reference) if name in metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
