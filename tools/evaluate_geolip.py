"""Score a trained geolip-clip-ctx576 folder against its two baselines on the held-out long texts of its run.

Usage:
    python -m tools.evaluate_geolip --train runs/demo/geolip/train --out runs/demo/geolip/eval

The held-out texts, the teacher embeddings (the run's cache) and the sample the maps are fitted on are the training
run's own (tools/train_geolip.py, rebuilt from its config.json). The model is loaded from final/ the way users load
it (AutoModel, trust_remote_code). Rows:
  memory        the model's embedding through its trained teacher projector;
  truncated     the frozen base on the text's first window only (its first segment's own embedding);
  segment mean  the mean of the base's own embeddings of all the text's segments (the same segments, no memory);
each baseline mapped into the teacher's space by its own orthogonal Procrustes map, fitted on the same training
sample as the projector's initialisation. Measures, every held-out text querying the whole gallery of held-out
teacher embeddings by cosine: top-1 accuracy (m_acc), recall@5, mean reciprocal rank, and the mean cosine to the
text's own teacher embedding. The out folder gets metrics.json (rows, gallery size, the texts' token lengths and
segment counts, the weights' sha256) and the run record.
"""

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModel

from shared_modeling.segments import covered_tokens, segment_spans
from tools import encoders, runs, train_geolip


@dataclass
class Config:
    train: Path  # tools/train_geolip.py run folder (config.json, teacher cache, final/)
    out: Path  # run folder


def parse_config(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, required=True, help="tools/train_geolip.py run folder")
    parser.add_argument("--out", type=Path, required=True, help="run folder")
    config = Config(**vars(parser.parse_args(argv)))
    for path in (config.train / "config.json", config.train / "final" / "model.safetensors"):
        if not path.exists():
            raise SystemExit(f"{path} not found: train with tools/train_geolip.py first")
    return config


def training_config(folder):
    """The train_geolip Config a run folder records."""
    recorded = runs.read_json(Path(folder) / "config.json")
    paths = {item.name for item in dataclasses.fields(train_geolip.Config) if "Path" in str(item.type)}
    return train_geolip.Config(**{k: Path(v) if k in paths and v is not None else v for k, v in recorded.items()})


def retrieval(queries, gallery):
    """{"m_acc", "recall_at_5", "mrr", "mean_cosine"} of row i of queries looking for row i of gallery (cosine)."""
    queries, gallery = F.normalize(queries.float(), dim=-1), F.normalize(gallery.float(), dim=-1)
    similarity = queries @ gallery.T
    own = similarity.diagonal()
    rank = (similarity > own[:, None]).sum(dim=1) + 1  # 1 is best; a tie with its own row does not push it down
    return {"m_acc": (rank == 1).float().mean().item(), "recall_at_5": (rank <= 5).float().mean().item(),
            "mrr": (1.0 / rank.float()).mean().item(), "mean_cosine": own.mean().item()}


def main(argv=None):
    config = parse_config(argv)
    trained = dataclasses.replace(training_config(config.train), out=config.train)
    training, validation = train_geolip.split_texts(trained)
    targets = train_geolip.cached_teacher_embeddings(trained, training + validation)
    if targets is None:
        raise SystemExit(f"{train_geolip.teacher_cache(trained, [])[0]} does not hold the teacher embeddings of "
                         f"{config.train}'s texts")
    targets = torch.from_numpy(targets)
    train_targets, validation_targets = targets[:len(training)], targets[len(training):]
    final = config.train / "final"

    with runs.RunRecord(config.out, config, "evaluate_geolip") as record:
        model = AutoModel.from_pretrained(final, trust_remote_code=True).eval()
        train_ids, validation_ids = model.content_ids(training), model.content_ids(validation)
        sample = list(range(min(trained.init_texts, len(training))))
        _, maps = train_geolip.procrustes_maps(model, [train_ids[i] for i in sample], train_targets[sample],
                                               trained.batch_size)
        queries = train_geolip.teacher_space(model, maps, validation_ids, trained.batch_size)
        rows = {name: retrieval(embeddings, validation_targets) for name, embeddings in queries.items()}
        lengths = np.array([len(row) for row in model.tokenizer(validation, add_special_tokens=False,
                                                                verbose=False)["input_ids"]])
        cut = (trained.segment_size, trained.segment_stride, trained.max_segments)
        limit = covered_tokens(*cut)
        segments = np.array([len(segment_spans(min(n, limit), *cut)) for n in lengths])
        metrics = {"gallery": len(validation), "rows": rows, "weights_sha256": encoders.weights_hash(final),
                   "segment_size": trained.segment_size, "segment_stride": trained.segment_stride,
                   "max_segments": trained.max_segments, "covered_tokens": limit,
                   "held_out_tokens": {"mean": float(lengths.mean()), "median": float(np.median(lengths)),
                                       "max": int(lengths.max()), "over_covered": int((lengths > limit).sum())},
                   "held_out_segments": {"mean": float(segments.mean()),
                                         "share_with_5_or_more": float((segments >= 5).mean())}}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["rows"] = rows
    print(f"{len(validation)} held-out texts (gallery {len(validation)}): "
          + "; ".join(f"{name} m_acc {row['m_acc']:.4f} R@5 {row['recall_at_5']:.4f}" for name, row in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
