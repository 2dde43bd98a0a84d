"""Vendor shared_modeling/ into the Hub folders as flat, generated `shared_<module>.py` files.

Remote code on the Hub only resolves sibling files, so each folder gets a copy of the modules it uses, with
relative imports rewritten (`from .pooling import x` -> `from .shared_pooling import x`) and a header saying where
the file came from. Never edit the copies: edit shared_modeling/ and regenerate.

Usage:
    python -m tools.vendor           # regenerate every copy (make vendor)
    python -m tools.vendor --check   # exit 1 and list the drift if any copy differs (make check-vendor)
"""

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import registry, runs

SOURCE = runs.ROOT / "shared_modeling"

# at the start of a line, indented too: a module may import another lazily, inside a function
RELATIVE_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from \.(?P<module>\w+) import ", flags=re.MULTILINE)


@dataclass
class Config:
    check: bool = field(default=False, metadata={"help": "only compare; exit 1 on drift"})


def vendored_text(module):
    """The generated file for shared_modeling/<module>.py."""
    source = (SOURCE / f"{module}.py").read_text()
    header = (f"# Generated from shared_modeling/{module}.py by `make vendor`. Do not edit: edit the source and "
              "regenerate.\n")
    return header + RELATIVE_IMPORT.sub(r"\g<indent>from .shared_\g<module> import ", source)


def expected_copies(folder):
    """{path: text} of the vendored files a Hub folder must hold, wherever it lies (a copy about to be published,
    too): the copies the registry lists for a folder of its name (every module a vendored module imports must be
    listed too)."""
    folder, files = Path(folder), {}
    pipeline = registry.BY_FOLDER.get(folder.name)
    modules = pipeline.vendored if pipeline else ()
    for module in modules:
        imported = {match["module"] for match in RELATIVE_IMPORT.finditer((SOURCE / f"{module}.py").read_text())}
        missing = imported - set(modules)
        if missing:
            raise SystemExit(f"{folder.name}: shared_modeling/{module}.py imports {sorted(missing)}, not vendored "
                             "there")
        files[folder / f"shared_{module}.py"] = vendored_text(module)
    return files


def stale_files(folder, files):
    """shared_*.py files in `folder` that no longer correspond to a vendored module."""
    return [path for path in sorted(Path(folder).glob("shared_*.py")) if path not in files]


def folder_drift(folder):
    """Human-readable problems of one folder's copies: missing, differing from their source, stale."""
    folder, files = Path(folder), expected_copies(folder)
    problems = [f"missing: {folder.name}/{p.name}" for p in files if not p.exists()]
    problems += [f"differs from its source: {folder.name}/{p.name}"
                 for p, text in files.items() if p.exists() and p.read_text() != text]
    problems += [f"stale (no longer vendored): {folder.name}/{p.name}" for p in stale_files(folder, files)]
    return problems


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)

    folders = [pipeline.path for pipeline in registry.PIPELINES if pipeline.vendored]
    problems = [problem for folder in folders for problem in folder_drift(folder)]
    files = {path: text for folder in folders for path, text in expected_copies(folder).items()}
    if config.check:
        if problems:
            print("vendored copies drifted from shared_modeling/ (run `make vendor`):", *problems, sep="\n  ")
            return 1
        print(f"vendored copies up to date ({len(files)} files)")
        return 0
    for folder in folders:
        for path in stale_files(folder, files):
            path.unlink()
    for path, text in files.items():
        path.write_text(text)
    print(f"vendored {len(files)} files; fixed: {problems or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
