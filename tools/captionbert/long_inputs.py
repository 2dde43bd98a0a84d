"""Does captionbert read a long text whole? Its embedding of the whole text vs of the text's first 64 / 128 / 256
tokens, each compared with the reference teacher's embedding of the whole text.

Usage:
    python -m tools.captionbert.long_inputs --model runs/demo/distill/final --out runs/demo/long
    python -m tools.captionbert.long_inputs --model captionbert-8192-v2 --windows 32 64 --out runs/x

Texts: the ImageInWords descriptions held out of every training corpus (tools/corpus.split_imageinwords: 500+
texts of whole images, the geolip gallery too), 100-400 tokens each. The student is trained into the reference
teacher's frame (the consensus lives there), so its embedding is compared with the teacher's directly:
    cosine  mean cosine between the student's embedding of the window and the teacher's of the whole text
    top1    how often the teacher's whole-text embedding of the same text is the nearest of the gallery's
A window keeps the first tokens and the closing [SEP]; "whole" is the text up to the positions the model was
trained on (config.trained_length, reported). Writes metrics.json and results.md into --out.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel
from tqdm.auto import tqdm

from shared_modeling.encoding import truncate_keeping_last
from tools import corpus, encoders, runs

WHOLE = "whole"
WINDOWS = (64, 128, 256)


@dataclass
class Config:
    model: Path = field(metadata={"help": "a captionbert folder (remote code)"})
    out: Path = field(metadata={"help": "run folder"})
    teacher: str = field(default="teacher:all-mpnet-base-v2", metadata={
        "help": "the reference teacher (tools/encoders.py spec)"})
    windows: list[int] = field(default_factory=lambda: list(WINDOWS), metadata={
        "help": "token windows scored beside the whole text"})
    data_dir: Path = field(default_factory=runs.default_data_dir)  # ../shared/data or BUNDLE_DATA_DIR
    batch_size: int = 16  # texts per forward pass


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if any(w < 3 for w in config.windows) or config.batch_size < 1:
        raise SystemExit("--windows need at least 3 tokens ([CLS] word [SEP]) and --batch-size at least 1")
    return config


def window_ids(token_ids, window):
    """The first `window` tokens of each id list, the closing [SEP] kept; shorter lists unchanged."""
    return [truncate_keeping_last(ids, window) for ids in token_ids]


def embed_ids(model, token_ids, batch_size):
    """Normalised embeddings (N, E) of token id lists, batched by length."""
    order = np.argsort([-len(ids) for ids in token_ids], kind="stable")
    out = torch.empty(len(token_ids), model.config.output_dim)
    with torch.inference_mode():
        for start in tqdm(range(0, len(order), batch_size), desc="student", leave=False):
            rows = order[start:start + batch_size]
            batch = model.tokenizer.pad({"input_ids": [token_ids[i] for i in rows]}, return_tensors="pt")
            out[torch.as_tensor(rows)] = model(batch["input_ids"], batch["attention_mask"]).pooler_output.float()
    return out


def compare(student, teacher):
    """{"cosine", "top1"} of student rows against the teacher rows of the same texts (both (N, E), normalised)."""
    similarity = student @ teacher.T  # (N, N)
    hits = similarity.argmax(dim=1) == torch.arange(len(student))
    return {"cosine": round(float(similarity.diagonal().mean()), 4), "top1": round(float(hits.float().mean()), 4)}


def main(argv=None):
    config = parse_config(argv)
    texts = corpus.split_imageinwords(config.data_dir)[1]
    model = AutoModel.from_pretrained(str(config.model), trust_remote_code=True).eval()
    tokenizer = model.tokenizer
    token_ids = tokenizer(texts, truncation=False, verbose=False)["input_ids"]
    lengths = np.array([len(ids) for ids in token_ids])
    usable = model.usable_length
    with runs.RunRecord(config.out, config, "captionbert.long_inputs"):
        _, teacher = encoders.load(config.teacher)
        reference = torch.from_numpy(teacher.encode(texts))
        rows = {}
        for window in [*config.windows, WHOLE]:
            limit = usable if window == WHOLE else min(window, usable)
            embedded = embed_ids(model, window_ids(token_ids, limit), config.batch_size)
            rows[str(window)] = {"tokens": int(limit), **compare(embedded, reference)}
            print(f"{window}: {rows[str(window)]}")
        metrics = {"texts": len(texts), "teacher": config.teacher, "teacher_max_length": teacher.max_length,
                   "trained_length": model.config.trained_length, "usable_length": usable,
                   "tokens": {"median": int(np.median(lengths)), "p90": int(np.percentile(lengths, 90)),
                              "max": int(lengths.max())},
                   "rows": rows, "weights_sha256": encoders.weights_hash(config.model)}
        runs.write_json(config.out / "metrics.json", metrics)
        table = ["| tokens read | cosine to the teacher's whole text | top-1 of the teacher's whole text |",
                 "|---|---|---|"]
        table += [f"| {'whole text (up to ' + str(usable) + ')' if name == WHOLE else 'first ' + name} | "
                  f"{row['cosine']:.4f} | {row['top1']:.4f} |" for name, row in rows.items()]
        (config.out / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
