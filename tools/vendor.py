"""Vendor shared_modeling/ into the Hub folders as flat, generated `shared_<module>.py` files.

Remote code on the Hub only resolves sibling files, so each folder gets a copy of the modules it uses, with
relative imports rewritten (`from .pooling import x` -> `from .shared_pooling import x`) and a header saying where
the file came from. Never edit the copies: edit shared_modeling/ and regenerate.

Usage:
    python -m tools.vendor           # regenerate every copy (make vendor)
    python -m tools.vendor --check   # exit 1 and list the drift if any copy differs (make check-vendor)
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "shared_modeling"

# Hub folder -> the shared_modeling modules it vendors (every module a vendored module imports must be listed too).
VENDORED = {
    "captionbert-8192-v2": ["layers", "pooling", "amoe"],
    "geolip-clip-ctx576": ["pooling", "segments"],
}

RELATIVE_IMPORT = re.compile(r"^from \.(\w+) import ", flags=re.MULTILINE)


def vendored_text(module):
    """The generated file for shared_modeling/<module>.py."""
    source = (SOURCE / f"{module}.py").read_text()
    header = f"# Generated from shared_modeling/{module}.py by `make vendor`. Do not edit: edit the source and regenerate.\n"
    return header + RELATIVE_IMPORT.sub(r"from .shared_\1 import ", source)


def expected_files():
    """{path: text} of every vendored file that should exist."""
    files = {}
    for folder, modules in VENDORED.items():
        for module in modules:
            text = vendored_text(module)
            missing = set(RELATIVE_IMPORT.findall((SOURCE / f"{module}.py").read_text())) - set(modules)
            if missing:
                raise SystemExit(f"{folder}: shared_modeling/{module}.py imports {sorted(missing)}, not vendored there")
            files[ROOT / folder / f"shared_{module}.py"] = text
    return files


def stale_files(files):
    """shared_*.py files in a vendoring folder that no longer correspond to a vendored module."""
    return [path for folder in VENDORED for path in sorted((ROOT / folder).glob("shared_*.py")) if path not in files]


def drift(files):
    """Human-readable problems: copies that are missing or differ, and stale copies."""
    problems = [f"missing: {p.relative_to(ROOT)}" for p, text in files.items() if not p.exists()]
    problems += [f"differs from its source: {p.relative_to(ROOT)}"
                 for p, text in files.items() if p.exists() and p.read_text() != text]
    problems += [f"stale (no longer vendored): {p.relative_to(ROOT)}" for p in stale_files(files)]
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args(argv)

    files = expected_files()
    problems = drift(files)
    if args.check:
        if problems:
            print("vendored copies drifted from shared_modeling/ (run `make vendor`):", *problems, sep="\n  ")
            return 1
        print(f"vendored copies up to date ({len(files)} files)")
        return 0
    for path in stale_files(files):
        path.unlink()
    for path, text in files.items():
        path.write_text(text)
    print(f"vendored {len(files)} files; fixed: {problems or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
