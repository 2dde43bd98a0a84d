"""Greedy forward selection of AMOE arms on a frozen captionbert trunk: which solo arms ship, under one collective.

Usage (the embedded default, as `make demo` runs it, over the finished solo runs of tools/captionbert/amoe/solo.py):
    python -m tools.captionbert.amoe.select --solo runs/demo/amoe/solo --candidates paraphrase equiv sts \\
        --out runs/demo/amoe/select
A finished run (its metrics.json says "complete") is skipped when the same command runs again (another command on
its folder is refused; delete the folder to rerun); a killed run starts over.

Candidates are solo runs named <candidate>-seed0 (the arm) and <candidate>-seed1 (it measures the spread). At arm
count A, every candidate joins the accepted roster under a trained dispatch (tools/captionbert/amoe/arms.py's
train_dispatch, as tools/captionbert/amoe/dispatch.py trains one) and is compared with an untrained control arm in its
place (same A, same training); the best margin over the control is accepted only if it beats the bar = the largest
two-seed spread of the candidates' solo validation means. Never worse by default: the collective ships only if it
also beats the bare trunk on validation by more than the bar. The run writes out/amoe/: every candidate arm (arms/),
each one's solo routing (routing/<arm>), ARMS.json and, when one ships, <collective>/dispatch.safetensors; with none,
attach_amoe() raises naming the solo arms and attach_amoe(["<arm>"]) attaches one alone. It scores trunk, every
roster tried, collective and control on STS-8 and the Flickr8k gauge (a diagnostic: validation gain against STS-8
gain and their rank correlation), and sweeps the dispatch tau (.10/.05/.02) on STS-B.

Validation (tools/captionbert/amoe/pairs.py: STS-B dev, MRPC test, SNLI test, Flickr8k dev same-image retrieval; no
held-out text) makes every decision, never STS-8: one mean over the same two sets for every roster (STS-B dev and
Flickr8k dev, pairs.SELECTION_SETS), so an arm that trains on STS-B or Flickr8k (sts, caption) is not a candidate and
no arm is judged on its own source. No training row holds a held-out or validation text.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import spearmanr

from shared_modeling.amoe import TAU, Dispatch, load_arm, load_dispatch, save_arm, save_dispatch
from tools import runs, sts
from tools.captionbert.amoe import arms, pairs
from tools.captionbert.amoe.harness import load_trunk, sts8_score, validation_score


@dataclass
class SelectConfig(arms.Common):
    solo: Path = Path("runs/demo/amoe/solo")  # folder of solo runs named <candidate>-seed0 / -seed1
    candidates: list[str] = field(default_factory=lambda: list(pairs.TRAINING_SETS))  # solo arms to select among
    collective: str = "collective"  # name of the shipped dispatch folder
    steps: int = 60  # dispatch training steps at each comparison
    batch_size: int = 32  # rows per dispatch step
    learning_rate: float = 5e-3  # routing keys only
    alarm_every: int = 10  # steps between starvation checks
    tau_sweep: list[float] = field(default_factory=lambda: [0.05, 0.02])  # retrain the shipped dispatch at these


@dataclass
class Candidate:
    """A candidate arm of the selection: its seed-0 solo run (the arm that ships) and the seed-1 run beside it."""
    seed0: arms.SoloRun  # the arm, its solo routing key (the one collectives start from), config and scores
    seed1: arms.SoloRun  # the same recipe at seed 1: it measures the spread
    data: pairs.PairSet  # its training stream

    @property
    def spread(self):
        """Its two-seed spread of the solo validation mean."""
        return abs(pairs.validation_mean(self.seed0.metrics["validation"], set())
                   - pairs.validation_mean(self.seed1.metrics["validation"], set()))


@dataclass
class Trial:
    """One roster under a freshly trained dispatch: its validation scores (per set, and "mean" over the selection
    sets, the same for every roster), its STS-8 (a diagnostic the decisions never read), the dispatch and its training
    record."""
    roster: list
    validation: dict
    sts8: dict
    dispatch: Dispatch
    record: dict


@dataclass
class Step:
    """One arm count of the greedy selection: the control and every remaining candidate beside the accepted roster."""
    arm_count: int
    roster_before: list  # the arms accepted before this step
    control: Trial  # the untrained control arm in the candidate's place
    trials: dict  # {candidate: its Trial}
    margins: dict  # {candidate: its roster's validation mean minus the control's}
    best: str  # the candidate of the largest margin
    verdict: str  # "accepted" (its margin beats the bar) or "rejected" (the search ends)

    @property
    def margin(self):
        return self.margins[self.best]


def read_candidates(config, model, trunk_id):
    """{name: Candidate} of config.candidates, from the finished solo runs in config.solo; refuses a run that did not
    score STS-8 and an arm that trains on a selection set's source, before anything trains."""
    members = {}
    for name in config.candidates:
        seed0, seed1 = [arms.read_solo_run(config.solo / f"{name}-seed{seed}", model, trunk_id) for seed in (0, 1)]
        if seed0.name != name:
            raise SystemExit(f"{config.solo / f'{name}-seed0'} trained arm {seed0.name!r}, not {name!r}")
        if any("sts8" not in run.metrics for run in (seed0, seed1)):
            raise SystemExit(f"{name}: every solo run of a candidate scores STS-8 (the validation-against-test "
                             "diagnostic); a run made with --no-sts8 cannot be selected")
        members[name] = Candidate(seed0, seed1, seed0.data(config.data_dir))
    own = [f"{name} ({member.data.labelled_source})" for name, member in members.items()
           if pairs.judged_on_own_source(member.data.labelled_source)]
    if own:
        raise SystemExit(f"{', '.join(own)}: trains on the source of a selection set "
                         f"({', '.join(pairs.SELECTION_SETS)}), so it would be judged on its own source; leave it "
                         "out of --candidates (it still trains and scores as a solo arm)")
    return members


class Rosters:
    """Rosters of the candidates on the trunk, each under a freshly trained dispatch; the untrained control arm
    (exactly inert) stands in for a candidate. trunk: the bare trunk's {"validation", "sts8"}."""

    def __init__(self, model, members, validation, trunk, config):
        self.model, self.members, self.validation, self.trunk = model, members, validation, trunk
        self.config = config
        self.control_arm = arms.fresh_arm(model, config.seed + 1000)

    def arms_of(self, roster):
        return {name: (self.control_arm if name == arms.CONTROL else self.members[name].seed0.arm) for name in roster}

    def train(self, roster, tau=TAU):
        """(dispatch, training record) of `roster` under a freshly trained dispatch."""
        streams = {name: self.members[name].data for name in roster if name != arms.CONTROL}
        dispatch = arms.build_collective(self.model, {name: m.seed0.routing for name, m in self.members.items()},
                                         roster, self.config.seed, tau)
        if roster == [arms.CONTROL]:  # an inert arm alone: nothing to route, the trunk itself
            return dispatch, {"roster": roster, "steps_run": 0, "alarms": [], "stopped": None, "final_routing": None}
        if len(roster) == 1 and tau == TAU:  # a solo arm keeps its solo routing key (trained at TAU)
            budget = self.members[roster[0]].seed0.metrics["history"][-1]["amplitude_budget"]
            return dispatch, {"roster": roster, "steps_run": 0, "alarms": [], "stopped": None,
                              "final_routing": {"amplitude_budget": budget}}
        return dispatch, arms.train_dispatch(self.model, self.arms_of(roster), streams, dispatch, self.config)

    def evaluate(self, roster):
        """The Trial of `roster`: trained, then scored on validation and (the diagnostic) STS-8."""
        dispatch, record = self.train(roster)
        if roster == [arms.CONTROL]:
            return Trial(roster, self.trunk["validation"], self.trunk["sts8"], dispatch, record)
        with arms.attached(self.model, self.arms_of(roster), dispatch):
            scores = validation_score(self.model, self.validation, set())
            diagnostic = sts8_score(self.model, self.config)
        return Trial(roster, scores, diagnostic, dispatch, record)


def greedy_selection(candidates, evaluate_roster, bar):
    """Greedy forward selection (ACCEPTED, STEPS). At arm count A every remaining candidate joins the accepted
    roster, and so does the untrained control in its place; evaluate_roster(roster) -> a Trial. A candidate's margin
    is its roster's validation mean (pairs.validation_mean, over the selection sets) minus the control's. The best
    margin is accepted only if it beats `bar`; the first step where none does ends the search (it is recorded too).
    No candidate may train on a selection set's source (select refuses it before anything trains)."""
    accepted, steps, remaining = [], [], list(candidates)
    while remaining:
        control = evaluate_roster(accepted + [arms.CONTROL])
        trials = {name: evaluate_roster(accepted + [name]) for name in remaining}
        baseline = pairs.validation_mean(control.validation, set())
        margins = {name: pairs.validation_mean(trial.validation, set()) - baseline for name, trial in trials.items()}
        best = max(margins, key=margins.get)
        step = Step(len(accepted) + 1, list(accepted), control, trials, margins, best,
                    "accepted" if margins[best] > bar else "rejected")
        steps.append(step)
        print(f"A={step.arm_count}: best {best} (margin over the control {step.margin:+.4f}, bar {bar:.4f}): "
              f"{step.verdict}")
        if step.verdict == "rejected":
            break
        accepted.append(best)
        remaining.remove(best)
    return accepted, steps


def never_worse(trunk_validation, collective_validation, bar):
    """Never worse by default: a collective ships only if its validation mean beats the bare trunk's by more than the
    bar (the control comparisons alone do not promise that)."""
    collective, trunk = (pairs.validation_mean(scores, set()) for scores in (collective_validation, trunk_validation))
    return {"collective": collective, "trunk": trunk, "gain": collective - trunk, "bar": bar,
            "passed": collective - trunk > bar}


def brief(record):
    """The parts of a dispatch training record that metrics.json's steps, ARMS.json and the card show."""
    routing = record.get("final_routing") or {}
    return {"steps_run": record["steps_run"], "alarms": len(record["alarms"]), "stopped": record["stopped"],
            "amplitude_budget": routing.get("amplitude_budget"), "routing_spread": routing.get("routing_spread"),
            "shares": routing.get("shares")}


def step_records(steps, bar):
    """metrics.json's "steps": every comparison of the selection, by arm count."""
    return [{"arm_count": step.arm_count, "roster_before": step.roster_before, "bar": bar,
             "control": {"validation": step.control.validation, "sts8": step.control.sts8,
                         **brief(step.control.record)},
             "candidates": {name: {"validation": trial.validation, "sts8": trial.sts8,
                                   "margin_over_control": step.margins[name], **brief(trial.record)}
                            for name, trial in step.trials.items()},
             "best": step.best, "margin_over_control": step.margin, "verdict": step.verdict}
            for step in steps]


def validation_against_sts8(members, trunk, steps):
    """Does validation predict the test? Per solo run (candidate and seed) and per roster the selection tried: its
    validation gain over the trunk (the selection mean) against its STS-8 gain, and the Spearman rank correlation of
    the two across the solo runs. A diagnostic: the decisions never read STS-8."""
    def gain(validation, sts8):
        return {"validation_gain": pairs.validation_mean(validation, set())
                - pairs.validation_mean(trunk["validation"], set()), "sts8_gain": sts8["mean"] - trunk["sts8"]["mean"]}

    solo = [{"candidate": name, "seed": seed, **gain(run.metrics["validation"], run.metrics["sts8"])}
            for name, member in members.items() for seed, run in enumerate((member.seed0, member.seed1))]
    rosters = [{"roster": step.roster_before + [name], **gain(trial.validation, trial.sts8)}
               for step in steps for name, trial in step.trials.items()]
    correlation = None
    if len(solo) > 2:
        correlation = float(spearmanr([row["validation_gain"] for row in solo],
                                      [row["sts8_gain"] for row in solo]).statistic)
    return {"solo": solo, "rosters": rosters, "spearman_solo": correlation}


def write_arms_json(library, members, steps, bar, shipped, trunk_id, config):
    """amoe/arms/ARMS.json: one entry per arm (provenance, training spec, solo scores, verdict, file and hash);
    shipped is None when no collective ships."""
    commit, dirty = runs.git_revision()
    verdicts = {}
    for step in steps:
        for name, trial in step.trials.items():
            verdicts.setdefault(name, []).append(
                {"arm_count": step.arm_count, "validation_mean": trial.validation["mean"],
                 "margin_over_control": step.margins[name], "bar": bar,
                 "verdict": step.verdict if name == step.best else "not best"})
    roster = shipped["roster"] if shipped else []
    entries = {}
    for name, member in members.items():
        arm = member.seed0.arm
        arm_metadata = load_arm(library / "arms" / f"{name}.safetensors", arm.blocks[0].slots.in_features,
                                len(arm.blocks), trunk_id, name=name)[1]
        entries[name] = {
            "file": f"arms/{name}.safetensors", "routing": f"routing/{name}.safetensors",
            "content_hash": arm_metadata["content_hash"], "trunk_hash": trunk_id, "data": member.data.summary(),
            "seeds": {"arm": 0, "spread": 1}, "git_commit": commit, "git_dirty": dirty,
            "solo_runs": [str(config.solo / f"{name}-seed{seed}") for seed in (0, 1)],
            "training": arms.training_spec(member.seed0.config),
            "solo_sts8": member.seed0.metrics["sts8"], "solo_validation": member.seed0.metrics["validation"],
            "seed_spread_validation": member.spread, "selection": verdicts.get(name, []),
            "in_collective": name in roster}
    payload = {"trunk_hash": trunk_id, "collective": shipped["collective"] if shipped else None,
               "roster": roster or None,
               "selection_metric": ("margin over the untrained control of the validation mean over "
                                    f"{' and '.join(pairs.SELECTION_SETS)} (tools/captionbert/amoe/pairs.py), "
                                    "whose sources no candidate trains on; never STS-8"),
               "arms": entries}
    runs.write_json(library / "arms" / "ARMS.json", payload)
    return library / "arms" / "ARMS.json"


def ship(config, rosters, final, accepted, trunk_id):
    """The collective that passed: its dispatch written to amoe/<collective>/, scored on STS-8 from the files just
    written, and the dispatch tau swept on STS-B: (its STS-8, the sweep)."""
    library, model = config.out / "amoe", rosters.model
    save_dispatch(library / config.collective / "dispatch.safetensors", final.dispatch, trunk_id)
    print(f"scoring the shipped collective {accepted} and its control on STS-8")
    # Scored from the files just written (format, content and trunk hashes checked on load), through the library
    # rather than the trunk folder's attach_amoe: a trunk folder may carry older remote code.
    # tools/captionbert/export.py checks attach_amoe() on the Hub folder.
    dispatch, _ = load_dispatch(library / config.collective / "dispatch.safetensors", *arms.shape(model), trunk_id)
    shipped_arms = {name: load_arm(library / "arms" / f"{name}.safetensors", *arms.shape(model), trunk_id,
                                   name=name)[0] for name in dispatch.roster}
    with arms.attached(model, shipped_arms, dispatch):
        collective_sts8 = sts8_score(model, config)
    sweep = []
    for tau in [TAU, *config.tau_sweep]:
        print(f"tau sweep: {tau}")
        dispatch, record = (final.dispatch, final.record) if tau == TAU else rosters.train(accepted, tau)
        with arms.attached(model, rosters.arms_of(accepted), dispatch):
            stsb = sts.score(model, {"STS-B": sts.load_task(config.data_dir, "STS-B")}, [])["STS-B"]
        sweep.append({"tau": tau, "STS-B": stsb, "amplitude_budget": brief(record)["amplitude_budget"]})
    return collective_sts8, sweep


def select(config):
    model, trunk_id = load_trunk(config)
    validation = pairs.validation_sets(config.data_dir, config.validation_rows)
    members = read_candidates(config, model, trunk_id)
    bar = max(member.spread for member in members.values())
    print(f"bar (largest two-seed spread of the solo validation means): {bar:.4f}")
    print("scoring the bare trunk")
    trunk = {"validation": validation_score(model, validation, set()), "sts8": sts8_score(model, config)}
    rosters = Rosters(model, members, validation, trunk, config)
    accepted, steps = greedy_selection(config.candidates, rosters.evaluate, bar)
    solo_rows = {f"solo {name}": member.seed0.metrics["sts8"] for name, member in members.items()}
    record = {"status": "complete", "trunk_hash": trunk_id, "bar": bar, "steps": step_records(steps, bar),
              "trunk_validation": trunk["validation"],
              "validation_against_sts8": validation_against_sts8(members, trunk, steps), "tau_sweep": []}
    final = steps[len(accepted) - 1].trials[accepted[-1]] if accepted else None
    trunk_check = None if final is None else never_worse(trunk["validation"], final.validation, bar)
    record["trunk_check"] = trunk_check
    library = config.out / "amoe"
    for name, member in members.items():  # the solo arms ship whether or not a collective does
        save_arm(library / "arms" / f"{name}.safetensors", member.seed0.arm, name, trunk_id,
                 {"data": member.data.summary(), "seed": 0})
        save_dispatch(library / "routing" / f"{name}.safetensors", member.seed0.routing, trunk_id)
    if not (trunk_check and trunk_check["passed"]):  # a measured outcome, not a failure: the card says why
        reason = ("no arm beat the untrained control by more than the bar" if final is None else
                  f"the collective {accepted} beats the bare trunk on validation by {trunk_check['gain']:+.4f}, "
                  f"not more than the bar {bar:.4f}")
        print(f"{reason}: no collective ships")
        write_arms_json(library, members, steps, bar, None, trunk_id, config)
        return record | {"shipped": None, "reason": reason, "rows": {"trunk": trunk["sts8"], **solo_rows}}
    collective_sts8, sweep = ship(config, rosters, final, accepted, trunk_id)
    control = steps[len(accepted) - 1].control
    shipped = {"collective": config.collective, "roster": accepted, **brief(final.record)}
    arms_json = write_arms_json(library, members, steps, bar, shipped, trunk_id, config)
    return record | {"shipped": shipped, "tau_sweep": sweep, "arms_json": str(arms_json),
                     "rows": {"trunk": trunk["sts8"], **solo_rows, "collective": collective_sts8,
                              f"control ({'+'.join(control.roster)})": control.sts8}}


def main(argv=None):
    config = arms.parse_config(SelectConfig, argv, __doc__)
    return arms.run_once(config, "captionbert.amoe.select", select)


if __name__ == "__main__":
    sys.exit(main())
