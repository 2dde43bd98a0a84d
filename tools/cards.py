"""Model cards: regenerate every folder's README.md purely from run records, and check where each number in a card
comes from.

Each pipeline's card is its template, tools/<pipeline>/card.md, and the library beside it, tools/<pipeline>/card.py
(registry.Pipeline.card names it; both build on tools/card_engine.py), whose `card_context(records)` computes the
template's values from run records alone: a `card_engine.Records` of one export run, which reads the export's own
config.json and metrics.json and, by name, the records of the runs its config names, each path relative to a root (the
repository, or a records folder that mirrors it). `card_from_records(export_run_folder, root)` renders it; the export
tool writes its folder's card with it. tools/release.py copies a build into its Hub folder together with those
records, compacted to their JSON files, under records/<folder>/ (in git). This tool renders the same cards from the
committed records, so `make cards` after a change to a card's template rewrites the three cards without re-exporting
any weights, and a fresh clone can check them. It also rewrites the project README's two generated tables (which model
for which job, and the measured results beside what a user would pick instead) from each card's Overview (its
card_context's "overview").

Usage:
    python -m tools.cards                          # the three Hub folders, each from its release's records
    python -m tools.cards --check                  # exit 1 when a card differs from what its records give
    python -m tools.cards --export runs/x/geolip/export   # the card of the folder one export run built (its tool is
                                                           # named in its run.json)

Provenance (`unaccounted_numbers`): every number in a card's prose and tables must be a value of a run record it was
built from (as shown: rounded to the digits printed, or as a percentage, or in millions / thousands / MiB; a
signed number may be the difference of two), or a published value quoted from ../shared/specs. Fenced code blocks
(usage examples) are not checked.
"""

import importlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from huggingface_hub import ModelCard

from tools import card_engine, registry, runs

SPECS = runs.ROOT.parent / "shared" / "specs"
NUMBER = re.compile(r"(?<![\w.\-/+])([+-]?\d[\d,]*(?:\.\d+)?)(%|M\b|K\b| MiB)?(?![\w])")
SPEC_NUMBER = re.compile(r"(?<![\w\-/])(\d[\d,]*(?:\.\d+)?|\.\d+)")  # the specs also write ".945"
CODE_BLOCK = re.compile(r"```.*?```", flags=re.DOTALL)
README = runs.ROOT / "README.md"
RECORDS = runs.ROOT / "records"  # records/<folder>/: the compact run records of each Hub folder's build (release.py)
RELEASE = "release.json"  # in records/<folder>/: which export run of the mirrored tree the folder's build is
TIMINGS = RECORDS / "timings.json"  # the README's commands' measured times (tools/timings.py)
COMMANDS = {  # the README's commands table: what each does (its time comes from TIMINGS)
    "make demo": "creates `.venv`, installs everything pinned, builds the three models at the quick budget into "
                 "`runs/quick/` (hours on 2 cores; stopped, it resumes where it was), reloads each built folder as "
                 "users will and prints a summary beside the shipped ones",
    "make test": "ruff (`make lint`), then the test suite, on real models and data (`make test-fast` leaves out the "
                 "tests marked slow)",
    "make demo BUDGET=cpu": "the same at the cpu budget (`runs/demo/`; several times longer): the builds the shipped "
                            "weights come from",
    "make setup": "run by the others: `.venv` and the pinned installs, llama-cpp-python compiled from source",
}


@dataclass
class Config:
    export: list[Path] = field(default_factory=list, metadata={
        "action": "extend", "help": "an export run folder (repeatable): the card of the folder it built; default: the "
                                    "three Hub folders from their releases' records"})
    check: bool = field(default=False, metadata={"help": "compare only; exit 1 if a card is stale"})


def export_pipeline(export_folder):
    """The pipeline whose export tool wrote this run folder (its run.json names the tool), or None."""
    tool = runs.read_json(Path(export_folder) / "run.json").get("tool", "")
    return next((pipeline for pipeline in registry.PIPELINES if tool == f"{pipeline.name}.export"), None)


def card_values(export_folder, root=runs.ROOT):
    """(the card's template, its values) from the records of an export run, by its pipeline's card library."""
    pipeline = export_pipeline(export_folder)
    if pipeline is None:
        raise SystemExit(f"{export_folder} is not an export run (its run.json names another tool)")
    card = importlib.import_module(pipeline.card)
    return card.CARD, card.card_context(card_engine.Records(export_folder, root))


def card_from_records(export_folder, root=runs.ROOT):
    """The card's text from the records of an export run alone (what the export writes, and `make cards` rewrites)."""
    template, values = card_values(export_folder, root)
    return card_engine.render(template, **values)


def released(pipeline):
    """(records root, export run folder) of the build in this pipeline's Hub folder (written by tools/release.py), or
    None when the folder holds no released build."""
    root = RECORDS / pipeline.folder
    if not (root / RELEASE).is_file():
        return None
    return root, root / runs.read_json(root / RELEASE)["export"]


def records_of(folder):
    """(records root, export run folder) whose card `folder`'s README.md must be: the released records of a Hub
    folder, the export run a build sits in (runs/<budget>/<name>/export/<folder>), else None (no records)."""
    pipeline = registry.BY_FOLDER.get(Path(folder).name)
    if pipeline is not None and Path(folder).resolve() == pipeline.path:
        return released(pipeline)
    export = Path(folder).parent
    if not (export / "run.json").is_file() or not (export / "config.json").is_file():
        return None
    if export_pipeline(export) is None or built_folder(export).resolve() != Path(folder).resolve():
        return None
    return runs.ROOT, export


def built_folder(export_folder, root=None):
    """The folder an export run built (its config's `to`), relative to root (default: the repository)."""
    return (root or runs.ROOT) / runs.read_json(Path(export_folder) / "config.json")["to"]


def source_folders(export_folder, root=None):
    """The run folders a card is built from: the export run and, transitively, every run folder its config names
    (paths relative to root, default the repository). The other folders a config names hold a model's files (a Hub
    folder, the folder the export built) or data, not records."""
    root = root or runs.ROOT
    seen, queue = [], [Path(export_folder)]
    while queue:
        folder = queue.pop()
        if folder in seen:
            continue
        seen.append(folder)
        queue += [root / value for value in named_paths(folder) if is_run_folder(root / value)]
    return seen


def is_run_folder(folder):
    """Whether a tool recorded a run here: its run.json, or runs/<process>/run.json for a tool that runs as several
    processes (captionbert's extract)."""
    return (folder / "run.json").is_file() or any(folder.glob("runs/*/run.json"))


def named_paths(folder):
    """The strings a run folder's config.json gives as its options' values (paths among them)."""
    if not (folder / "config.json").is_file():
        return []
    return [value for value in runs.read_json(folder / "config.json").values() if isinstance(value, str) and value]


def record_numbers(paths):
    """Every number in these JSON files and in the JSON files of these run folders (at any depth of the folder and
    of the JSON), tokenizer files aside (their vocabularies would account for any integer)."""
    numbers = set()

    def walk(value):
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            numbers.add(float(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for source in map(Path, paths):
        for path in [source] if source.is_file() else source.rglob("*.json"):
            if "tokenizer" not in path.name and "vocab" not in path.name:
                walk(json.loads(path.read_text()))
    return numbers


def published_numbers():
    """The numbers the specs quote for the published models (a card may cite them as the published run's), as
    values: ".945" and "0.945" are one number."""
    return {float(text.replace(",", "")) for path in sorted(SPECS.glob("*.md"))
            for text in SPEC_NUMBER.findall(path.read_text())}


SCALES = {"%": (100,), "M": (1e-6,), "K": (1e-3,), " MiB": (2 ** -20,), "": (1, 1 / 60)}  # 1/60: seconds as minutes


def accounts_for(shown, unit, numbers):
    """Whether a number printed as `shown` (with `unit`) is one of `numbers` rounded to the digits printed; a number
    printed with its sign (+0.0034, -0.0035) may also be the difference of two of them (a gain over a baseline)."""
    value = float(shown.replace(",", ""))
    digits = len(shown.split(".")[1]) if "." in shown else 0
    tolerance = 0.5 * 10 ** -digits + 1e-9
    if any(abs(number * scale - value) <= tolerance for number in numbers for scale in SCALES[unit]):
        return True
    if shown[0] not in "+-" or unit:
        return False
    ordered = np.array(sorted(numbers))
    wanted = ordered - value  # a - b = value  <=>  b = a - value
    index = np.clip(np.searchsorted(ordered, wanted), 1, len(ordered) - 1)
    nearest = np.minimum(abs(ordered[index] - wanted), abs(ordered[index - 1] - wanted))
    return bool((nearest <= tolerance).any())


def unaccounted_numbers(card, numbers, published):
    """The numbers in a card's text (code blocks and the YAML header's keys aside) that no record accounts for."""
    text = CODE_BLOCK.sub("", card)
    return [shown + unit for shown, unit in NUMBER.findall(text)
            if float(shown.replace(",", "")) not in published and not accounts_for(shown, unit, numbers)]


def headline(folder):
    """(what, value) of the first result in the folder's card's model-index (what: its metric on its dataset), or
    None when the folder has no card."""
    card = Path(folder) / "README.md"
    if not card.is_file():
        return None
    result = ModelCard.load(card).data.eval_results[0]
    return f"{result.metric_name or result.metric_type} on {result.dataset_name}", result.metric_value


def generated(readme, name, lines):
    """The README with the section between its markers `<!-- name: ... -->` and `<!-- end of name -->` replaced."""
    start, end = f"<!-- {name}: written by `make cards` from records/ -->\n", f"<!-- end of {name} -->"
    if start not in readme or end not in readme:
        raise SystemExit(f"README.md lacks the markers of its {name} section: {start.strip()} ... {end}")
    head, rest = readme.split(start, 1)
    return head + start + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]


def duration(minutes):
    return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def commands_table():
    """The README's commands with their last complete run's time (records/timings.json, `make timings`)."""
    timings = runs.read_json(TIMINGS) if TIMINGS.is_file() else {}
    lines = ["| command | what it does | measured |", "|---|---|---|"]
    for name, job in COMMANDS.items():
        entry = timings.get(name)
        measured = ("not measured yet (`make timings` records its last complete run)" if entry is None else
                    f"{duration(entry['minutes'])} on {entry['cpus']} cores ({entry['measured'][:10]})")
        lines.append(f"| `{name}` | {job} | {measured} |")
    return lines


def readme_sections(readme):
    """The project README with its generated tables rewritten from records/: `models` (what each Hub folder's model
    is for, beside what a user would pick instead) and `measured` (every result of each card's comparison, with the
    make demo budget the build came from, records/<folder>/release.json), both from the released records, and
    `commands` (records/timings.json)."""
    models = ["| model | job | reads | output | similarity | headline | what a user might pick instead |",
              "|---|---|---|---|---|---|---|"]
    measured = ["| model | build | measure | on | value | what a user might pick instead | its value |",
                "|---|---|---|---|---|---|---|"]
    for pipeline in registry.PIPELINES:
        release = released(pipeline)
        if release is None:
            models.append(f"| {pipeline.folder} | not released | | | | | |")
            measured.append(f"| {pipeline.folder} | not released | | | | | |")
            continue
        root, export = release
        overview = card_values(export, root)[1]["overview"]
        build = f"{runs.read_json(root / RELEASE)['budget']} budget"
        measure, on, value, theirs = overview.results[0]
        models.append(f"| `{pipeline.folder}` | {overview.job} | {overview.reads} | {overview.width}-d | "
                      f"{overview.similarity} | {measure}: **{value:.4f}** | {overview.alternative}: {theirs:.4f} |")
        measured += [f"| {pipeline.folder} | {build} | {measure} | {on} | {value:.4f} | {overview.alternative} | "
                     f"{theirs:.4f} |" for measure, on, value, theirs in overview.results]
    return generated(generated(generated(readme, "models", models), "measured", measured), "commands",
                     commands_table())


def write_cards(exports=None, check=False):
    """Write (check: compare) the card of the folder each export run in `exports` built; by default each Hub folder's
    card from its release's records, and then the README's generated tables too. Returns the stale files (check)."""
    if exports:
        missing = [str(folder) for folder in exports if not (Path(folder) / "run.json").is_file()]
    else:
        releases = {pipeline: released(pipeline) for pipeline in registry.PIPELINES}
        missing = [pipeline.folder for pipeline, release in releases.items() if release is None]
    if missing:
        raise SystemExit(f"no export run for {', '.join(missing)}: build it (make demo) and release it (make release)")
    if exports:
        targets = [(runs.ROOT, Path(folder), built_folder(folder)) for folder in exports]
    else:
        targets = [(*release, pipeline.path) for pipeline, release in releases.items()]
    stale = []
    for root, export, folder in targets:
        path, card = folder / "README.md", card_from_records(export, root)
        if check:
            if not path.is_file() or path.read_text() != card:
                stale.append(str(path))
            continue
        path.write_text(card)
        print(f"wrote {path} from {export}")
    if not exports:  # the cards are current: the README's tables follow their records
        readme = readme_sections(README.read_text())
        if check and README.read_text() != readme:
            stale.append(str(README))
        elif not check:
            README.write_text(readme)
    return stale


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    stale = write_cards(config.export, config.check)
    if stale:
        print(f"stale (run make cards): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
