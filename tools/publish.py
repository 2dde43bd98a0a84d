"""Publish the Hub folders: check each one, then upload it to the Hugging Face Hub as <prefix>/<folder name>.

Usage:
    make publish REPO_PREFIX=my-org                  # python -m tools.publish --repo-prefix my-org
    make publish REPO_PREFIX=my-org DRY_RUN=1        # ... --dry-run: check and list what would go up, upload nothing
    make publish REPO_PREFIX=my-org YES=1            # ... --yes: upload without asking (needed without a terminal)
    python -m tools.publish --repo-prefix my-org --folders glyph-embedder-v2 --private
    HF_ENDPOINT=http://127.0.0.1:5000 python -m tools.publish --repo-prefix test-org   # another Hub (the tests' mock)

The token is --token, else HF_TOKEN, else the one `hf auth login` stored; without one it is a dry run.

What it does; every folder is checked before anything goes up:
    1. picks the files to publish by the model's exact manifest (manifest): the files tools/registry.py lists for its
       pipeline (code, config, tokenizer, weights, card and images), its vendored shared_*.py and the AMOE library
       its amoe/arms/ARMS.json lists. Every other file (a secrets.py, a config.local.json, optimizer state,
       checkpoints, run records, caches, ...) is listed as not uploaded. A symbolic link stops the run: its target
       would go up as the folder's file;
    2. checks the folder: its shared_*.py are the copies `make vendor` generates, every file of the manifest and the
       weights `make demo` builds are there, and the model card README.md has YAML front matter and is what its run
       records give (tools/cards.py: a Hub folder's released records, a build's export run; a folder with neither is
       only listed as unchecked);
    3. copies exactly the picked files to a temporary folder and loads it in a fresh process where the project is not
       importable, the way a user does (AutoModel with remote code, or SentenceTransformer), embeds two texts and,
       where amoe/ ships, attaches the arms;
    4. unless it is a dry run: asks before uploading (--yes: does not ask; without a terminal to ask on, --yes is
       required), creates the repo if needed (HfApi.create_repo) and makes one commit
       (HfApi.create_commit) that adds every picked file and deletes the repo's files the folder does not have
       (.gitattributes stays), so the repo holds exactly the folder; records repo ids, commit urls and oids and each
       file's sha256 in runs/publish/<timestamp>/publish.json.
"""

import dataclasses
import fnmatch
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import huggingface_hub
import numpy as np
import yaml
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants
from huggingface_hub.errors import HFValidationError
from huggingface_hub.repocard import metadata_load
from huggingface_hub.utils import validate_repo_id

from tools import cards, registry, runs, vendor


PROBE_TEXTS = ["A dog runs across the grass.", "Two men play chess in a park at dusk."]
KEPT_ON_THE_HUB = ".gitattributes"  # the Hub writes it into every new repo; it decides what is stored in LFS


@dataclass
class Config:
    repo_prefix: str = field(metadata={"help": "user or organisation: repos are <prefix>/<folder name>"})
    folders: list[Path] = field(default_factory=lambda: [pipeline.path for pipeline in registry.PIPELINES], metadata={
        "help": "the Hub folders to publish, each one of the registry's (default: all)"})  # resolved by parse_config
    dry_run: bool = field(default=False, metadata={
        "help": "check and list what would go up; upload nothing (also what happens without a token)"})
    yes: bool = field(default=False, metadata={"help": "upload without asking (required without a terminal)"})
    private: bool = field(default=False, metadata={
        "help": "create missing repos as private (an existing repo keeps its visibility)"})
    out: Path | None = field(default=None, metadata={
        "help": "run folder for the upload's record (default runs/publish/<timestamp>)"})
    token: str | None = field(default=None, repr=False, metadata={  # never recorded (see main)
        "help": "a Hugging Face write token (default: HF_TOKEN, then `hf auth login`'s)"})


def parse_config(argv):
    """The Config of the command line `argv`, its folders resolved, its token --token's or else the one
    huggingface_hub finds (None without one)."""
    config = runs.parse_config(Config, argv, __doc__)
    config.folders = [folder.resolve() for folder in config.folders]
    config.token = config.token or huggingface_hub.get_token()
    for folder in config.folders:
        if not folder.is_dir():
            raise SystemExit(f"{folder} is not a folder")
        if folder.name not in registry.BY_FOLDER:
            raise SystemExit(f"{folder}: not one of the bundle's Hub folders ({', '.join(registry.BY_FOLDER)}), so "
                             "there is nothing to check it against")
        try:
            validate_repo_id(repo_id(config, folder))
        except HFValidationError as problem:
            raise SystemExit(f"--repo-prefix {config.repo_prefix!r} does not make a valid repo id: "
                             f"{problem}") from problem
    names = [folder.name for folder in config.folders]
    if len(set(names)) < len(names):
        raise SystemExit(f"two folders would go to the same repo: {names}")
    return config


def repo_id(config, folder):
    return f"{config.repo_prefix}/{folder.name}"


# ---- what goes up --------------------------------------------------------------------------------------------------

def manifest(folder):
    """The exact paths a Hub repo of `folder` holds: its pipeline's files and weights layout (tools/registry.py), the
    vendored shared_*.py (tools/vendor.py) and, where amoe/arms/ARMS.json ships, that file, the arms and routings it
    lists and its collective's dispatch."""
    names = {*registry.BY_FOLDER[folder.name].files_of(folder), *(path.name for path in vendor.expected_copies(folder))}
    arms_json = folder / "amoe" / "arms" / "ARMS.json"
    if arms_json.is_file():
        try:
            library = json.loads(arms_json.read_text())
            names |= {"amoe/arms/ARMS.json", *(f"amoe/{arm[key]}" for arm in library["arms"].values()
                                               for key in ("file", "routing") if key in arm)}
        except (ValueError, KeyError, TypeError, AttributeError) as problem:
            raise SystemExit(f"{arms_json} does not list the AMOE library (arms: {{name: {{file, routing}}}}): "
                             f"{problem!r}") from problem
        if library.get("collective"):
            names.add(f"amoe/{library['collective']}/dispatch.safetensors")
    return names


def published_files(folder):
    """({path in the repo: Path} of the folder's files in its manifest, [paths of its other files: not uploaded]).
    Refuses a folder holding a symbolic link: what it points to would go up as the folder's file."""
    links = [path.relative_to(folder).as_posix() for path in sorted(folder.rglob("*")) if path.is_symlink()]
    if links:
        raise SystemExit(f"{folder}: symbolic links {', '.join(links)}: what they point to would be published as the "
                         "folder's files; copy the files in or remove the links")
    listed = manifest(folder)
    present = {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*")) if path.is_file()}
    return ({name: path for name, path in present.items() if name in listed},
            [name for name in present if name not in listed])


def print_plan(repo, folder, files, skipped):
    total = sum(path.stat().st_size for path in files.values())
    print(f"{repo}  <-  {folder}")
    if cards.records_of(folder) is None:
        print("  README.md: no run records found for this folder (neither a released Hub folder nor a build in its "
              "export run): its numbers are not checked")
    for name, path in files.items():
        print(f"  {path.stat().st_size:>15,}  {name}")
    print(f"  {len(files)} files, {total:,} bytes ({total / 1e6:,.1f} MB)")
    if skipped:
        print(f"  not uploaded (not in the model's manifest): {', '.join(skipped)}")


# ---- checks --------------------------------------------------------------------------------------------------------

def vendoring_problems(folder):
    """tools/vendor.py's drift check on `folder`: its shared_*.py must be exactly the copies `make vendor` generates
    for a folder of its name, and nothing else."""
    return [f"{problem} (run `make vendor`)" for problem in vendor.folder_drift(folder)]


def missing_files(folder, files):
    """The manifest's files the folder lacks, and the weights `make demo` builds that it lacks."""
    pipeline = registry.BY_FOLDER[folder.name]
    built = " (`make demo` builds it, `make release` ships it into the folder)"
    return [f"no {name}" + (built if pipeline.is_built(name) else "") for name in sorted(manifest(folder) - set(files))
            if not name.startswith("shared_")] + [  # vendoring_problems names missing copies
        f"no {pattern}{built}" for pattern in pipeline.weights
        if not any(fnmatch.fnmatchcase(name, pattern) for name in files)]


def tokenizer_problems(folder):
    """tokenizer_config.json must not carry where the tokenizer was loaded from on the machine that saved it."""
    path = folder / "tokenizer_config.json"
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    return [f"tokenizer_config.json records where it was loaded from: {key} (tools/runs.forget_load_location)"
            for key in runs.LOAD_LOCATION if key in recorded]


def card_problems(folder):
    """The model card: README.md with YAML front matter, and the card its run records give (tools/cards.py): the
    released records of a Hub folder, or the export run a build sits in. A folder with neither is checked for its
    front matter alone, and the plan says so."""
    card = folder / "README.md"
    if not card.is_file():
        return ["no README.md (the model card)"]
    try:
        front_matter = metadata_load(card)
    except (yaml.YAMLError, ValueError) as problem:
        return [f"README.md's front matter is not a YAML mapping: {problem}"]
    problems = [] if front_matter else ["README.md does not start with YAML front matter (--- ... ---)"]
    records = cards.records_of(folder)
    if records is not None:
        root, export = records
        if card.read_text() != cards.card_from_records(export, root):
            problems.append(f"README.md is not what the run records of {export} give: run `make cards` (a Hub "
                            "folder) or the export again (a build)")
    return problems


def load_check(folder, files):
    """Copy `files` into a temporary folder named like `folder` and load it in a fresh process with the project not
    importable, the ways users load it (tools/isolated_load.py); returns {"parameters", "dimension",
    "embedding_space", "amoe" (the attached roster or None), "checks" (what loaded), and "embedding_space_with_arms"
    and "no_collective" (attach_amoe()'s error, or None) when arms ship}. A failure ends the run with its error. make
    demo's last step runs it on every folder too."""
    with tempfile.TemporaryDirectory(prefix="publish-") as temporary:
        copy = Path(temporary) / folder.name
        for name, path in files.items():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy / name)
        if registry.BY_FOLDER[folder.name].loader == "SentenceTransformer":
            loaded = runs.load_isolated(copy, PROBE_TEXTS, sentence_transformers=True, gguf=True)
        else:
            loaded = runs.load_isolated(copy, PROBE_TEXTS, auto_model=True, amoe=(copy / "amoe").is_dir(),
                                        sentence_transformers=(copy / "modules.json").is_file())
    return loaded_as_published(folder, loaded)


def loaded_as_published(folder, loaded):
    """load_check's summary of an isolated load, after checking that every way it loaded gives the same finite
    embeddings and that every arm off is the bare trunk; SystemExit naming what differs."""
    main = loaded.get("auto_model") or loaded["sentence_transformers"]
    embeddings = np.array(main["embeddings"])
    if not np.isfinite(embeddings).all():
        raise SystemExit(f"{folder}: the embeddings are not finite")
    checks = ["AutoModel" if "auto_model" in loaded else "SentenceTransformer"]
    if "auto_model" in loaded and "sentence_transformers" in loaded:  # captionbert: a sentence-transformers pipeline
        gap = float(np.abs(np.array(loaded["sentence_transformers"]["embeddings"]) - embeddings).max())
        if gap >= 1e-5:
            raise SystemExit(f"{folder}: SentenceTransformer differs from encode by {gap}")
        checks.append("SentenceTransformer")
    for name, rows in loaded.get("gguf", {}).items():
        ours = np.array(rows)
        cosine = float((ours / np.linalg.norm(ours, axis=1, keepdims=True) * embeddings).sum(axis=1).min())
        if cosine <= 0.999:
            raise SystemExit(f"{folder}: {name} embeds differently in llama.cpp: cosine {cosine}")
        checks.append(f"llama.cpp (cosine {cosine:.4f})")
    summary = {"parameters": main["parameters"], "dimension": int(embeddings.shape[-1]),
               "embedding_space": main["embedding_space"], "amoe": None, "checks": checks}
    if "amoe" in loaded:
        attached = loaded["amoe"]
        if attached["off"] != main["embeddings"]:
            raise SystemExit(f"{folder}: amoe_off() is not the bare trunk")
        summary.update(amoe=attached["roster"], embedding_space_with_arms=attached["embedding_space"],
                       no_collective=attached["no_collective"])
        checks.append("attach_amoe + amoe_off")
    return summary


# ---- upload --------------------------------------------------------------------------------------------------------

def upload(api, repo, files, config, message):
    """Create `repo` if needed and commit `files` to it, deleting what the folder does not have; the record."""
    url = api.create_repo(repo, private=True if config.private else None, exist_ok=True)
    deleted = sorted(set(api.list_repo_files(repo)) - set(files) - {KEPT_ON_THE_HUB})
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=path) for name, path in files.items()]
    operations += [CommitOperationDelete(path_in_repo=name) for name in deleted]
    commit = api.create_commit(repo, operations, commit_message=message)
    return {"repo_id": repo, "url": str(url), "commit_url": commit.commit_url, "commit_oid": commit.oid,
            "deleted": deleted,
            "files": {name: {"bytes": path.stat().st_size, "sha256": runs.file_sha256(path)}
                      for name, path in files.items()}}


def main(argv=None):
    config = parse_config(argv)
    if config.token is None and not config.dry_run:
        print("no Hugging Face token (--token, HF_TOKEN or `hf auth login`): dry run, nothing is uploaded")
        config.dry_run = True
    if not config.dry_run and constants.is_offline_mode():
        raise SystemExit("HF_HUB_OFFLINE is set: unset it to upload, or pass --dry-run")
    if not config.dry_run and not config.yes and not sys.stdin.isatty():
        raise SystemExit("no terminal to confirm the upload on: pass --yes to upload, or --dry-run to list only")

    plans = {folder: published_files(folder) for folder in config.folders}
    problems = [f"{folder.name}: {problem}" for folder, (files, _) in plans.items()
                for problem in vendoring_problems(folder) + missing_files(folder, files) + tokenizer_problems(folder)
                + card_problems(folder)]
    if problems:
        raise SystemExit("not published; fix these first:\n  " + "\n  ".join(problems))
    for folder, (files, skipped) in plans.items():
        print_plan(repo_id(config, folder), folder, files, skipped)
        loaded = load_check(folder, files)
        arms = f"; its AMOE arms {loaded['amoe']} attach" if loaded["amoe"] else ""
        print(f"  a copy of these files loads in a fresh process without the project: "
              f"{loaded['dimension']}-d embeddings{arms}")
    if config.dry_run:
        print("dry run: nothing uploaded")
        return 0

    api = HfApi(token=config.token)
    repos = ", ".join(repo_id(config, folder) for folder in plans)
    if not config.yes and input(f"upload to {api.endpoint}: {repos}? [y/N] ").strip().lower() not in ("y", "yes"):
        raise SystemExit("nothing uploaded")
    revision, dirty = runs.git_revision()
    message = "Publish from caption-bundle" + (f" {revision[:12]}" if revision else "") + (" (dirty)" if dirty else "")
    out = config.out or runs.timestamped(runs.ROOT / "runs", "publish")
    out.mkdir(parents=True, exist_ok=True)
    # Not runs.RunRecord: its run.json keeps the command line, which may hold --token; nor the token itself.
    runs.write_json(out / "config.json", {key: value for key, value in dataclasses.asdict(config).items()
                                          if key != "token"})
    record = {"endpoint": api.endpoint, "git_commit": revision, "git_dirty": dirty,
              "versions": {**runs.library_versions(), "huggingface_hub": metadata.version("huggingface_hub")},
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repos": []}
    for number, (folder, (files, _)) in enumerate(plans.items(), start=1):
        repo = repo_id(config, folder)
        print(f"[{number}/{len(plans)}] {repo}: uploading {len(files)} files to {api.endpoint}", flush=True)
        uploaded = upload(api, repo, files, config, message)
        record["repos"].append(uploaded)
        runs.write_json(out / "publish.json", record)  # after every repo, so a failure leaves what went up
        deleted = f"; deleted (not in the folder): {', '.join(uploaded['deleted'])}" if uploaded["deleted"] else ""
        print(f"[{number}/{len(plans)}] {repo}: {uploaded['commit_url']}{deleted}")
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    runs.write_json(out / "publish.json", record)
    print(f"recorded in {out / 'publish.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
