"""geolip-clip-ctx576 at the cpu preset's shape (all-MiniLM-L6-v2 base, random memory weights), fp32, on a seeded
sample of --geolip-texts long ImageInWords descriptions:
  (a) every segment of the sample through the frozen base in ONE batched call (GeolipModel.segments) vs one base
      call per segment. Target >= 3x.
  (b) encode latency of the sample cut to 18 .. 452 tokens (1 .. 32 segments), against one segment. Reported.
"""

import random
import statistics
from pathlib import Path

from shared_modeling.segments import segment_spans
from tools import corpus
from tools.bench.common import in_dtype, race, row
from tools.geolip import data as geolip_data

def measure(config, setup):
    """(rows, report part); setup is not used: the geolip model is its own. The rows: geolip's base on every segment
    of a seeded sample of long descriptions in one batched call vs a call per segment, then its encode latency on the
    sample cut to 1 .. 32 segments vs one segment (fewer where the longest text is shorter); the part: the seconds
    under seconds/geolip and the sample's size (texts, segments, tokens, the longest's tokens) under geolip."""
    geolip = geolip_data.build_model(geolip_data.Config(out=Path("-"), **geolip_data.PRESETS["cpu"]),
                                     teacher_dim=768)
    cut = (geolip.config.segment_size, geolip.config.segment_stride, geolip.config.max_segments)
    long_texts = random.Random(config.seed).sample(corpus.build(config.data_dir, ["imageinwords"])[0],
                                                   config.geolip_texts)
    content = geolip.content_ids(long_texts)
    pieces = [ids[start:end] for ids in content for start, end in segment_spans(len(ids), *cut)]
    base_calls = race({"one batched call": in_dtype(lambda: geolip.segments(content), "fp32"),
                       "a call per segment": in_dtype(lambda: [geolip.segments([piece]) for piece in pieces],
                                                      "fp32")}, config.repeats, "geolip base calls")
    ours, theirs = statistics.median(base_calls["one batched call"]), statistics.median(
        base_calls["a call per segment"])
    rows = [row(f"geolip base: one batched call vs a call per segment ({len(pieces)})", "segments/s",
                len(pieces) / ours, len(pieces) / theirs, theirs / ours, (">=", 3.0))]
    lengths = [cut[0] + (segments - 1) * cut[1] for segments in (1, 4, 8, 16, 32)]  # 18 .. 452 tokens
    by_length = {n: [ids[:n] for ids in content] for n in lengths}
    latency = race({n: in_dtype(lambda ids=ids: geolip.embed(ids), "fp32")
                    for n, ids in by_length.items()}, config.repeats, "geolip encode vs length")
    one_segment = statistics.median(latency[lengths[0]])
    for n, ids in by_length.items():
        segments = len(segment_spans(max(map(len, ids)), *cut))
        rows.append(row(f"geolip encode fp32: {len(ids)} texts of <= {n} tokens ({segments} segments) vs 1 "
                        "segment (latency)", "s", statistics.median(latency[n]), one_segment,
                        statistics.median(latency[n]) / one_segment))
    return rows, {"seconds": {"geolip": {"base_calls": base_calls, "encode": {str(n): t for n, t in latency.items()}}},
                  "geolip": {"texts": len(long_texts), "segments": len(pieces), "tokens": sum(map(len, content)),
                             "longest": max(map(len, content))}}
