"""The frozen captionbert trunk AMOE arms train on, and the harness that scores it with or without arms: the
validation suite (tools/captionbert/amoe/pairs.py) that every decision reads, and STS-8 with the in-domain gauge,
which decisions never read. solo.py, dispatch.py, select.py and levers.py score through it, so their rows compare.

Each function takes the run's config for what it names: model and device (the trunk), data_dir and tasks (STS-8).
"""

from pathlib import Path

import torch
from transformers import AutoModel

from shared_modeling.identity import trunk_hash
from tools import sts
from tools.captionbert.amoe import pairs


def load_trunk(config):
    """(model, trunk_id): the captionbert trunk, frozen, eval mode (no dropout), fp32, TF32 off."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not (Path(config.model) / "config.json").is_file():
        raise SystemExit(f"--model {config.model} is not a captionbert folder (run `make demo` to build the trunk)")
    model = AutoModel.from_pretrained(str(config.model), trust_remote_code=True, dtype=torch.float32)
    model.requires_grad_(False).eval().to(config.device)
    return model, trunk_hash(model)


def validation_score(model, validation, trained_sources):
    """Every set of the validation suite (tools/captionbert/amoe/pairs.py): Spearman of cosine for the scored sets,
    same-image MRR for flickr8k-dev, and "mean" over the selection sets (pairs.validation_mean; None when an arm
    trains on one of their sources: trained_sources, the labelled sources of the scored arms)."""
    scored = {name: rows for name, rows in validation.items() if name != "flickr8k-dev"}
    result = sts.score(model, scored, [])
    scores = {name: result[name] for name in scored}
    if "flickr8k-dev" in validation:
        scores["flickr8k-dev"] = sts.same_image_retrieval(model, dict(validation["flickr8k-dev"]))["mrr"]
    return scores | {"mean": pairs.validation_mean(scores, trained_sources)}


def sts8_score(model, config):
    """Spearman per STS-8 task (config.tasks) and their mean, and the in-domain gauge: same-image retrieval on the
    Flickr8k test captions (flickr8k_recall@1, flickr8k_mrr among flickr8k_images; tools/sts.same_image_retrieval)."""
    task_pairs = {task: sts.load_task(config.data_dir, task) for task in config.tasks}
    result = sts.score(model, task_pairs, [])
    gauge = sts.same_image_retrieval(model, sts.flickr8k_captions(config.data_dir, "test"))
    return {name: result[name] for name in (*config.tasks, "mean")} | {
        "flickr8k_recall@1": gauge["recall@1"], "flickr8k_mrr": gauge["mrr"], "flickr8k_images": gauge["images"]}
