"""Score a trained geolip-clip-ctx576 folder against its baselines on the held-out long texts of its run.

Usage:
    python -m tools.geolip.evaluate --train runs/demo/geolip/train --out runs/demo/geolip/eval

The held-out texts, the spliced-tails groups, the teacher embeddings (the run's cache) and the sample the maps are
fitted on are the training run's own (tools/geolip/train.py, rebuilt from its config.json). The model is loaded from
final/ the way users load it (AutoModel, trust_remote_code). Rows (tools/geolip/metrics.ROWS):
  memory         the model's embedding through its trained teacher projector;
  memory_linear  the same embeddings through a ridge least-squares linear map fitted on every training text, in place
                 of the projector: the memory read the way window_linear reads the window;
  window         the frozen base on the text's own window (base_window tokens, CLIP's 77): the floor;
  window_linear  the same embeddings through a ridge least-squares linear map fitted on every training text
                 (not Procrustes): what a linear head on the window alone gives, with no memory;
  first_segment  the frozen base on the text's first segment only;
  segment_mean   the mean of the base's own embeddings of all the text's segments (the same segments, no memory);
  blend          w x the window row + (1 - w) x the segment_mean row, both L2-normalised, with the weight w (of
                 21, 0 to 1) whose Procrustes map brings the training sample closest to the teacher (mean cosine):
                 the best fixed blend, fitted on training texts only (metrics.json: blend_weight);
  whole          the frozen base reading as much of the text as it natively can (all-MiniLM-L6-v2: 256 tokens), a
                 ceiling that a CLIP base does not have (the row is absent then);
  teacher        the teacher's own embeddings, already in its space (the reference: 1 by construction);
each other row but the memory and the two linear rows mapped into the teacher's space by its own orthogonal Procrustes
map, fitted on the same training sample as the projector's initialisation. Measures, every held-out text querying the
whole gallery of held-out teacher embeddings by cosine: top-1 accuracy (m_acc), recall@5, mean reciprocal rank, and
the mean cosine to the text's own teacher embedding; and spliced-tails top-1: each spliced text retrieving its own
teacher embedding among its group's k (texts that share their first base_window tokens; the window row scores 1 / k).
The out folder gets metrics.json (rows, gallery size, spliced groups, the windows, the texts' token lengths and
segment counts, the weights' sha256) and the run record.
"""

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel

from shared_modeling.segments import covered_tokens, segment_spans
from tools import encoders, runs
from tools.geolip.data import cached_teacher_embeddings, spliced_tails, split_texts, teacher_cache, training_config
from tools.geolip.metrics import (blend, fit_blend_weight, procrustes_maps, retrieval, row_embeddings, ridge_map,
                                  spliced_top1, teacher_space, whole_window)


@dataclass
class Config:
    train: Path = field(metadata={"help": "tools/geolip/train.py run folder (config.json, teacher cache, final/)"})
    out: Path = field(metadata={"help": "run folder"})


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    for path in (config.train / "config.json", config.train / "metrics.json"):  # metrics.json: final/ is written
        if not path.exists():
            raise SystemExit(f"{path} not found: train with tools/geolip/train.py first")
    return config


def main(argv=None):
    config = parse_config(argv)
    trained = dataclasses.replace(training_config(config.train), out=config.train)
    training, validation = split_texts(trained)
    final = config.train / "final"
    model = AutoModel.from_pretrained(final, trust_remote_code=True).eval()
    k = trained.splice_k
    splice, skipped = spliced_tails(model.tokenizer, validation, trained.base_window, k, trained.splice_groups,
                                    trained.seed)
    targets = cached_teacher_embeddings(trained, training + validation + splice)
    if targets is None:
        raise SystemExit(f"{teacher_cache(trained, [])[0]} does not hold the teacher embeddings of "
                         f"{config.train}'s texts")
    train_targets, validation_targets, splice_targets = torch.from_numpy(targets).split(
        [len(training), len(validation), len(splice)])

    with runs.RunRecord(config.out, config, "geolip.evaluate") as record:
        whole = whole_window(trained, model.config.base)
        sample = list(range(min(trained.init_texts, len(training))))
        fitted = row_embeddings(model, [training[i] for i in sample], trained.batch_size, whole)
        weight, _ = fit_blend_weight(fitted, train_targets[sample])  # on training texts, as every map
        fitted["blend"] = blend(fitted["window"], fitted["segment_mean"], weight)
        maps = procrustes_maps(fitted, train_targets[sample])
        every = row_embeddings(model, training, trained.batch_size)
        maps["window_linear"], maps["memory_linear"] = (ridge_map(every[name], train_targets)
                                                        for name in ("window", "memory"))
        queries = teacher_space(model, maps, row_embeddings(model, validation, trained.batch_size, whole, weight),
                                validation_targets)
        spliced = (teacher_space(model, maps, row_embeddings(model, splice, trained.batch_size, whole, weight),
                                 splice_targets) if splice else {})
        rows = {name: {**retrieval(embeddings, validation_targets),
                       "spliced_top1": spliced_top1(spliced[name], splice_targets, k) if splice else None}
                for name, embeddings in queries.items()}
        lengths = np.array([len(row) for row in model.tokenizer(validation, add_special_tokens=False,
                                                                verbose=False)["input_ids"]])
        cut = (trained.segment_size, trained.segment_stride, trained.max_segments)
        limit = covered_tokens(*cut)
        segments = np.array([len(segment_spans(min(n, limit), *cut)) for n in lengths])
        metrics = {"gallery": len(validation), "rows": rows, "weights_sha256": encoders.weights_hash(final),
                   "blend_weight": weight, "start_blend_weight": model.config.blend_weight,
                   "splice": {"k": k, "groups": len(splice) // k, "skipped": skipped},
                   "base_window": trained.base_window, "whole_window": whole,
                   "segment_size": trained.segment_size, "segment_stride": trained.segment_stride,
                   "max_segments": trained.max_segments, "covered_tokens": limit,
                   "held_out_tokens": {"mean": float(lengths.mean()), "median": float(np.median(lengths)),
                                       "max": int(lengths.max()), "over_covered": int((lengths > limit).sum())},
                   "held_out_segments": {"mean": float(segments.mean()),
                                         "share_with_5_or_more": float((segments >= 5).mean())}}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["rows"] = rows
    print(f"{len(validation)} held-out texts (gallery {len(validation)}), {len(splice) // k} spliced-tails groups of "
          f"{k}:")
    for name, row in rows.items():
        spliced_row = "n/a" if row["spliced_top1"] is None else f"{row['spliced_top1']:.4f}"
        print(f"  {name:14} m_acc {row['m_acc']:.4f}  R@5 {row['recall_at_5']:.4f}  cosine {row['mean_cosine']:.4f}  "
              f"spliced top-1 {spliced_row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
