"""Generated files stay generated: vendored shared_*.py copies and the captionbert tokenizer files."""

import json
import shutil

from transformers import AutoTokenizer

from helpers import CAPTIONBERT, ROOT
from tools import registry, runs, teachers, vendor
from tools.captionbert import tokenizer as captionbert_tokenizer


def test_vendored_copies_match_shared_modeling():
    assert vendor.main(["--check"]) == 0
    for pipeline in registry.PIPELINES:
        for path, text in vendor.expected_copies(pipeline.path).items():
            assert path.read_text() == text
            assert text.startswith("# Generated from shared_modeling/")


def test_check_vendor_detects_drift_and_vendor_repairs_it(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "shared_modeling", tmp_path / "shared_modeling")
    for pipeline in registry.PIPELINES:
        shutil.copytree(pipeline.path, tmp_path / pipeline.folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(runs, "ROOT", tmp_path)
    monkeypatch.setattr(vendor, "SOURCE", tmp_path / "shared_modeling")
    assert vendor.main(["--check"]) == 0

    copy = tmp_path / "captionbert-8192-v2" / "shared_layers.py"
    copy.write_text(copy.read_text().replace("post-LayerNorm", "pre-LayerNorm"))
    (tmp_path / "captionbert-8192-v2" / "shared_unused.py").write_text("x = 1\n")
    assert vendor.main(["--check"]) == 1
    assert vendor.main([]) == 0
    assert vendor.main(["--check"]) == 0
    assert not (tmp_path / "captionbert-8192-v2" / "shared_unused.py").exists()

    # An edit of the source is drift too, until regenerated; relative imports are rewritten flat.
    source = tmp_path / "shared_modeling" / "pooling.py"
    source.write_text(source.read_text() + "\n# edited\n")
    assert vendor.main(["--check"]) == 1
    assert "from .shared_pooling import" in vendor.vendored_text("geometry")


def test_tokenizer_files_are_what_the_tool_writes(tmp_path):
    """Its files, and config.json's vocabulary_sha256 (the rest of the config as it was)."""
    config = json.loads((CAPTIONBERT / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocabulary_sha256": "stale"}))
    assert captionbert_tokenizer.main(["--out", str(tmp_path)]) == 0
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (tmp_path / name).read_bytes() == (CAPTIONBERT / name).read_bytes(), name


def test_tokenizer_is_bert_base_uncased_with_the_8192_limit():
    ours = AutoTokenizer.from_pretrained(CAPTIONBERT, trust_remote_code=True)
    source = AutoTokenizer.from_pretrained(teachers.minilm_l6_folder())
    assert len(ours) == 30522 and ours.model_max_length == 8192
    texts = ["A Dog runs across the GRASS!", "naïve café-goers, 3.5 km away", "unbelievably [MASK] tokens"]
    assert ours(texts)["input_ids"] == source(texts)["input_ids"]
    assert ours.convert_ids_to_tokens(ours("Hello there")["input_ids"]) == ["[CLS]", "hello", "there", "[SEP]"]
    assert "token_type_ids" not in ours("x")
