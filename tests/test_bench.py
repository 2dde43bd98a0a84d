"""tools.bench runs end to end on a tiny shape and writes a report whose every ratio is a finite positive number, each
family its own rows in the documented order; --only picks families by name."""

import json
import math

import pytest

from shared_modeling.segments import segment_spans
from tools import training
from tools.bench import __main__ as bench
from tools.bench import amoe_arms, common


def expected_rows(report, arms, shipped, long_tokens):
    """{family: its row names, in order} of a run on `report`'s dtypes with collectives of `arms` (the shipped
    collective's size first, when it ships one), the long input `long_tokens` long; the geolip and backends names
    that hold counts of the data take them from the report."""
    dtypes, precision = report["dtypes"], training.resolve_precision("auto", "cpu")
    which = {n: "the shipped collective's size" if n == shipped else "--arms" for n in arms}

    def segments(tokens):  # geolip's segments (18 tokens, a stride of 14, 32 at most) of its texts cut to `tokens`
        return len(segment_spans(min(tokens, report["geolip"]["longest"]), 18, 14, 32))

    return {
        "throughput": [name for dtype in dtypes for name in (
            f"forward {dtype}: captionbert vs BertModel", f"encode {dtype}: captionbert vs HF pipeline",
            f"encode {dtype}: captionbert GFLOP/s vs matmul peak")],
        "long_input": [f"{long_tokens} tokens fp32 peak extra RSS: sdpa vs eager",
                       f"{long_tokens} tokens fp32 forward: sdpa vs eager (speed-up)"],
        "extraction": ["extraction fp32: length-bucketed vs naive batches"],
        "training": [f"training step {precision}: captionbert vs BertModel",
                     f"training step {precision}: captionbert, fused Adam vs per-tensor Adam"],
        "amoe": [*(name for dtype in dtypes for name in (
                     *(f"encode {dtype}: {n} arm(s) on ({which[n]}) vs bare trunk (latency)" for n in arms),
                     f"encode {dtype}: every arm off vs bare trunk (latency)")),
                 f"arithmetic floor of {arms[0]} arm(s): (model + arm FLOPs) / model FLOPs",
                 "fp32 embeddings, every arm off vs bare trunk: equal"],
        "glyph": [f"glyph: llama.cpp GGUF {dtype} vs PyTorch fp32 (throughput)" for dtype in ("f32", "f16")],
        "geolip": [f"geolip base: one batched call vs a call per segment ({report['geolip']['segments']})",
                   *(f"geolip encode fp32: 4 texts of <= {tokens} tokens ({segments(tokens)} segments) vs 1 segment "
                     "(latency)" for tokens in (18, 60, 116, 228, 452))],
        "backends": [*(f"forward: {backend} vs PyTorch eager fp32 (throughput)"
                       for backend in ("onnx fp32", "onnx int8", *(("eager bf16",) if "bf16" in dtypes else ()))),
                     *(f"forward {backend}: {arms[0]} arm(s) on vs bare trunk (latency)"
                       for backend in (*(f"eager {dtype}" for dtype in dtypes), "onnx fp32", "onnx int8",
                                       "compiled fp32")),
                     "ONNX int8 vs PyTorch fp32: mean cosine on the sample (bare trunk, "
                     f"{len(report['backends']['int8']['bare']['float_matmuls'])} MatMuls float)"],
    }


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
    shipped = common.shipped_arm_count()  # 0 when the build ships no collective (as the cpu build of issue 40)
    arms = [n for n in dict.fromkeys((shipped, 3)) if n]  # the shipped collective's size and --arms
    rows = report["rows"]
    dtypes = ["fp32", "bf16"] if training.bf16_native("cpu") else ["fp32"]  # bf16 only where it is not emulated
    assert report["dtypes"] == dtypes and (report["bf16_left_out"] is None) == ("bf16" in dtypes)
    # Every family ran, in FAMILIES' order, and wrote exactly its own rows.
    expected = expected_rows(report, arms, shipped, long_tokens=256)
    assert list(expected) == list(bench.FAMILIES)
    names, start = [row["name"] for row in rows], 0
    for family, family_names in expected.items():
        assert names[start:start + len(family_names)] == family_names, family
        start += len(family_names)
    assert start == len(names)
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
def test_only_runs_the_families_it_names(tmp_path, data_dir):
    argv = ["--captions", "8", "--batch-size", "4", "--repeats", "1", "--long-tokens", "64", "--tiny",
            "--only", "long_input", "--data-dir", str(data_dir), "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    (folder,) = (tmp_path / "bench").iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert [row["name"] for row in report["rows"]] == ["64 tokens fp32 peak extra RSS: sdpa vs eager",
                                                       "64 tokens fp32 forward: sdpa vs eager (speed-up)"]
    assert report["seconds"] == {} and set(report["long_input"]) == {"sdpa", "eager"}


@pytest.mark.parametrize("only", [["nope"], ["6"], ["amoe", "nope"]])
def test_only_refuses_a_name_that_is_not_a_family(only):
    with pytest.raises(SystemExit) as exited:
        bench.parse_config(["--only", *only])
    assert exited.value.code == 2


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
    assert counter.get_total_flops() == amoe_arms.arm_flops_per_token(512, 1) + 2 * 512
