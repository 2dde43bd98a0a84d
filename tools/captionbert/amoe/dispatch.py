"""Train a dispatch over AMOE arms on a frozen captionbert trunk: only the routing keys of a roster train (arms frozen).

Usage (a roster of finished solo runs, tools/captionbert/amoe/solo.py, and the untrained control):
    python -m tools.captionbert.amoe.dispatch --arm runs/demo/amoe/solo/equiv-seed0 --arm control --out runs/x/d
A finished run (its metrics.json says "complete") is skipped when the same command runs again (another command on
its folder is refused; delete the folder to retrain); a killed run starts over.

Each step draws one arm's stream (its own training data) by sampling weight. `control` in the roster is an untrained
arm (exactly inert; it only takes a share of the normaliser z). Every alarm_every steps the starvation alarm looks at
the usage shares p of argmax_k |w_k| over the tokens of every block: exp(H(p)) < 1.5 or min p < 0.02 doubles the
starved arm's stream weight; 3 alarms in a row stop the run. It logs the alarms, the routing spread (per token, the
share of blocks that route it away from its most common arm) and the amplitude budget (mean sum |w/z|). Rows of arms
with a solo run start from their solo routing keys. The roster is scored on the validation suite (and with --sts8 on
STS-8 and the Flickr8k gauge: the levers' collective row, tools/captionbert/amoe/levers.py). Writes amoe/arms/ (the
roster's arms) and amoe/<collective>/dispatch.safetensors, so attach_amoe(path=<out>/amoe) loads it.
"""

import sys
import time
from dataclasses import dataclass, field


from shared_modeling.amoe import TAU, save_arm, save_dispatch
from tools.captionbert.amoe import arms, pairs
from tools.captionbert.amoe.harness import load_trunk, sts8_score, validation_score


@dataclass
class DispatchConfig(arms.Common):
    arms: list[str] = field(default_factory=list, metadata={
        "aliases": ["--arm"], "action": "extend", "required": True,
        "help": "a solo run folder or 'control' (repeat; the order is the roster)"})
    collective: str = "collective"  # the dispatch's folder name under amoe/
    steps: int = 60  # optimiser steps
    batch_size: int = 32  # rows per step, of the stream drawn
    learning_rate: float = 5e-3  # routing keys only
    tau: float = TAU  # dispatch temperature
    alarm_every: int = 10  # steps between starvation checks
    sts8: bool = False  # also score the roster on STS-8 and the Flickr8k gauge (the levers' collective row)


def run_dispatch(config):
    model, trunk_id = load_trunk(config)
    solo_routing, roster_arms, streams = {}, {}, {}
    roster = []
    for entry in config.arms:
        if entry == arms.CONTROL:
            roster_arms[arms.CONTROL] = arms.fresh_arm(model, config.seed)
            roster.append(arms.CONTROL)
            continue
        solo = arms.read_solo_run(entry, model, trunk_id)
        solo_routing[solo.name] = solo.routing
        roster_arms[solo.name], streams[solo.name] = solo.arm, solo.data(config.data_dir)
        roster.append(solo.name)
    if not streams:
        raise SystemExit("a dispatch needs at least one trained arm (a solo run folder) to draw data from")
    dispatch = arms.build_collective(model, solo_routing, roster, config.seed, config.tau)
    started = time.perf_counter()
    record = arms.train_dispatch(model, roster_arms, streams, dispatch, config)
    record["training_minutes"] = round((time.perf_counter() - started) / 60, 2)
    with arms.attached(model, roster_arms, dispatch):
        validation = pairs.validation_sets(config.data_dir, config.validation_rows)
        record["validation"] = validation_score(model, validation,
                                                {stream.labelled_source for stream in streams.values()})
        if config.sts8:
            record["sts8"] = sts8_score(model, config)
    for name, arm in roster_arms.items():
        save_arm(config.out / "amoe" / "arms" / f"{name}.safetensors", arm, name, trunk_id, {})
    save_dispatch(config.out / "amoe" / config.collective / "dispatch.safetensors", dispatch, trunk_id)
    return {"status": "complete", "trunk_hash": trunk_id, **record}


def main(argv=None):
    config = arms.parse_config(DispatchConfig, argv, __doc__)
    return arms.run_once(config, "captionbert.amoe.dispatch", run_dispatch)


if __name__ == "__main__":
    sys.exit(main())
