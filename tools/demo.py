"""The main job (`make demo`): build, evaluate and export the three models at the embedded default, reload each
built folder the way users will, and print one summary table: each build's headline beside the shipped model's, and
the build time. It never writes the Hub folders: `make release` (tools/release.py) copies a build in.

Usage:
    python -m tools.demo                  # every step not finished yet, quick budget, into runs/quick (make demo)
    python -m tools.demo --budget cpu     # the cpu presets, into runs/demo (make demo BUDGET=cpu)
    python -m tools.demo --force          # rebuild every step from scratch (make demo FORCE=1)
    python -m tools.demo --list           # the steps, whether each is finished and its minutes; runs nothing
    python -m tools.demo --model geolip-clip-ctx576   # one model's steps, card and load check (make demo MODEL=...)

Two budgets (BUDGETS): quick, make demo's default, with shorter training and weaker models; cpu runs every tool's
cpu preset, the settings each model's goals were measured at (`--list` shows each step's minutes as built). Each
has its own runs folder; each export step builds its model's folder and card inside its run folder
(runs/<budget>/<pipeline>/export/<folder>/).

Each step is one tool run (`python -m tools.<tool> ...`) writing one run folder under the budget's root. A step is
finished when its folder holds demo-step.json with status "done", the fingerprint it ran with (a hash of its tool, its
arguments and the results of the steps it reads) and the content hash of what it wrote, and both still hold. So a
rerun skips finished steps, reruns a step whose inputs changed (its old folder is removed first: stale results must
not be resumed), and lets a step that was interrupted resume from its own checkpoints. A folder with a successful
run record of the same command but no demo-step.json (built before this tool) is adopted as finished; one built by
another command with the same settings is adopted when named with --adopt.
A step reads another step's results when one of its arguments (or the PATH of a NAME=PATH one) is that step's folder or
lies inside it.

After the steps, each built folder goes through tools/publish.py's load check: a copy of the files that would be
published, loaded in a fresh process with the project not importable, the ways users load it (AutoModel with
trust_remote_code, plus SentenceTransformer and the arms on / off for captionbert-8192-v2; SentenceTransformer and
llama-cpp-python for glyph-embedder-v2's GGUF).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools import cards, publish, registry, runs

STATE = "demo-step.json"
TEACHERS = ["--encoder", "teacher:all-mpnet-base-v2", "--encoder", "teacher:all-MiniLM-L6-v2",
            "--encoder", "teacher:paraphrase-MiniLM-L3-v2"]
NOT_CONTENT = ("tensorboard",)  # folders whose files are logs, not results


@dataclass(frozen=True)
class Budget:
    """How long the demo trains: the options each step adds to its tool's cpu preset, and where its runs go."""
    root: str  # the parent of the run folders
    extract: tuple = ()  # tools/captionbert/extract.py options
    align: tuple = ()  # tools/captionbert/align.py options (its fit and held-out rows must fit in the extraction)
    distill: tuple = ()  # tools/captionbert/train.py options of the shipped student
    scratch: tuple = ()  # its options for the card's from-scratch row (the same budget from a random init)
    arms: tuple = ()  # AMOE solo arms: (name, steps); a pairs.TRAINING_SETS name, "silver" (the silver step's
    #                   teacher-scored pairs) or "teacher" (the reference teacher's embeddings in the extraction)
    levers: bool = False  # run tools/captionbert/amoe/levers.py on the trunk (the card's levers table)
    glyph: tuple = ()  # tools/glyph/train.py options
    geolip: tuple = ()  # tools/geolip/train.py options
    geolip_ablation: bool = False  # also train and score geolip with 55-token segments (the card compares the runs)


BUDGETS = {
    # Every tool's cpu preset: the settings each model's goals are measured at (the distillation starts from
    # all-mpnet-base-v2's selected weights), plus the card's from-scratch row at the same steps and its own learning
    # rate. Its records (runs/demo) are the ones the committed cards come from. silver's 12,000 pairs get 4x the steps
    # of the other arms: at 480 its validation mean was .5470 and select shipped {sts} alone; at 1,920 it is .5611 and
    # select adds it. On the trunk distilled from the teachers (float32 build of session 10) the task arms scored
    # below it on STS-8 (equiv -.008, sts -.011; silver +.005 but lower on 3 tasks), so the teacher arm, which pulls
    # the trunk's embeddings towards the reference teacher's (above the trunk on every STS-8 task), is a candidate
    # too; a step of it embeds 16 texts, half a pair arm's, so it gets twice the steps. The sts arm (STS-B train) is
    # no candidate: STS-B dev is a selection set, so it would be judged on its own source (tools/captionbert/amoe/
    # pairs.py); the MRPC paraphrase arm takes its place. geolip's ablation uses 55-token segments (the same 22%
    # overlap as 18 every 14).
    "cpu": Budget(root="runs/demo", scratch=("--learning-rate", "5e-4"),
                  arms=(("equiv", 480), ("paraphrase", 480), ("silver", 1920), ("teacher", 960)), levers=True,
                  geolip_ablation=True),
    # make demo's default: the same steps with shorter training and so weaker models (the cards say which goals they
    # miss): 12,000 of the ~53,000 captions, 160 distillation steps (and as many for the from-scratch row), the two arm
    # candidates that beat the trunk on validation in the cpu build (silver .7465, teacher .7481 against the trunk's
    # .7427; equiv .7302 and paraphrase .6946 fell below it, and paraphrase's seed spread, .0110, set that build's
    # bar) at a third of the cpu steps, a third of glyph's steps, 3/8 of geolip's, no ablation.
    "quick": Budget(root="runs/quick", extract=("--sample", "12000"),
                    align=("--fit-rows", "8000", "--holdout-rows", "2000"),
                    distill=("--steps", "160", "--warmup-steps", "16"),
                    scratch=("--steps", "160", "--warmup-steps", "16", "--learning-rate", "5e-4"),
                    arms=(("silver", 640), ("teacher", 320)),
                    glyph=("--mlm-steps", "200", "--contrastive-steps", "500"),
                    geolip=("--steps", "192")),
}


@dataclass
class Config:
    data_dir: Path = field(default_factory=runs.default_data_dir)  # the shared data (make demo's DATA_DIR)
    budget: str = field(default="quick", metadata={
        "choices": sorted(BUDGETS), "help": "quick: shorter training, weaker models (default); cpu: every tool's cpu "
                                            "preset"})
    force: bool = field(default=False, metadata={"help": "rebuild every step from scratch"})
    adopt: list[str] = field(default_factory=list, metadata={
        "action": "extend", "metavar": "STEP",
        "help": "treat this step's folder as finished although its run record shows another command (built by hand "
                "with the same settings); repeatable"})
    model: list[str] = field(default_factory=list, metadata={
        "action": "extend", "choices": list(registry.BY_FOLDER), "metavar": "FOLDER",
        "help": "build only this model's steps, then load-check the folder it built "
                f"(repeatable; one of {', '.join(registry.BY_FOLDER)}; default: all three)"})
    # Last: below it, in the class body, the name hides the builtin list
    list: bool = field(default=False, metadata={"help": "list the steps and their state; run nothing"})


@dataclass
class Step:
    tool: str  # module under tools/
    args: list  # its command line, with --out <the run folder it writes>
    record: str = "run.json"  # its run record, relative to that folder

    @property
    def out(self):
        return self.args[self.args.index("--out") + 1]

    @property
    def name(self):
        """The run folder below its budget's root (runs/<root>/)."""
        return "/".join(Path(self.out).parts[2:])

    @property
    def pipeline(self):
        """The pipeline (tools/registry.py) this step builds toward: its module's package."""
        return registry.BY_NAME[self.tool.split(".")[0]]


def demo_steps(data_dir, budget=BUDGETS["quick"]):
    """Every step of the demo at this budget, in order."""
    data, root = ["--data-dir", str(data_dir)], budget.root
    silver = f"{root}/amoe/silver/silver.tsv"
    arm_data = {"silver": silver, "teacher": f"{root}/extract"}  # arms whose data another step writes
    arms = [(name, arm_data.get(name, name), arm_steps) for name, arm_steps in budget.arms]
    steps = [Step("captionbert.extract", [*data, "--out", f"{root}/extract", *budget.extract],
                  record="runs/process-0/run.json"),
             Step("captionbert.align", ["--extract", f"{root}/extract", "--out", f"{root}/align", *budget.align]),
             Step("captionbert.train", ["--preset", "cpu", "--align", f"{root}/align", "--out", f"{root}/distill",
                                        *budget.distill]),
             Step("captionbert.train", ["--preset", "cpu", "--align", f"{root}/align", "--out",
                                        f"{root}/distill-scratch", "--init", "scratch", *budget.scratch]),
             Step("captionbert.evaluate", [*data, "--out", f"{root}/eval", "--encoder",
                                           f"captionbert-8192-v2={root}/distill/final", "--encoder",
                                           f"captionbert-8192-v2 (from scratch)={root}/distill-scratch/final",
                                           "--encoder", "model2vec:all-mpnet-base-v2", *TEACHERS]),
             Step("captionbert.long_inputs", [*data, "--model", f"{root}/distill/final", "--out", f"{root}/long"])]
    # captionbert whole first (its arms on the trunk just built, then its export), the project's main model, then
    # glyph and geolip: a build spread over several sittings lands one model at a time.
    if "silver" in dict(budget.arms):
        steps.append(Step("captionbert.amoe.silver", ["--extract", f"{root}/extract", "--out", f"{root}/amoe/silver"]))
    for seed in (0, 1):  # both seeds score STS-8: select correlates validation with it across candidates and seeds
        for name, arm, arm_steps in arms:
            out = f"{root}/amoe/solo/{name}-seed{seed}"
            steps.append(Step("captionbert.amoe.solo", ["--data", arm, "--steps", str(arm_steps), "--seed", str(seed),
                                                        "--model", f"{root}/distill/final", *data, "--out", out]))
    steps.append(Step("captionbert.amoe.select", ["--solo", f"{root}/amoe/solo", "--candidates",
                                                  *[name for name, _, _ in arms], "--model", f"{root}/distill/final",
                                                  *data, "--out", f"{root}/amoe/select"]))
    levers = ["--levers", f"{root}/amoe/levers"] if budget.levers else []
    if budget.levers:
        steps.append(Step("captionbert.amoe.levers", ["--extract", f"{root}/extract", "--align", f"{root}/align",
                                                      "--model", f"{root}/distill/final", *data,
                                                      "--out", f"{root}/amoe/levers"]))
    steps.append(Step("captionbert.export", ["--extract", f"{root}/extract", "--align", f"{root}/align", "--distill",
                                             f"{root}/distill", "--eval", f"{root}/eval", "--long", f"{root}/long",
                                             "--amoe", f"{root}/amoe/select", *levers,
                                             "--out", f"{root}/captionbert/export"]))
    # Every geolip run, of either budget, has the teacher embed the same texts (26 min of float32 on 2 AVX2 cores):
    # one cache, outside the budgets' folders; its index names the teacher, precision and texts it holds.
    teacher_cache = ["--teacher-cache", "runs/geolip-teacher/teacher.npy"]
    steps += [
        Step("glyph.corpus", ["--out", f"{root}/glyph/corpus"]),
        Step("glyph.train", ["--corpus", f"{root}/glyph/corpus", "--out", f"{root}/glyph/train", *budget.glyph]),
        Step("glyph.evaluate", ["--corpus", f"{root}/glyph/corpus", "--out", f"{root}/glyph/eval", "--encoder",
                                f"glyph-embedder-v2={root}/glyph/train/final",
                                "--encoder", "teacher:all-MiniLM-L6-v2"]),
        Step("glyph.crosscheck", [*data, "--out", f"{root}/glyph/crosscheck"]),  # test set (b), its defaults
        Step("glyph.evaluate", ["--corpus", f"{root}/glyph/crosscheck", "--out", f"{root}/glyph/eval-b", "--encoder",
                                f"glyph-embedder-v2={root}/glyph/train/final",
                                "--encoder", "teacher:all-MiniLM-L6-v2"]),
        Step("glyph.export", ["--corpus", f"{root}/glyph/corpus", "--train", f"{root}/glyph/train", "--eval",
                              f"{root}/glyph/eval", "--eval-b", f"{root}/glyph/eval-b", "--out",
                              f"{root}/glyph/export"]),
        Step("geolip.train", ["--out", f"{root}/geolip/train", *teacher_cache, *budget.geolip]),
        Step("geolip.evaluate", ["--train", f"{root}/geolip/train", "--out", f"{root}/geolip/eval"]),
    ]
    ablation = []
    if budget.geolip_ablation:
        steps += [Step("geolip.train", ["--out", f"{root}/geolip/train-seg55", "--segment-size", "55",
                                        "--segment-stride", "43", *teacher_cache, *budget.geolip]),
                  Step("geolip.evaluate", ["--train", f"{root}/geolip/train-seg55", "--out",
                                           f"{root}/geolip/eval-seg55"])]
        ablation = ["--ablation", f"{root}/geolip/eval-seg55"]
    steps.append(Step("geolip.export", ["--train", f"{root}/geolip/train", "--eval", f"{root}/geolip/eval", *ablation,
                                        "--out", f"{root}/geolip/export"]))
    return steps


def reads(step, earlier):
    """Whether `step` reads `earlier`'s results: one of its arguments (or the path of a NAME=PATH argument) is that
    folder, inside it, or contains it."""
    return any(arg == earlier.out or arg.startswith(earlier.out + "/") or earlier.out.startswith(arg + "/")
               for arg in (str(arg).rpartition("=")[2] for arg in step.args))


def content_hash(folder):
    """sha256 over the files a step wrote (relative paths and bytes), logs and checkpoints aside."""
    folder = runs.ROOT / folder
    files = [path for path in sorted(folder.rglob("*")) if path.is_file() and path.name != STATE
             and path.relative_to(folder).parts[0] not in NOT_CONTENT and not path.name.startswith("checkpoint")]
    return runs.files_sha256(files, folder)


def fingerprint(step, inputs):
    """A hash of the step's command and of the results (content hashes) of the steps it reads."""
    return hashlib.sha256(json.dumps([step.tool, list(map(str, step.args)), inputs]).encode()).hexdigest()


def recorded_minutes(step):
    """The minutes the step's run record spans, or None."""
    record = runs.ROOT / step.out / step.record
    if not record.is_file():
        return None
    run = runs.read_json(record)
    return runs.elapsed_minutes(run["started"], run["finished"]) if run.get("finished") else None


def adoptable(step, vouched=False):
    """A folder built before this tool tracked it: its run record says ok, and it ran the same command (or a person
    vouches for it with --adopt: the same settings under other paths)."""
    record = runs.ROOT / step.out / step.record
    if not record.is_file():
        return False
    run = runs.read_json(record)
    return run.get("status") == "ok" and (vouched or run["argv"][1:] == list(map(str, step.args)))


def run_step(step, index, total, inputs, force, vouched=False):
    """Run the step unless it is finished; returns (its content hash, minutes, how: built / skipped / adopted)."""
    folder, state_path = runs.ROOT / step.out, runs.ROOT / step.out / STATE
    key = fingerprint(step, inputs)
    state = runs.read_json(state_path) if state_path.is_file() else None
    header = f"[{index}/{total}] {step.name} (tools/{step.tool.replace('.', '/')}.py)"
    if not force and state and state["fingerprint"] == key and state["status"] == "done":
        if content_hash(step.out) == state["content_hash"]:
            print(f"{header}: finished ({state['minutes']:.1f} min when built), skipped")
            return state["content_hash"], state["minutes"], "skipped"
        print(f"{header}: its files changed since it finished; rebuilding")
    if not force and state is None and adoptable(step, vouched):
        minutes = recorded_minutes(step)
        result = content_hash(step.out)
        argv, how = runs.read_json(runs.ROOT / step.out / step.record)["argv"], ("vouched for (--adopt)" if vouched
                                                                                 else "the same command")
        runs.write_json(state_path, {"fingerprint": key, "status": "done", "content_hash": result,
                                     "minutes": minutes, "adopted": how, "recorded_argv": argv})
        print(f"{header}: finished before ({how}: {' '.join(argv[1:])}), adopted")
        return result, minutes, "adopted"
    if folder.exists() and (force or state is None or state["fingerprint"] != key):
        shutil.rmtree(folder)  # another command's (or stale inputs') results: never resume from them
    folder.mkdir(parents=True, exist_ok=True)
    runs.write_json(state_path, {"fingerprint": key, "status": "running"})
    print(f"{header}: {'resuming' if state and state['fingerprint'] == key else 'building'}", flush=True)
    started = time.perf_counter()
    command = [sys.executable, "-m", f"tools.{step.tool}", *map(str, step.args)]
    if subprocess.run(command, cwd=runs.ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}).returncode != 0:
        raise SystemExit(f"{header} failed: {' '.join(command)}")
    minutes = (time.perf_counter() - started) / 60
    result = content_hash(step.out)
    runs.write_json(state_path, {"fingerprint": key, "status": "done", "content_hash": result, "minutes": minutes})
    return result, minutes, "built"


def headline(folder):
    """The card's first measured result (its model-index, generated from the run records), or "none" without a card."""
    result = cards.headline(folder)
    return "none" if result is None else f"{result[0]}: {result[1]}"


def build(steps, force=False, adopt=()):
    """Run every step that is not finished, in order; returns {step name: (minutes as built, how)}. adopt: names of
    steps whose folders a person vouches for (built by hand with the same settings)."""
    unknown = set(adopt) - {step.name for step in steps}
    if unknown:
        raise SystemExit(f"--adopt names no step: {sorted(unknown)} (python -m tools.demo --list)")
    results, outcome = {}, {}
    for index, step in enumerate(steps, 1):
        inputs = {earlier.name: results[earlier.name] for earlier in steps[:index - 1] if reads(step, earlier)}
        results[step.name], minutes, how = run_step(step, index, len(steps), inputs, force, step.name in adopt)
        outcome[step.name] = (minutes, how)
    return outcome


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    if not (config.data_dir / "sts").is_dir():
        raise SystemExit(f"{config.data_dir} has no sts/: point --data-dir (DATA_DIR) at the shared data")
    budget = BUDGETS[config.budget]
    pipelines = [registry.BY_FOLDER[folder] for folder in config.model] if config.model else list(registry.PIPELINES)
    steps = [step for step in demo_steps(config.data_dir, budget) if step.pipeline in pipelines]
    if config.list:
        for index, step in enumerate(steps, 1):
            state_path = runs.ROOT / step.out / STATE
            state = runs.read_json(state_path) if state_path.is_file() else {}
            status = state.get("status") or ("adoptable" if adoptable(step) else "not started")
            minutes = f"{state['minutes']:6.1f} min" if state.get("minutes") is not None else " " * 10
            print(f"[{index}/{len(steps)}] {step.name:24} {status:11} {minutes}  "
                  f"python -m tools.{step.tool} {' '.join(step.args)}")
        return 0

    started = time.perf_counter()
    outcome = build(steps, config.force, config.adopt)
    minutes = {name: as_built for name, (as_built, _) in outcome.items()}

    print("\nreloading each built folder in a fresh process, the project not importable ...")
    lines = ["| folder | parameters | dim | headline of this build | shipped (the Hub folder's card) | loads with | "
             "embedding space | build min |", "|---|---|---|---|---|---|---|---|"]
    for pipeline in pipelines:  # the load check publish runs: a copy of exactly the files that go up
        folder = cards.built_folder(runs.ROOT / budget.root / pipeline.export)
        loaded = publish.load_check(folder, publish.published_files(folder)[0])
        model_minutes = sum(minutes[step.name] or 0 for step in steps if step.pipeline == pipeline)
        space = loaded["embedding_space"] + (f" / arms on: {loaded['embedding_space_with_arms']}"
                                             if "embedding_space_with_arms" in loaded else "")
        lines.append(f"| {pipeline.folder} | {loaded['parameters']:,} | {loaded['dimension']} | {headline(folder)} | "
                     f"{headline(pipeline.path)} | {', '.join(loaded['checks'])} | `{space}` | {model_minutes:.0f} |")
    built = [name for name, (_, how) in outcome.items() if how == "built"]
    lines.append(f"\nthis run: {(time.perf_counter() - started) / 60:.1f} min, {len(built)} of {len(steps)} steps "
                 f"built; every step as built: {sum(m or 0 for m in minutes.values()):.1f} min on {os.cpu_count()} "
                 "cores")
    lines.append(f"the builds are in {budget.root}/<pipeline>/export/<folder>/; `make release BUDGET=<budget>` copies "
                 "them into the Hub folders")
    summary = "\n".join(lines)
    (runs.ROOT / budget.root / "summary.md").write_text(summary + "\n")
    runs.write_json(runs.ROOT / budget.root / "steps.json", {  # make timings reads it (tools/timings.py)
        "models": [pipeline.folder for pipeline in pipelines], "cpus": os.cpu_count(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "steps": {step.name: {"tool": step.tool, "args": step.args, "minutes": outcome[step.name][0],
                              "this_run": outcome[step.name][1]} for step in steps}})
    print("\n" + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
