"""captionbert-8192-v2's model card: CARD, its Markdown template (card.md, Jinja), and card_context, the values that
fill it, computed from run records alone (tools/cards.py renders them: `make cards`, and the export's card)."""

from pathlib import Path


from tools import card_engine, registry, sts


STUDENT = registry.CAPTIONBERT.folder  # its row in the evaluation


FOR_SCALE = "all-MiniLM-L6-v2"


FROM_SCRATCH = "captionbert-8192-v2 (from scratch)"  # the same budget trained from a random init (evaluate row)


STATIC = "model2vec(all-mpnet-base-v2)"  # the static distillation of the reference teacher (evaluate row)


STS_DATASETS = {"STS12": "mteb/sts12-sts", "STS13": "mteb/sts13-sts", "STS14": "mteb/sts14-sts",
                "STS15": "mteb/sts15-sts", "STS16": "mteb/sts16-sts", "STS-B": "mteb/stsbenchmark-sts",
                "SICK-R": "mteb/sickr-sts", "BIOSSES": "mteb/biosses-sts"}  # the MTEB copies of the eight test sets


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
    """The AMOE section's values and table rows, from a tools/captionbert/amoe/select.py run (metrics.json)
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
    return card_engine.render(CARD, block="amoe", amoe=amoe_context(select, arms_json, references, levers))


def card_context(records):
    """The values card.md shows, as ready-made strings, table rows and the flags its conditional sentences read, from
    the run records (a card_engine.Records of the export run): the evaluation's, the extraction's manifest and
    extraction.json, the alignment report, the distillation's metrics and config, this export's metrics, and
    optionally the arm selection (select's metrics.json, with its ARMS.json), the long-input run's metrics and the
    levers run's levers.json."""
    metrics, export = records.read("eval"), records.own()
    extract_manifest, extraction = records.read("extract", "manifest.json"), records.read("extract", "extraction.json")
    align_report = records.read("align", "report.json")
    distill_metrics, distill_config = records.read("distill"), records.read("distill", "config.json")
    select, arms_json = records.read("amoe"), records.read("amoe", "amoe/arms/ARMS.json")
    long_inputs, levers = records.read("long"), records.read("levers", "levers.json")
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
        "metadata": card_engine.front_matter(
            library_name="transformers", pipeline_tag="sentence-similarity",
            tags=["sentence-embeddings", "sentence-transformers", "remote-code", "distillation"],
            datasets=["nlphuji/flickr8k", "google/imageinwords", "nyu-mll/glue", "stanfordnlp/snli",
                      "sentence-transformers/stsb"], model_name=STUDENT, results=results),
        "overview": overview(metrics, f"{distill_metrics['trained_length']:,}", select),
        "parameters_millions": f"{parameters / 1e6:.1f}", "parameters": f"{parameters:,}",
        "preset": distill_config["preset"], "teacher_count": len(teachers),
        "training_rows": f"{distill_metrics['training_rows']:,}", "steps": f"{distill_metrics['steps']:,}",
        "batch_size": distill_config["batch_size"], "trained_length": f"{distill_metrics['trained_length']:,}",
        "inputs_and_threads": card_engine.inputs_and_threads_paragraph(
            ", `attach_amoe()`, `set_amoe()` and `detach_amoe()`"),
        "embedding_space": card_engine.embedding_space_paragraph(export, "model.embedding_space"),
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
    return card_engine.Overview(
        model=STUDENT, job="English sentence and caption embeddings for semantic similarity, search and clustering",
        reads=f"{trained_length} tokens (the positions it was trained to; of its 8,192, `encode` truncates there)",
        width=metrics[STUDENT]["dim"], similarity="cosine (the dot product of its unit vectors)",
        alternative=FOR_SCALE, results=results)
