"""Write captionbert-8192-v2's tokenizer files (bert-base-uncased WordPiece) into its Hub folder.

The vocabulary is taken from the installed all-MiniLM-L6-v2 package, whose vocab.txt is bert-base-uncased's, so
nothing is downloaded. The tokenizer is re-saved with the model's 8,192-token limit and without token_type_ids
(captionbert is a single-segment encoder). Where the folder has a config.json, its vocabulary_sha256 is set to the
vocabulary's hash, which the model's first `encode` checks the tokenizer against.

Usage:
    python -m tools.captionbert.tokenizer                     # writes into captionbert-8192-v2/
    python -m tools.captionbert.tokenizer --out some/folder
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoTokenizer

from shared_modeling.checks import vocabulary_sha256
from tools import registry, runs, teachers

@dataclass
class Config:
    out: Path = field(default=registry.CAPTIONBERT.path, metadata={"help": "the folder to write tokenizer files into"})
    max_length: int = field(default=8192, metadata={"help": "model_max_length to record in tokenizer_config.json"})


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)

    source = teachers.minilm_l6_folder()
    tokenizer = AutoTokenizer.from_pretrained(
        source, model_max_length=config.max_length, model_input_names=["input_ids", "attention_mask"]
    )
    if len(tokenizer) != 30522 or not tokenizer.do_lower_case:
        raise SystemExit(f"{source} does not hold the bert-base-uncased vocabulary ({len(tokenizer)} tokens)")
    # Drop the source's baked-in truncation/padding (128 tokens) and its load-time bookkeeping.
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()
    for key in ("name_or_path", "is_local", "local_files_only", "max_length", "stride", "truncation_strategy",
                "pad_to_multiple_of"):
        tokenizer.init_kwargs.pop(key, None)
    config.out.mkdir(parents=True, exist_ok=True)
    written = tokenizer.save_pretrained(config.out)
    print(f"wrote {len(written)} tokenizer files from {source} into {config.out}")
    if (config.out / "config.json").is_file():
        folder_config = runs.read_json(config.out / "config.json")
        folder_config["vocabulary_sha256"] = vocabulary_sha256(tokenizer)
        runs.write_json(config.out / "config.json", folder_config)
        print(f"config.json: vocabulary_sha256 {folder_config['vocabulary_sha256'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
