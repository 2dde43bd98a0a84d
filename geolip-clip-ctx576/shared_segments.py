# Generated from shared_modeling/segments.py by `make vendor`. Do not edit: edit the source and regenerate.
"""Overlapping token segments: how a long text is cut into short windows for a frozen short-context base encoder.

A text of L content tokens (special tokens excluded) becomes segments of `size` tokens starting every `stride`
tokens, at most `max_segments` of them. Segment i covers tokens [i stride, i stride + size); consecutive segments
share size - stride tokens; the last one may be shorter. With the published 18 / 14 / 32 there are 32 x 18 = 576
token slots, but they cover only 18 + 31 x 14 = 452 distinct tokens (`covered_tokens`); later tokens are dropped.
A base's own window (`window_batch`) is what it reads of a text at once: its first `window - 2` content tokens
between its two special tokens (CLIP: 77 positions, 75 content tokens).
"""

import math

import torch


def covered_tokens(size, stride, max_segments):
    """How many distinct content tokens `max_segments` segments reach: size + (max_segments - 1) * stride."""
    return size + (max_segments - 1) * stride


def segment_spans(length, size, stride, max_segments):
    """[(start, end)] of the segments of a text of `length` content tokens (end exclusive, end - start <= size)."""
    if not 0 < stride <= size:
        raise ValueError(f"stride must be in (0, size]: size {size}, stride {stride}")
    if length < 1:
        raise ValueError("a text needs at least one token to be segmented")
    count = min(max_segments, 1 + max(0, math.ceil((length - size) / stride)))
    return [(i * stride, min(length, i * stride + size)) for i in range(count)]


def segment_batch(texts_ids, size, stride, max_segments, bos_id, eos_id, pad_id):
    """Every segment of every text as ONE batch for the base encoder.

    texts_ids: content token ids of each text (lists, special tokens excluded). Each segment becomes
    [bos, its tokens, eos], right-padded to size + 2. Returns input_ids and attention_mask (S, size + 2), text
    (S,) the index of each segment's text, and counts, each text's number of segments (segments of a text are
    consecutive, in order)."""
    rows, text, counts = [], [], []
    for index, ids in enumerate(texts_ids):
        spans = segment_spans(len(ids), size, stride, max_segments)
        rows += [[bos_id, *ids[start:end], eos_id] for start, end in spans]
        text += [index] * len(spans)
        counts.append(len(spans))
    input_ids = torch.full((len(rows), size + 2), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), size + 2), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        attention_mask[row, :len(ids)] = 1
    return input_ids, attention_mask, torch.tensor(text), counts


def window_batch(texts_ids, window, bos_id, eos_id, pad_id):
    """Each text's own window as ONE batch for the base encoder: [bos, its first window - 2 content tokens, eos],
    right-padded to `window` (>= 3). Returns input_ids and attention_mask (B, window)."""
    if window < 3:
        raise ValueError(f"a window needs room for two special tokens and one of content: got {window}")
    input_ids, attention_mask, _, _ = segment_batch(texts_ids, window - 2, window - 2, 1, bos_id, eos_id, pad_id)
    return input_ids, attention_mask
