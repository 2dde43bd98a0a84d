"""Run records: every tool writes its outputs into a run folder that says how they were made.

A run folder holds config.json (the resolved dataclass config), run.json (command line, git revision and dirty
flag, library versions, start/end time) and whatever the tool writes (metrics.json, tables, checkpoints).
Model cards and later steps read these files; numbers are never typed by hand.
"""

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path

from transformers import HfArgumentParser

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("torch", "transformers", "tokenizers", "sentence-transformers", "safetensors", "numpy", "scipy",
             "onnxruntime", "accelerate")
LOAD_LOCATION = ("is_local", "local_files_only")  # tokenizer_config.json keys of where the tokenizer was loaded from


def parse_config(config_class, argv, description=None, presets=None, positive=(), pass_on=None, **parser_options):
    """The `config_class` (a dataclass) of the command line `argv` (sys.argv when None), through transformers'
    HfArgumentParser: a flag per field in both spellings (--batch-size and --batch_size), a field without a default
    a required one; a bool as --x (and --no-x when it defaults to True), a list as --x A B; a field's metadata gives
    the flag's help, choices, aliases, metavar or action ("extend": the flag may repeat). `description` (a tool's
    __doc__) heads --help as written; `parser_options` go to the parser (prog, allow_abbrev).

    Each field takes its default, over it the value of the preset chosen by --preset (with `presets`, {name: {field:
    value}}: the field `preset`, whose default picks one when the flag is left out), and over both the value its flag
    gives. Fields named in `positive` must be at least 1; a ValueError of the config's own checks is a usage error.
    With `pass_on`, the name of a field that is no flag (field(init=False)), the options the parser does not know go
    into it instead of being refused: the options a tool passes on to the runs it starts."""
    parser = HfArgumentParser(config_class, description=description,
                              formatter_class=argparse.RawDescriptionHelpFormatter, **parser_options)
    # A flag left out parses as None, so that the preset's value or the field's default fills it in
    parser.set_defaults(**{item.name: None for item in dataclasses.fields(config_class) if item.init})
    for action in parser._actions:
        # usage, --help and errors name a flag as the docs write it: an alias first (--encoder of the field
        # encoders), then --batch-size before --batch_size
        action.option_strings.sort(key=lambda option: (option[2:].replace("-", "_") == action.dest, "_" in option))
        if presets and action.dest == "preset":
            action.choices = sorted(presets)
    if pass_on:
        namespace, passed_on = parser.parse_known_args(argv)
    else:
        namespace = parser.parse_args(argv)
    given = {key: value for key, value in vars(namespace).items() if value is not None}
    preset = presets[given.get("preset", config_class.preset)] if presets else {}
    try:
        config = config_class(**{**preset, **given})
    except ValueError as error:
        parser.error(str(error))
    if pass_on:
        setattr(config, pass_on, passed_on)
    for name in positive:
        if getattr(config, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    return config


def default_data_dir():
    """../shared/data beside the project, unless BUNDLE_DATA_DIR says otherwise."""
    return Path(os.environ.get("BUNDLE_DATA_DIR", ROOT.parent / "shared" / "data"))


def git_revision():
    """(commit, dirty) of the project checkout, or (None, None) outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True, check=True).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.CalledProcessError):
        return None, None


def library_versions():
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _jsonable(value):
    return str(value) if isinstance(value, Path) else value


def write_json(path, payload):
    """Write JSON atomically (temp file + rename), so a killed run never leaves half a file."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    os.replace(temporary, path)


def read_json(path):
    return json.loads(Path(path).read_text())


def forget_load_location(folder):
    """Rewrite folder/tokenizer_config.json without what transformers 5 records of where a loaded tokenizer came from
    (is_local, local_files_only): they describe the machine that saved the folder, not the model."""
    path = Path(folder) / "tokenizer_config.json"
    recorded = json.loads(path.read_text())
    kept = {key: value for key, value in recorded.items() if key not in LOAD_LOCATION}
    path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n")  # as transformers writes


def records_config(folder, config):
    """Whether `folder`/config.json holds `config` (the dataclass, as RunRecord writes it). A field the record lacks
    counts as recorded when `config` holds its default: a field added to a tool since, whose default keeps the old
    behaviour, does not disown the runs made before it."""
    recorded = read_json(Path(folder) / "config.json")
    current = json.loads(json.dumps(dataclasses.asdict(config), default=_jsonable))
    for item in dataclasses.fields(config):
        if (item.name not in recorded and item.default is not dataclasses.MISSING
                and current[item.name] == json.loads(json.dumps(item.default, default=_jsonable))):
            del current[item.name]
    return recorded == current


def run_state(folder, config):
    """Where the run in `folder` stands: "new" (no run there yet), "partial" (started with this same config: resume
    it) or "complete" (its metrics.json is written). A folder holding a run of another config is refused."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        return "new"
    if not records_config(folder, config):
        raise SystemExit(f"{folder} holds a run with another config; use a new --out or the same options")
    return "complete" if (folder / "metrics.json").exists() else "partial"


def main_process():
    """Whether this process writes the run's records: the only one, or rank 0 of those torchrun or accelerate launch
    started (they set RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


class RunRecord:
    """Context manager that creates `folder`, records the config and environment, and stamps the end time: on the
    main process only (the others of a data-parallel run leave the record to it), or with `every_process` on each
    (each its own folder)."""

    def __init__(self, folder, config, tool, every_process=False):
        self.folder = Path(folder)
        self.config = config
        self.tool = tool
        self.writes = every_process or main_process()

    def __enter__(self):
        if not self.writes:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / "config.json", dataclasses.asdict(self.config))
        commit, dirty = git_revision()
        self.info = {"tool": self.tool, "argv": sys.argv, "git_commit": commit, "git_dirty": dirty,
                     "versions": library_versions(), "machine": platform.machine(), "cpus": os.cpu_count(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_json(self.folder / "run.json", self.info)
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.writes:
            return False
        self.info["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.info["status"] = "ok" if exc_type is None else f"failed: {exc_type.__name__}: {exc}"
        write_json(self.folder / "run.json", self.info)
        return False


def run_tool(module, *args):
    """Run `python -m module args` (one of this repo's tools, from any working directory); a failure stops the caller
    with the command it ran."""
    command = [sys.executable, "-m", module, *map(str, args)]
    if subprocess.run(command, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode != 0:
        raise SystemExit(f"failed: python -m {' '.join(command[2:])}")


def load_isolated(folder, texts, **loads):
    """Load `folder` the ways `loads` asks (auto_model=True, amoe=True, sentence_transformers=True,
    manual_mean_pool=True, gguf=True) in a fresh interpreter that cannot import the project, as users load a Hub
    folder, and embed `texts`; returns tools/isolated_load.py's answer. A failed load stops the caller with its
    error."""
    request = {"folder": str(Path(folder).resolve()), "texts": list(texts), **loads}
    with tempfile.TemporaryDirectory() as cwd:
        result = subprocess.run([sys.executable, "-I", str(ROOT / "tools" / "isolated_load.py")],
                                input=json.dumps(request), capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        raise SystemExit(f"loading {folder} in an isolated process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def file_sha256(path):
    """sha256 of a file's bytes (what `sha256sum` prints, and the Hub's LFS object id)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def files_sha256(files, root):
    """sha256 over `files`, in the order given: each one's path relative to `root` (its name when it is `root`),
    then its bytes. The identity of weights (tools/encoders.py) and of a demo step's results (tools/demo.py)."""
    digest = hashlib.sha256()
    for path in map(Path, files):
        digest.update(str(path.relative_to(root) if path != Path(root) else path.name).encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def elapsed_minutes(started, finished):
    """Minutes between two run.json time stamps."""
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds() / 60


def timestamped(parent, name):
    """runs/<name>/<YYYYmmdd-HHMMSS> under `parent`."""
    return Path(parent) / name / time.strftime("%Y%m%d-%H%M%S")
