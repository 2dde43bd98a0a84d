"""The measures of geolip's card: each row's embeddings of held-out texts (the model and its baselines, ROWS), each
mapped into the teacher's space, and the retrieval scores on them (m_acc, recall@5, MRR, mean cosine, spliced-tails
top-1).
"""

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from shared_modeling.geometry import orthogonal_procrustes
from tools import runs
from tools.geolip.data import base_folder


# The model (through its trained projector, and through a least-squares linear map fitted on every training text), the
# base on its window (mapped by Procrustes, and by the same kind of linear map), on its first segment, the mean of its
# segments, the best fixed blend of the window and that mean, the base on the whole text (when it reads more than the
# window) and the teacher itself.
ROWS = ("memory", "memory_linear", "window", "window_linear", "first_segment", "segment_mean", "blend", "whole",
        "teacher")
BLEND_WEIGHTS = [i / 20 for i in range(21)]  # the window's weights fit_blend_weight tries
READERS = ("window", "window_linear", "first_segment", "segment_mean", "blend")  # the rows no training reads
MEASURES = ("m_acc", "mean_cosine", "spliced_top1")  # the measures the memory must beat every reader on


def not_beaten(memory, readers):
    """Where `memory` (a row) does not score above a reader: "<label> on <measure> (<memory> vs <reader>)" for every
    reader row of `readers` ({label: row}) and measure both have."""
    return [f"{label} on {key} ({memory[key]:.3f} vs {row[key]:.3f})" for label, row in readers.items()
            for key in MEASURES if None not in (memory[key], row[key]) and memory[key] <= row[key]]


def whole_window(config, base):
    """The tokens the base reads of a text natively, special tokens included: the sentence-transformers
    max_seq_length of its folder where it has one (all-MiniLM-L6-v2: 256), else its position limit; None when that
    is no more than the window (a CLIP base: 77), where the base cannot read the whole text and no whole row exists."""
    settings = Path(base_folder(config.base)) / "sentence_bert_config.json"
    length = base.max_position_embeddings
    if settings.is_file():
        length = min(length, runs.read_json(settings)["max_seq_length"])
    return length if length > config.base_window else None


def blend(window, segment_mean, weight):
    """The blend row's embeddings: weight * window + (1 - weight) * segment mean, both L2-normalised: what the
    model computes (GeolipModel.start) from the same embeddings when its config's blend_weight is `weight`."""
    return weight * F.normalize(window, dim=-1) + (1 - weight) * F.normalize(segment_mean.to(window.dtype), dim=-1)


def row_embeddings(model, texts, batch_size, whole=None, blend_weight=None):
    """{row: (N, D)} of `texts` in the base's space, without autograd: memory (the model, before its projector; and
    memory_linear, the same embeddings), window (and window_linear, the same embeddings: only their maps differ),
    first_segment, segment_mean, blend (with the window's weight blend_weight) unless blend_weight is None, and whole
    (the base on each text's first `whole` tokens) unless whole is None."""
    content_ids = model.content_ids(texts)
    rows = {name: [] for name in ("memory", "window", "first_segment", "segment_mean")}
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            ids = content_ids[start:start + batch_size]
            window = model.window_embedding(ids)
            layers, mask, own, counts = model.segments(ids)
            rows["memory"].append(model.embed_segments(window, layers, mask, own, counts).last_hidden_state[:, 0])
            rows["window"].append(window)
            starts = np.cumsum([0, *counts[:-1]])
            rows["first_segment"].append(own[starts])
            rows["segment_mean"].append(torch.stack([own[s:s + c].mean(dim=0) for s, c in zip(starts, counts)]))
        if whole is not None:  # the uncut tokens: the segments may cover fewer than the base reads
            uncut = model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
            rows["whole"] = [model.window_embedding(uncut[start:start + batch_size], whole)
                             for start in range(0, len(texts), batch_size)]
    rows = {name: torch.cat(chunks) for name, chunks in rows.items()}
    if blend_weight is not None:
        rows["blend"] = blend(rows["window"], rows["segment_mean"], blend_weight)
    return {**rows, "memory_linear": rows["memory"], "window_linear": rows["window"]}


def fit_blend_weight(rows, targets):
    """(the window's weight in BLEND_WEIGHTS, its mean cosine): the blend of the window and segment-mean rows
    (row_embeddings of training texts) whose own Procrustes map brings it closest to the teacher embeddings `targets`
    of the same texts (the mean cosine after the map; ties go to the larger window weight). Training texts only: the
    blend row is a reader fitted without the held-out texts, like every map."""
    scores = {}
    for weight in BLEND_WEIGHTS:
        blended = F.normalize(blend(rows["window"], rows["segment_mean"], weight), dim=-1)
        mapped = blended @ orthogonal_procrustes(blended, F.normalize(targets, dim=-1))
        scores[weight] = mean_cosine(mapped, targets)
    best = max(BLEND_WEIGHTS, key=lambda weight: (scores[weight], weight))
    return best, scores[best]


RIDGE = 1e-2  # ridge_map's: all-MiniLM-L6-v2's window embeddings are rank-deficient (condition number ~1e17 over the
#               training texts), so plain least squares amplifies rounding noise: window_linear's m_acc moved from .900
#               to .744 between two runs whose embeddings differed by float32 rounding; with this ridge both give .900
#               (.001 and .01 measure the same, 1.0 lowers m_acc to .848)


def ridge_map(embeddings, targets, ridge=RIDGE):
    """(D, D'): the ridge least-squares linear map from `embeddings` (N, D) onto the teacher embeddings `targets`
    (N, D') of the same texts, both L2-normalised, solved in float64. On the window embeddings of every training text
    it is the window_linear row's map, the most a linear head on the window alone gives (the memory must beat it to be
    worth more than such a head); on the memory's, the memory_linear row's, the memory read the same way."""
    embeddings, targets = F.normalize(embeddings.double(), dim=-1), F.normalize(targets.double(), dim=-1)
    gram = embeddings.T @ embeddings + ridge * torch.eye(embeddings.shape[1], dtype=torch.float64)
    return torch.linalg.solve(gram, embeddings.T @ targets).float()


def procrustes_maps(rows, targets):
    """{row: (D, D')}: each row's (row_embeddings) orthogonal Procrustes map onto the teacher embeddings `targets`
    (N, D') of the same texts."""
    return {name: orthogonal_procrustes(F.normalize(embeddings, dim=-1), F.normalize(targets, dim=-1))
            for name, embeddings in rows.items()}


def teacher_space(model, maps, rows, targets):
    """{row: (N, D')} in ROWS order: the rows (row_embeddings) in the teacher's space, the memory through its trained
    projector, every other row through its own map (procrustes_maps; ridge_map for memory_linear and window_linear),
    and the teacher row, the teacher's own embeddings `targets` of the same texts (already there: a map fitted on fewer
    texts than its width would not be the identity)."""
    with torch.no_grad():
        mapped = {name: model.projector(embeddings) if name == "memory" else embeddings @ maps[name]
                  for name, embeddings in rows.items()}
    return {name: targets if name == "teacher" else mapped[name] for name in ROWS if name in {*mapped, "teacher"}}


def spliced_top1(queries, targets, k):
    """Top-1 accuracy of row i of queries retrieving row i of targets by cosine within its group of k consecutive
    rows (both (G k, D')): 1 / k for a row that gives every text of a group one embedding."""
    similarity = F.normalize(queries, dim=-1).view(-1, k, queries.shape[1]) @ \
        F.normalize(targets, dim=-1).view(-1, k, targets.shape[1]).transpose(1, 2)  # (G, k, k)
    return (similarity.argmax(dim=2) == torch.arange(k)).sum().item() / len(queries)


def m_acc(queries, gallery):
    """Top-1 accuracy of row i of queries retrieving row i of gallery by cosine (both (N, D'))."""
    similarity = F.normalize(queries, dim=-1) @ F.normalize(gallery, dim=-1).T
    return (similarity.argmax(dim=1) == torch.arange(len(queries))).float().mean().item()


def mean_cosine(first, second):
    return F.cosine_similarity(first, second, dim=-1).mean().item()


def retrieval(queries, gallery):
    """{"m_acc", "recall_at_5", "mrr", "mean_cosine"} of row i of queries looking for row i of gallery (cosine)."""
    queries, gallery = F.normalize(queries.float(), dim=-1), F.normalize(gallery.float(), dim=-1)
    similarity = queries @ gallery.T
    own = similarity.diagonal()
    rank = (similarity > own[:, None]).sum(dim=1) + 1  # 1 is best; a tie with its own row does not push it down
    return {"m_acc": (rank == 1).float().mean().item(), "recall_at_5": (rank <= 5).float().mean().item(),
            "mrr": (1.0 / rank.float()).mean().item(), "mean_cosine": own.mean().item()}
