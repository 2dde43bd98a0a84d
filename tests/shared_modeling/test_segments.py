"""shared_modeling/segments.py: which tokens each segment covers, the 452 vs 576 question, the batched layout, and
the base's own window."""

import pytest
import torch

from shared_modeling.segments import covered_tokens, segment_batch, segment_spans, window_batch

PUBLISHED = dict(size=18, stride=14, max_segments=32)


def test_published_segmentation_covers_452_distinct_tokens_in_576_slots():
    assert covered_tokens(**PUBLISHED) == 452 and 32 * 18 == 576
    spans = segment_spans(10_000, **PUBLISHED)
    assert len(spans) == 32 and spans[0] == (0, 18) and spans[1] == (14, 32) and spans[-1] == (434, 452)
    assert all(end - start == 18 for start, end in spans)
    assert len({token for start, end in spans for token in range(start, end)}) == 452  # overlap 4 is counted once


@pytest.mark.parametrize("length", [1, 17, 18, 19, 32, 33, 100, 452, 453])
def test_every_token_up_to_the_cover_is_in_a_segment_and_none_past_it(length):
    spans = segment_spans(length, **PUBLISHED)
    covered = {token for start, end in spans for token in range(start, end)}
    assert covered == set(range(min(length, 452)))
    assert len(spans) == 1 + max(0, -(-(min(length, 452) - 18) // 14))  # no segment is wholly inside the previous
    assert all(0 < end - start <= 18 for start, end in spans)


def test_segment_spans_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one token"):
        segment_spans(0, **PUBLISHED)
    with pytest.raises(ValueError, match="stride"):
        segment_spans(10, size=4, stride=5, max_segments=3)


def test_segment_batch_lays_every_segment_of_every_text_in_one_batch():
    short, long = [5, 6, 7], list(range(100, 140))  # 3 and 40 content tokens
    input_ids, attention_mask, text, counts = segment_batch([short, long], 18, 14, 32, bos_id=1, eos_id=2, pad_id=0)
    assert counts == [1, 3] and text.tolist() == [0, 1, 1, 1]
    assert input_ids.shape == attention_mask.shape == (4, 20)
    assert input_ids[0].tolist() == [1, 5, 6, 7, 2] + [0] * 15 and attention_mask[0].sum() == 5
    assert input_ids[1].tolist() == [1, *range(100, 118), 2]
    assert input_ids[2].tolist() == [1, *range(114, 132), 2]
    assert input_ids[3].tolist() == [1, *range(128, 140), 2] + [0] * 6 and attention_mask[3].sum() == 14
    assert torch.equal(attention_mask.bool(), input_ids.ne(0))


def test_window_batch_holds_each_text_s_first_window_minus_two_tokens_between_its_special_tokens():
    short, long = [5, 6, 7], list(range(100, 200))
    input_ids, attention_mask = window_batch([short, long], 77, bos_id=1, eos_id=2, pad_id=0)
    assert input_ids.shape == attention_mask.shape == (2, 77)  # always the window: a text's row never depends on others
    assert input_ids[0].tolist() == [1, 5, 6, 7, 2] + [0] * 72 and attention_mask[0].sum() == 5
    assert input_ids[1].tolist() == [1, *range(100, 175), 2] and attention_mask[1].all()  # 75 content tokens
    assert window_batch([short], 3, 1, 2, 0)[0].tolist() == [[1, 5, 2]]
    with pytest.raises(ValueError, match="two special tokens and one of content: got 2"):
        window_batch([short], 2, 1, 2, 0)
