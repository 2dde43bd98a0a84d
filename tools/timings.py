"""The measured times of the README's commands (`make timings`): what each command recorded of its last complete run,
gathered into records/timings.json, from which `make cards` writes the README's commands table.

Usage:
    python -m tools.timings     # records/timings.json from runs/; a command with no complete run keeps its entry

What each command records in runs/ (not in git), and what counts as complete:
    make setup              runs/setup.json: the seconds it took to create .venv and install (the Makefile writes it
                            when it installs; an up-to-date .venv writes nothing); complete: it compiled
                            llama-cpp-python, as a first install does (a wheel from pip's cache takes a minute)
    make test               runs/test/session.json: pytest's wall time and outcome (tests/conftest.py writes it as a
                            session ends); complete: the whole suite ran (no file, -k or -m selection) and passed
    make demo [BUDGET=cpu]  runs/<budget>/steps.json: the minutes each step took as built (tools/demo.py writes it as
                            the demo ends); complete: every step of the three models finished
Each entry keeps the machine's core count: the README shows times on the cores they were measured on.
"""

import sys
from dataclasses import dataclass

from tools import demo, registry, runs

TIMINGS = runs.ROOT / "records" / "timings.json"
SETUP = runs.ROOT / "runs" / "setup.json"
TEST_SESSION = runs.ROOT / "runs" / "test" / "session.json"


@dataclass
class Config:
    """No options: the command line takes --help alone."""


def setup_entry():
    """make setup's last install, or None."""
    if not SETUP.is_file():
        return None
    record = runs.read_json(SETUP)
    if not record.get("compiled"):
        print(f"{SETUP}: llama-cpp-python came from pip's wheel cache, not as a first install; make setup's entry is "
              "kept (`pip cache remove llama_cpp_python`, then remove .venv, to measure one)")
        return None
    return {"minutes": record["seconds"] / 60, "cpus": record["cpus"], "measured": record["finished"]}


def test_entry():
    """make test's last whole, passing session, or None (with the reason printed)."""
    if not TEST_SESSION.is_file():
        return None
    record = runs.read_json(TEST_SESSION)
    if not record["whole_suite"] or record["exit_status"] != 0:
        print(f"{TEST_SESSION}: not a whole passing suite (exit status {record['exit_status']}, whole suite: "
              f"{record['whole_suite']}); make test's entry is kept")
        return None
    return {"minutes": record["seconds"] / 60, "cpus": record["cpus"], "measured": record["finished"],
            "tests": record["tests"]}


def demo_entry(budget):
    """make demo's last complete build at this budget (the sum of its steps' minutes as built), or None."""
    path = runs.ROOT / demo.BUDGETS[budget].root / "steps.json"
    if not path.is_file():
        return None
    record = runs.read_json(path)
    if sorted(record["models"]) != sorted(registry.BY_FOLDER):
        print(f"{path}: a build of {', '.join(record['models'])} only; its entry is kept")
        return None
    return {"minutes": sum(step["minutes"] or 0 for step in record["steps"].values()), "cpus": record["cpus"],
            "measured": record["finished"], "steps": len(record["steps"])}


def command(budget):
    return "make demo" if budget == "quick" else f"make demo BUDGET={budget}"


def main(argv=None):
    runs.parse_config(Config, argv, __doc__)
    timings = runs.read_json(TIMINGS) if TIMINGS.is_file() else {}
    found = {"make setup": setup_entry(), "make test": test_entry(),
             **{command(budget): demo_entry(budget) for budget in demo.BUDGETS}}
    for name, entry in found.items():
        if entry is not None:
            timings[name] = entry
            print(f"{name}: {entry['minutes']:.1f} min on {entry['cpus']} cores ({entry['measured']})")
    runs.write_json(TIMINGS, timings)
    print(f"wrote {TIMINGS.relative_to(runs.ROOT)}; make cards puts it in the README")
    return 0


if __name__ == "__main__":
    sys.exit(main())
