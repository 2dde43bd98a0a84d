"""AMOE arms: captionbert.encode with a collective attached through attach_amoe (random arms with non-zero outputs,
written as arm files; speed does not depend on the weights) vs the bare trunk, fp32 and bf16 (where measured), at two
sizes: the shipped collective's (its roster in captionbert-8192-v2/amoe/arms/ARMS.json; target <= 1.15x the bare
latency; none when the folder ships no collective) and `--arms` (3, the published collective's size; reported). With
every arm off (amoe_off) the embeddings must equal the bare trunk's bit for bit (target: equal), and its latency is
reported beside. Also reported: the arithmetic floor of the first size, (model FLOPs of throughput's GFLOP/s row +
the arms' FLOPs counted from the spec) / model FLOPs, the latency ratio a kernel running the arms at the trunk's FLOP
rate would reach.
"""

import contextlib
import copy
import statistics

import numpy as np

from shared_modeling.amoe import ATOMS, GROUP_WIDTH, HEAD_WIDTH, KEY_WIDTH, SLOTS
from tools.bench.common import in_dtype, race, row, shipped_arm_count, with_random_collectives


def arm_flops_per_token(hidden, arms):
    """Multiply-adds x 2 that `arms` enabled arms and their dispatch add per token at one block, counted from the
    spec's maths (amoe.md), not from any implementation: the dispatch's key projection and routing (A keys, each
    with a sinh and a cosh), and per arm the slot projection, the address of each slot group over 2K exponentials
    and back, W_in and W_out."""
    dispatch = KEY_WIDTH * hidden + 2 * arms * (KEY_WIDTH + 1) + 2 * arms * (arms + 1)
    address = SLOTS // GROUP_WIDTH * 2 * (2 * ATOMS * (GROUP_WIDTH + 1))
    arm = SLOTS * hidden + address + SLOTS * HEAD_WIDTH + HEAD_WIDTH * hidden
    return 2 * (dispatch + arms * arm)


def measure(config, setup):
    """(rows, report part). The rows, in each dtype: captionbert.encode latency with each collective's arms on (the
    shipped collective's size and --arms) and with every arm off vs the bare trunk (a copy of setup's captionbert);
    then the first size's arithmetic floor and whether every-arm-off embeddings equal the bare trunk's. The part: the
    sizes and the equality checks under amoe, the latencies under seconds/<dtype>/amoe."""
    texts, size = setup.texts, config.batch_size
    bare_trunk = copy.deepcopy(setup.captionbert)
    shipped = shipped_arm_count()
    sizes = [arms for arms in dict.fromkeys((shipped, config.arms)) if arms]
    attached = with_random_collectives(bare_trunk, sizes, config.seed)

    def encoder(model, arms_off=False):
        def run():
            with model.amoe_off() if arms_off else contextlib.nullcontext():
                model.encode(texts, batch_size=size, show_progress_bar=False)
        return run

    outputs = {"bare": bare_trunk.encode(texts, batch_size=size, show_progress_bar=False),
               **{arms: model.encode(texts, batch_size=size, show_progress_bar=False)
                  for arms, model in attached.items()}}
    with attached[sizes[0]].amoe_off():
        outputs["off"] = attached[sizes[0]].encode(texts, batch_size=size, show_progress_bar=False)
    amoe = {"shipped_arms": shipped, "arms": list(attached),
            "off_equals_bare": bool(np.array_equal(outputs["off"], outputs["bare"])),
            "on_differs_from_bare": all(not np.array_equal(outputs[arms], outputs["bare"]) for arms in attached)}
    rows, seconds = [], {}
    for dtype in setup.dtypes:
        latency = race({**{f"{arms} arms on": in_dtype(encoder(model), dtype) for arms, model in attached.items()},
                        "arms off": in_dtype(encoder(attached[sizes[0]], arms_off=True), dtype),
                        "bare": in_dtype(encoder(bare_trunk), dtype)}, config.repeats, f"AMOE encode {dtype}")
        seconds[dtype] = {"amoe": latency}
        bare = statistics.median(latency["bare"])
        for arms in attached:
            ours = statistics.median(latency[f"{arms} arms on"])
            which = "the shipped collective's size" if arms == shipped else "--arms"
            rows.append(row(f"encode {dtype}: {arms} arm(s) on ({which}) vs bare trunk (latency)", "s",
                            ours, bare, ours / bare, ("<=", 1.15) if arms == shipped else None))
        ours = statistics.median(latency["arms off"])
        rows.append(row(f"encode {dtype}: every arm off vs bare trunk (latency)", "s", ours, bare, ours / bare))
    flops = setup.flops
    arm_flops = (arm_flops_per_token(setup.shape["hidden_size"], sizes[0]) * sum(setup.lengths)
                 * setup.shape["num_hidden_layers"])
    rows.append(row(f"arithmetic floor of {sizes[0]} arm(s): (model + arm FLOPs) / model FLOPs", "GFLOP",
                    (flops + arm_flops) / 1e9, flops / 1e9, (flops + arm_flops) / flops))
    equal = float(amoe["off_equals_bare"])
    rows.append(row("fp32 embeddings, every arm off vs bare trunk: equal", "bool", equal, 1.0, equal, (">=", 1.0)))
    return rows, {"amoe": amoe, "seconds": seconds}
