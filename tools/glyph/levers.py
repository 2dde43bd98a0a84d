"""Levers for glyph-embedder-v2 (issue 44): training runs that each change one thing in the training data against
today's recipe, every one scored by tools/glyph/evaluate.py on the same three sets.

Usage:
    python -m tools.glyph.levers --out runs/levers/glyph                                   # every lever, cpu steps
    python -m tools.glyph.levers --out runs/levers/glyph-quick --mlm-steps 200 --contrastive-steps 500  # quick steps
    python -m tools.glyph.levers --out runs/levers/glyph --only recipe hand50

The sets, the same for every lever:
    validation  the recipe corpus's validation triples (training atoms, the house surface): levers are chosen here;
    (a)         the recipe corpus's test triples (held-out atoms; every lever's corpus holds the same ones, checked
                by test_sha256);
    (b)         out/crosscheck, tools/glyph/crosscheck.py with its defaults (an independent generator): reported,
                never chosen by.
Each lever is a corpus (out/<name>/corpus: tools/glyph/corpus.py with the recipe's options, then the lever's own)
and a training run on it (out/<name>/train: tools/glyph/train.py with the options after this tool's own, e.g. the
steps, the same for every lever but those of STEP_SHARES, which train that share of the contrastive steps to spend
about the recipe's minutes), then one evaluation per set (out/<name>/eval-<set>). Every part resumes and a
finished one is skipped. out/levers.json holds one row per lever (training minutes; win rate, MRR@10 and the weakest
family on each set), rewritten after each lever ("complete" once every lever named ran).
"""

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import runs
from tools.glyph import data

LEVERS = {  # name: (lever, what it changes against today's recipe, its corpus options)
    "recipe": ("recipe", "today's recipe: tools/glyph/corpus.py's defaults", []),
    "direction25": ("1 direction", "a quarter of the training triples are direction cases: the paraphrase mirrors a "
                    "directed relation, the mutation flips its operator in the anchor's order",
                    ["--direction-share", "0.25"]),
    "hand50": ("surface", "half of the training triples printed with a hand-varied surface (spaces beside any "
               "operator or none, spare parentheses) instead of the two house styles", ["--hand-share", "0.5"]),
    "decoy50": ("3 mutation mix", "half of the training triples move the rename from the paraphrase (then structural "
                "rewrites only) to the mutation: a changed atom word no longer tells the paraphrase",
                ["--decoy-share", "0.5"]),
    "varied50": ("2 atom diversity", "half of the training triples have varied atoms: up to four words, a number "
                 "part (`layer_12`, `v5`), a made-up code-like name (`tobe3li`)", ["--varied-share", "0.5"]),
    "deep25": ("depth", "a quarter of the training triples are chains of 5-8 atoms (binary depth 3-4; the others "
               "reach 3)", ["--deep-share", "0.25"]),
    "spaces": ("4 tokenizer", "a BPE that merges no white space into a token: `a ⇒ b` and `a⇒b` share every token but "
               "the spaces", ["--spaces-apart"]),
    "varied50-eqmin": ("2 atom diversity", "varied50 at the recipe's minutes: its longer strings cost more a step, so "
                       "it trains 0.73 of the contrastive steps", ["--varied-share", "0.5"]),
}
# Levers that train a share of the contrastive steps the training options give, so they spend about the recipe's
# minutes: varied50 took 60.8 min to the recipe's 44.3 at 200 + 500 steps (stop 53's quick levers), 0.73 of them.
STEP_SHARES = {"varied50-eqmin": 0.73}
CROSSCHECK = []  # tools/glyph/crosscheck.py's options for set (b): its defaults
SETS = ("validation", "a", "b")


@dataclass
class Config:
    out: Path = field(metadata={
        "help": "the levers' folder: out/<lever>/{corpus,train,eval-<set>}, out/validation, out/crosscheck"})
    only: list[str] = field(default_factory=lambda: list(LEVERS), metadata={
        "choices": list(LEVERS), "help": "the levers to run"})
    # No flag: the options after the tool's own, passed to every training run
    training_options: list[str] = field(init=False, default_factory=list)


def set_row(evaluation, label):
    """A lever's row on one set: win rate, MRR@10 and its weakest family (name, win rate, triples)."""
    row = evaluation["rows"][label]
    family, weakest = min(row["families"].items(), key=lambda item: item[1]["win_rate"])
    return {"win_rate": row["win_rate"], "mrr_at_10": row["mrr_at_10"],
            "weakest_family": {"family": family, **weakest}}


def contrastive_steps(training_options):
    """The contrastive steps of a training run with these options, as tools/glyph/train.py resolves them: their
    --contrastive-steps, else their preset's (its --corpus and --out play no part)."""
    options = ["--corpus", "-", "--out", "-", *training_options]
    return runs.parse_config(data.Config, options, presets=data.PRESETS).contrastive_steps


def lever_row(name, train, evaluations):
    lever, change, options = LEVERS[name]
    return {"name": name, "lever": lever, "change": change, "corpus_options": options,
            "contrastive_steps": train["contrastive"]["steps"],
            "training_minutes": round(train["mlm"]["training_minutes"] + train["contrastive"]["training_minutes"], 1),
            **{key: set_row(evaluations[key], name) for key in SETS}}


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__, pass_on="training_options", allow_abbrev=False)
    recipe = config.out / "recipe" / "corpus"
    with runs.RunRecord(config.out, config, "glyph.levers"):
        runs.run_tool("tools.glyph.corpus", "--out", recipe, *LEVERS["recipe"][2])
        validation = config.out / "validation"
        if not (validation / "test.jsonl").is_file():  # evaluate reads a folder's test.jsonl
            validation.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(recipe / "validation.jsonl", validation / "test.jsonl")
        crosscheck = config.out / "crosscheck"
        if not (crosscheck / "metrics.json").is_file():
            runs.run_tool("tools.glyph.crosscheck", "--out", crosscheck, *CROSSCHECK)
        sets = {"validation": validation, "a": recipe, "b": crosscheck}
        test_sha256 = runs.read_json(recipe / "metrics.json")["test_sha256"]
        rows = []
        for name in config.only:
            folder = config.out / name
            print(f"lever {name}: corpus {' '.join(LEVERS[name][2]) or '(defaults)'}")
            options = LEVERS["recipe"][2] + (LEVERS[name][2] if name != "recipe" else [])
            runs.run_tool("tools.glyph.corpus", "--out", folder / "corpus", *options)
            if runs.read_json(folder / "corpus" / "metrics.json")["test_sha256"] != test_sha256:
                raise SystemExit(f"{folder / 'corpus'}: its test triples differ from the recipe's")
            share = STEP_SHARES.get(name)  # the last --contrastive-steps is the one train.py reads
            steps = [] if share is None else [
                "--contrastive-steps", str(round(share * contrastive_steps(config.training_options)))]
            runs.run_tool("tools.glyph.train", "--corpus", folder / "corpus", "--out", folder / "train",
                          *config.training_options, *steps)
            evaluations = {}
            for key, corpus in sets.items():
                evaluation = folder / f"eval-{key}"
                if not (evaluation / "metrics.json").is_file():
                    runs.run_tool("tools.glyph.evaluate", "--corpus", corpus, "--out", evaluation,
                                  "--encoder", f"{name}={folder / 'train' / 'final'}")
                evaluations[key] = runs.read_json(evaluation / "metrics.json")
            rows.append(lever_row(name, runs.read_json(folder / "train" / "metrics.json"), evaluations))
            runs.write_json(config.out / "levers.json", {"rows": rows, "complete": len(rows) == len(config.only)})
    for row in rows:
        scores = "; ".join(f"{key} win {row[key]['win_rate']:.3f} MRR {row[key]['mrr_at_10']:.3f} (weakest "
                           f"{row[key]['weakest_family']['family']} {row[key]['weakest_family']['win_rate']:.2f})"
                           for key in SETS)
        print(f"{row['name']:>12}: {row['training_minutes']:.1f} min; {scores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
