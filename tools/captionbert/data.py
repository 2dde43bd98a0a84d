"""captionbert's data between the steps: the teachers' embedding shards (written by tools/captionbert/extract.py and
tools/captionbert/align.py), the aligned consensus the student distils, and the length-bucketed batches it trains on
(the batching is described in tools/captionbert/train.py's docstring).
"""

import os
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from tools import corpus, runs

GROUP_BATCHES = 64  # batches per length-sorted group of the bucketed shuffle


def write_shard(path, embeddings):
    """No metadata in the file: safetensors orders metadata keys differently from run to run, which would break
    byte-identical reruns. What a shard is lives in manifest.json."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + f".tmp{os.getpid()}")
    save_file({"embeddings": embeddings.astype(np.float16)}, str(temporary))
    os.replace(temporary, path)


def load_consensus(align):
    """(texts, targets float16 (N, E), teacher names) of every kept chunk, in corpus order."""
    manifest_path = Path(align) / "manifest.json"
    if not manifest_path.exists():
        raise SystemExit(f"{manifest_path} not found: run tools.captionbert.align first")
    manifest = runs.read_json(manifest_path)
    all_texts = corpus.read_texts(manifest["texts"])
    if corpus.corpus_hash(all_texts) != manifest["corpus_sha256"]:
        raise SystemExit(f"{manifest['texts']} changed since the alignment (corpus hash differs)")
    texts, targets = [], []
    for shard in manifest["shards"]:
        texts += all_texts[shard["first_row"]:shard["first_row"] + shard["rows"]]
        targets.append(load_file(str(Path(align) / shard["file"]))["embeddings"])
    teachers = list(runs.read_json(Path(align) / "report.json")["teachers"])
    return texts, np.concatenate(targets), teachers


def bucketed_batches(lengths, batch_size, seed, epoch, max_batch_tokens=None):
    """One epoch of index batches (see the module docstring); full batches only. Depends on (seed, epoch) alone.
    With max_batch_tokens, a batch is also full when one more row would make rows x longest row exceed it."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    group = batch_size * GROUP_BATCHES
    batches = []
    for start in range(0, len(order), group):
        members = order[start:start + group]
        members = members[np.argsort(lengths[members], kind="stable")]
        batch = []
        for row in members:  # ascending lengths, so the newest row is the longest
            if batch and max_batch_tokens is not None and (len(batch) + 1) * lengths[row] > max_batch_tokens:
                batches.append(np.array(batch))
                batch = []
            batch.append(row)
            if len(batch) == batch_size:
                batches.append(np.array(batch))
                batch = []
    return [batches[i] for i in rng.permutation(len(batches))]


class EpochBatches:
    """The batch of any step: epochs follow one another, each as long as its own bucketed shuffle (with a token cap,
    epochs differ in their number of batches). Keeps the current epoch's batches."""

    def __init__(self, lengths, config):
        self.lengths, self.config = lengths, config
        self.epoch, self.first_step, self.batches = 0, 0, self._of(0)

    def _of(self, epoch):
        return bucketed_batches(self.lengths, self.config.batch_size, self.config.seed, epoch,
                                self.config.max_batch_tokens)

    def at(self, step):
        if step < self.first_step:
            self.epoch, self.first_step, self.batches = 0, 0, self._of(0)
        while step >= self.first_step + len(self.batches):
            self.epoch, self.first_step = self.epoch + 1, self.first_step + len(self.batches)
            self.batches = self._of(self.epoch)
        return self.batches[step - self.first_step]

    def epochs(self, step):
        """Epochs done at `step` (fractional)."""
        self.at(max(step - 1, 0))
        return self.epoch + (step - self.first_step) / len(self.batches)


def collate(token_ids, rows, pad_id):
    longest = max(len(token_ids[i]) for i in rows)
    input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for slot, i in enumerate(rows):
        input_ids[slot, :len(token_ids[i])] = torch.tensor(token_ids[i])
        attention_mask[slot, :len(token_ids[i])] = 1
    return input_ids, attention_mask
