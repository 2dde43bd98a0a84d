"""The glyph tokenizer: byte-level BPE trained on the glyph corpus only, RoBERTa's special tokens and template.

The pre-tokeniser is GPT-2's (byte-level with its regex, no prefix space), so llama.cpp's `gpt-2` pre-tokeniser
splits text the same way and the GGUF export tokenises token for token like PyTorch.
"""

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, RoBERTa's order


def train_tokenizer(texts: Iterable[str], vocab_size: int = 6000, max_length: int = 256) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of `vocab_size` tokens (special tokens included) on `texts`."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=max_length,
        model_input_names=["input_ids", "attention_mask"],
    )
