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
    4. with --amoe (a tools/captionbert/amoe/select.py run on these weights): copies its amoe/ library into the
       folder
       and checks, in a fresh process, that attach_amoe() loads the shipped collective and that amoe_off() gives
       the bare embeddings bit for bit (a selection where no roster beat the trunk ships the solo arms and no
       collective: attach_amoe() must then raise naming them, and one attaches alone; the card says so);
    5. writes README.md from its template, card.md, filled by card.py from the run records: the STS-8 table
       (student, every teacher, all-MiniLM-L6-v2 for scale), how it was built (corpus, teachers, alignment,
       training), the AMOE arms (trunk, solo arms, collective, control; selection, amplitude budget, tau sweep; with
       --levers, the tools/captionbert/amoe/levers.py table) and the known limits re-measured on this run. Nothing
       is typed.
"""

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools import cards, encoders, registry, runs
from tools.captionbert.card import FOR_SCALE, STUDENT, amoe_table, sts_table

ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "output_dim", "layer_norm_eps", "pad_token_id", "model_type")
PROBE_TEXTS = ["A dog runs across the grass.", "Two men play chess in a park at dusk."]
ST_TOLERANCE = 1e-5  # SentenceTransformer vs AutoModel encode: the same forward, batched differently


@dataclass
class Config:
    extract: Path  # tools/captionbert/extract.py folder
    align: Path  # tools/captionbert/align.py folder
    distill: Path  # tools/captionbert/train.py folder (final/ holds the student)
    eval: Path  # tools/captionbert/evaluate.py run that scored the student (row STUDENT) and the teachers
    out: Path = field(metadata={"help": "run folder for this export's checks (config.json, run.json, metrics.json)"})
    goal_mean: float = 0.76  # the cpu budget's STS-8 mean goal (issue 18) the card measures the student against
    to: Path | None = field(default=None, metadata={
        "help": "the folder to build (default: <out>/<its Hub folder's name>); make release copies it into the Hub "
                "folder"})
    hub: Path | None = field(default=None, metadata={  # None keeps the record free of this machine's absolute paths
        "help": "the folder whose own files (code, config, tokenizer) the build starts from (default: the Hub folder)"})
    amoe: Path | None = field(default=None, metadata={
        "help": "tools/captionbert/amoe/select.py run whose amoe/ library ships with these weights"})
    long: Path | None = field(default=None, metadata={
        "help": "tools/captionbert/long_inputs.py run that scored the student's long inputs"})
    levers: Path | None = field(default=None, metadata={
        "help": "tools/captionbert/amoe/levers.py run (its levers.json) whose table goes on the card (needs --amoe)"})


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


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    config.to = config.to or config.out / STUDENT
    if config.amoe is not None and not (config.amoe / "metrics.json").is_file():
        raise SystemExit(f"{config.amoe} is not a finished tools/captionbert/amoe/select.py run")
    if config.levers is not None and (config.amoe is None or not (config.levers / "levers.json").is_file()
                                      or not runs.read_json(config.levers / "levers.json")["complete"]):
        raise SystemExit(f"--levers {config.levers}: needs --amoe and a finished tools/captionbert/amoe/levers.py run "
                         "(levers.json, complete)")
    return config


def check_arms(config, select, attached, bare):
    """The shipped arms, as loaded in a fresh process (`attached`, tools/isolated_load.py's amoe answer): every arm off
    is the bare trunk (`bare`, its embeddings), the roster is the one select shipped, and where none shipped
    attach_amoe() raised naming every solo arm; SystemExit otherwise."""
    roster = select["shipped"]["roster"] if select["shipped"] else attached["roster"]
    if attached["off"] != bare or attached["roster"] != roster:
        raise SystemExit(f"{config.to}: the shipped arms break the toggle law or the roster differs")
    if select["shipped"] is None:
        solo = sorted(runs.read_json(config.amoe / "amoe" / "arms" / "ARMS.json")["arms"])
        if attached["no_collective"] is None or not all(name in attached["no_collective"] for name in solo):
            raise SystemExit(f"{config.to}: with no collective, attach_amoe() must raise naming the solo arms {solo}")
        print(f"attach_amoe() raises naming the solo arms {solo} (no collective ships); "
              f"attach_amoe({roster}) attaches one alone")
    else:
        print(f"attach_amoe() loads the collective {roster}")
    print("amoe_off() equals the bare trunk exactly")


def main(argv=None):
    config = parse_config(argv)
    registry.CAPTIONBERT.start_build(config.to, config.hub)
    final, metrics = check_inputs(config)
    select = None if config.amoe is None else runs.read_json(config.amoe / "metrics.json")

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
            check_arms(config, select, attached, exported["embeddings"])
        export = {"parameters": exported["parameters"], "sentence_transformers_max_gap": st_gap,
                  "embedding_space": exported["embedding_space"], "embedding_space_covers_config": True,
                  "embedding_space_with_arms": attached and attached["embedding_space"],
                  "roster": attached and attached["roster"], "weights_sha256": encoders.weights_hash(config.to),
                  "files_sha256": registry.CAPTIONBERT.weights_sha256(config.to), "goal_mean": config.goal_mean}
        runs.write_json(config.out / "metrics.json", export)
        path = config.to / "README.md"
        path.write_text(cards.card_from_records(config.out))
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
