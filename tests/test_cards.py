"""tools/cards.py: the provenance check of card numbers and the YAML metadata (the committed cards against their
released records: test_shipped.py)."""

import pytest
from huggingface_hub import ModelCard

from tools import card_engine, cards

RECORDS = {0.91793, 1234.0, 58_308_864.0, 0.4567, 2112.0}  # 2112 s = 35.2 min


def test_numbers_are_accounted_for_as_printed():
    card = "m_acc 0.918, 1,234 texts, 58.3M parameters (58,308,864), 46% of them, 35.2 min\n"
    assert cards.unaccounted_numbers(card, RECORDS, published=set()) == []


def test_a_number_no_record_holds_is_reported():
    card = "m_acc 0.918 and a typed 0.950, 12 texts, 58.4M parameters\n"
    assert cards.unaccounted_numbers(card, RECORDS, published=set()) == ["0.950", "12", "58.4M"]
    assert cards.unaccounted_numbers(card, RECORDS, published={0.95, 12, 58.4}) == []  # quoted from a spec


def test_a_signed_number_may_be_the_difference_of_two_records():
    card = "+0.4612 over the baseline, -0.4612 under it, and 0.4612 unsigned\n"  # 0.91793 - 0.4567 = 0.46123
    assert cards.unaccounted_numbers(card, RECORDS, published=set()) == ["0.4612"]


def test_code_blocks_and_names_with_digits_are_not_numbers():
    card = "```python\nmodel.encode(['a'])  # (1, 768)\n```\nall-MiniLM-L6-v2, STS12, ctx576, m_acc 0.918\n"
    assert cards.unaccounted_numbers(card, RECORDS, published=set()) == []


def test_front_matter_is_valid_model_card_metadata():
    header = card_engine.front_matter(library_name="transformers", pipeline_tag="feature-extraction", tags=["a", "b"],
                                datasets=["google/imageinwords"], model_name="m", base_model="x/y",
                                results=[{"task_type": "feature-extraction", "dataset_type": "google/imageinwords",
                                          "dataset_name": "held out", "metric_type": "accuracy",
                                          "metric_name": "m_acc", "metric_value": 0.918}])
    data = ModelCard(header + "\n# m\n").data
    assert data.license == "apache-2.0" and data.base_model == "x/y" and data.pipeline_tag == "feature-extraction"
    assert data.eval_results[0].metric_value == 0.918 and data.eval_results[0].dataset_type == "google/imageinwords"


def test_an_export_folder_without_a_run_record_is_named(tmp_path):
    with pytest.raises(SystemExit, match=f"no export run for {tmp_path}"):
        cards.main(["--export", str(tmp_path)])
