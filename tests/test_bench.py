"""tools.bench runs end to end on a tiny shape and writes a report whose every ratio is a finite positive number."""

import json
import math

import pytest

from tools import bench, training


@pytest.mark.slow
def test_bench_tiny_run_writes_finite_positive_ratios(tmp_path, data_dir):
    argv = ["--captions", "16", "--batch-size", "8", "--repeats", "1", "--long-tokens", "256", "--peak-size", "256",
            "--corpus-texts", "32", "--train-steps", "1", "--tiny", "--glyph-texts", "24", "--geolip-texts", "4",
            "--data-dir", str(data_dir), "--out", str(tmp_path)]
    assert bench.main(argv) == 0

    (folder,) = (tmp_path / "bench").iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert json.loads((folder / "config.json").read_text())["tiny"] is True
    assert report["bert_attn_implementation"] == "sdpa"
    assert report["captions"]["count"] == 16
    shipped = bench.shipped_arm_count()  # 0 when the build ships no collective (as the cpu build of issue 40)
    arms = [n for n in dict.fromkeys((shipped, 3)) if n]  # the shipped collective's size and --arms
    rows = report["rows"]
    dtypes = ["fp32", "bf16"] if training.bf16_native("cpu") else ["fp32"]  # bf16 only where it is not emulated
    assert report["dtypes"] == dtypes and (report["bf16_left_out"] is None) == ("bf16" in dtypes)
    # (1)-(2): 3 per dtype, (3)-(5b): 7; (6): per dtype each size and all off; the floor; off == bare. (8): base
    # calls, then 5 text lengths. (9): ONNX fp32, int8 (and bf16) vs eager fp32; arms on vs off per eager dtype, in
    # ONNX fp32 and int8 and compiled; int8's lowest cosine
    assert len(rows) == 3 * len(dtypes) + 7 + len(dtypes) * (len(arms) + 1) + 2 + 1 + 5 + (
        len(dtypes) + 1 + len(dtypes) + 3 + 1)
    assert report["geolip"]["texts"] == 4 and report["geolip"]["segments"] > 4
    for row in rows:
        for key in ("ours", "reference", "ratio"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["name"], key, row[key])
        assert row["met"] in ((None,) if row["target"] is None else (True, False)), row
    # Every throughput comparison was timed once per contender (after a warm-up), in both dtypes.
    for dtype in dtypes:
        for times in report["seconds"][dtype].values():
            assert all(len(seconds) == 1 for seconds in times.values())
    for stage in ("extraction", "training"):
        assert all(len(seconds) == 1 for seconds in report["seconds"][stage].values())
    assert set(report["seconds"]["training"]) == {"captionbert", "bert", "captionbert per-tensor Adam"}
    assert report["corpus_sample"]["count"] == 32
    assert report["amoe"] == {"shipped_arms": shipped, "arms": arms, "off_equals_bare": True,
                              "on_differs_from_bare": True}
    assert set(report["seconds"]["glyph"]) == {"pytorch fp32", "gguf f32", "gguf f16"}
    assert report["backends"]["arms"] == arms[0] and set(report["seconds"]["backends"]) == {
        *(f"eager {dtype} {kind}" for dtype in dtypes for kind in ("bare", "arms")),
        *(f"onnx {precision} {kind}" for precision in ("fp32", "int8") for kind in ("bare", "arms")),
        "compiled fp32 arms"}


@pytest.mark.slow
def test_only_runs_the_measurements_it_names(tmp_path, data_dir):
    argv = ["--captions", "8", "--batch-size", "4", "--repeats", "1", "--long-tokens", "64", "--tiny", "--only", "3",
            "--data-dir", str(data_dir), "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (folder,) = (tmp_path / "bench").iterdir()
    names = [row["name"] for row in json.loads((folder / "report.json").read_text())["rows"]]
    assert names and all(name.startswith("(3)") for name in names)
    with pytest.raises(SystemExit):
        bench.parse_config(["--only", "10"])


def test_arm_flop_count_matches_the_counted_matmuls_of_one_arm():
    """arm_flops_per_token (from the spec) against torch's FLOP counter on one token through one wrapped block: with a
    single arm the block-diagonal matmuls waste nothing, and the only extra is the folded output bias (one row of
    the output matmul, 2 x 512)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from shared_modeling.amoe import AmoeLayer, Arm, ArmSwitch, Dispatch

    arm, dispatch = {"a": Arm(512, 1)}, Dispatch(["a"], 512, 1)
    layer = AmoeLayer(torch.nn.Identity(), 0, arm, dispatch, ArmSwitch(["a"]))
    with torch.no_grad():
        layer.derived_weights(("a",))  # kept from now on, so the count below is the per-token work alone
        with FlopCounterMode(display=False) as counter:
            layer(torch.randn(1, 512))
    assert counter.get_total_flops() == bench.arm_flops_per_token(512, 1) + 2 * 512
