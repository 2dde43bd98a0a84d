"""Release a build (`make release BUDGET=cpu`): copy the model folders that make demo built under runs/<budget>/ into
the Hub folders, with the compact run records their cards come from, and regenerate the cards.

make demo never writes the Hub folders: each export step builds its folder inside its run folder
(runs/<budget>/<pipeline>/export/<folder>/, tools/registry.py). Shipping one is this explicit step.

Usage:
    python -m tools.release --budget cpu                              # the three models of runs/demo
    python -m tools.release --budget cpu --model captionbert-8192-v2  # one (repeatable)
    python -m tools.release --budget quick --force                    # even below the shipped headline

What it does, per model:
    1. finds the budget's finished export run and the folder it built;
    2. compares the build's headline (the first result of its card's model-index) with the shipped card's, and
       refuses a build below it unless --force (make demo's quick budget builds weaker models);
    3. mirrors the records under records/<folder>/: every JSON file (tokenizer files aside) of the export run and of
       the runs its config names, transitively, at its path below the repository, without the built folder, weights,
       checkpoints or event files; records/<folder>/release.json names the export run;
    4. copies the built folder's files into the Hub folder and deletes the Hub folder's export-written files the build
       lacks (another build's arms, say);
    5. regenerates the card from records/<folder>/ alone and checks that it is the build's card byte for byte (so the
       records hold everything the card needs), then the project README's generated tables (tools/cards.py);
    6. prints each shipped binary with its size.
"""

import fnmatch
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools import cards, demo, registry, runs


@dataclass
class Config:
    budget: str = field(metadata={"choices": sorted(demo.BUDGETS), "help": "the make demo budget to ship"})
    model: list[str] = field(default_factory=list, metadata={
        "action": "extend", "choices": list(registry.BY_FOLDER), "metavar": "FOLDER",
        "help": f"release only this model (repeatable; one of {', '.join(registry.BY_FOLDER)})"})
    force: bool = field(default=False, metadata={"help": "ship a build whose headline is below the shipped one"})


def finished_export(pipeline, budget):
    """The budget's export run of this pipeline, after checking it finished."""
    export = runs.ROOT / demo.BUDGETS[budget].root / pipeline.export
    run = export / "run.json"
    if not run.is_file() or runs.read_json(run).get("status") != "ok":
        raise SystemExit(f"{export} holds no finished export: run make demo BUDGET={budget} MODEL={pipeline.folder}")
    return export


def record_files(export):
    """(source, path relative to the repository) of every JSON record the card of this export run rests on."""
    built = cards.built_folder(export)
    files = []
    for folder in cards.source_folders(export):
        relative = folder.resolve().relative_to(runs.ROOT)
        for path in sorted(folder.rglob("*.json")):
            if (built not in path.parents and "tokenizer" not in path.name and "vocab" not in path.name
                    and path.name != demo.STATE):
                files.append((path, relative / path.relative_to(folder)))
    return files


def check_relative(export):
    """Refuse an export whose configs name its run folders by absolute paths: the mirrored records could not resolve
    them."""
    for folder in cards.source_folders(export):
        absolute = [value for value in cards.named_paths(folder) if Path(value).is_absolute()
                    and cards.is_run_folder(Path(value))]
        if absolute:
            raise SystemExit(f"{folder / 'config.json'} names the run {absolute[0]} by an absolute path: release "
                             "builds made by make demo, whose runs are named relative to the repository")


def write_records(pipeline, export, budget):
    """The mirrored records of this export, staged in records/.<folder>.new (release moves them into records/<folder>/
    once the card they regenerate is the build's); returns that folder."""
    root = cards.RECORDS / f".{pipeline.folder}.new"
    if root.exists():
        shutil.rmtree(root)
    for source, relative in record_files(export):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, root / relative)
    runs.write_json(root / cards.RELEASE, {"export": str(export.relative_to(runs.ROOT)), "budget": budget,
                                           "released": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return root


def copy_build(pipeline, built):
    """Make the Hub folder the built folder: copy every file in, delete the export-written files it lacks."""
    wanted = {path.relative_to(built).as_posix() for path in built.rglob("*") if path.is_file()}
    for path in sorted(pipeline.path.rglob("*"), reverse=True):  # files before the folders that held them
        relative = path.relative_to(pipeline.path).as_posix()
        if path.is_file() and relative not in wanted and pipeline.is_built(relative):
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for relative in sorted(wanted):
        (pipeline.path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(built / relative, pipeline.path / relative)


def release(pipeline, budget, force=False):
    """Ship the budget's build of this pipeline into its Hub folder (the module docstring's steps 1-6)."""
    export = finished_export(pipeline, budget)
    built = cards.built_folder(export)
    new, shipped = cards.headline(built), cards.headline(pipeline.path)
    if new is None:
        raise SystemExit(f"{built} has no card: the export did not finish")
    if shipped is not None and not force:
        if shipped[0] != new[0]:
            raise SystemExit(f"{pipeline.folder}: this build's headline is {new[0]}, the shipped card's {shipped[0]}: "
                             "they cannot be compared; --force (make release FORCE=1) ships it anyway")
        if new[1] < shipped[1]:
            raise SystemExit(f"{pipeline.folder}: this build's {new[0]} is {new[1]}, below the shipped {shipped[1]}; "
                             "--force (make release FORCE=1) ships it anyway")
    check_relative(export)
    staged = write_records(pipeline, export, budget)
    card = cards.card_from_records(staged / export.relative_to(runs.ROOT), staged)
    if card != (built / "README.md").read_text():
        shutil.rmtree(staged)
        raise SystemExit(f"the card regenerated from the mirrored records differs from {built}/README.md: a record "
                         f"it reads was not mirrored ({pipeline.folder}/ and its records are unchanged)")
    root = cards.RECORDS / pipeline.folder
    if root.exists():
        shutil.rmtree(root)
    staged.rename(root)
    copy_build(pipeline, built)
    print(f"{pipeline.folder}: released {built.relative_to(runs.ROOT)} ({new[0]} {new[1]}; shipped before: "
          f"{shipped[1] if shipped else 'none'}); records in {root.relative_to(runs.ROOT)}")
    for path in sorted(pipeline.path.rglob("*")):
        if path.is_file() and any(fnmatch.fnmatch(path.relative_to(pipeline.path).as_posix(), pattern)
                                  for pattern in pipeline.weights):
            print(f"  {path.relative_to(runs.ROOT)}  {path.stat().st_size / 1e6:.1f} MB")


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    pipelines = [registry.BY_FOLDER[folder] for folder in config.model] if config.model else list(registry.PIPELINES)
    for pipeline in pipelines:
        release(pipeline, config.budget, config.force)
    cards.README.write_text(cards.readme_sections(cards.README.read_text()))
    print(f"wrote {cards.README.name}'s generated tables; `git status` shows what to commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
