"""The glyph tokenizer: byte-level BPE trained on the glyph corpus only, RoBERTa's special tokens and template.

The pre-tokeniser is GPT-2's (byte-level with its regex, no prefix space), so llama.cpp's `gpt-2` pre-tokeniser
splits text the same way and the GGUF export tokenises token for token like PyTorch.

With `spaces_apart`, the BPE is trained on text whose every white-space character is a piece of its own, so no merge
holds a space: `a ⇒ b` is `a Ġ ⇒ Ġ b`, `a⇒b` is `a ⇒ b`, and spacing variants (white space carries no meaning in
glyph) share every other token. GPT-2's regex only ever glues a space to the piece after it, and a merge never
joins a space to anything, so the saved tokenizer keeps GPT-2's pre-tokeniser and tokenises the same (llama.cpp
included).
"""

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, RoBERTa's order


def train_tokenizer(texts: Iterable[str], vocab_size: int = 6000, max_length: int = 256,
                    spaces_apart: bool = False) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of `vocab_size` tokens (special tokens included) on `texts`; with `spaces_apart`, no
    token holds white space but the one-character ones."""
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend = Tokenizer(models.BPE())
    isolate_spaces = pre_tokenizers.Split(Regex(r"\s"), "isolated")
    backend.pre_tokenizer = pre_tokenizers.Sequence([isolate_spaces, gpt2]) if spaces_apart else gpt2
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    backend.pre_tokenizer = gpt2  # the same tokens once no merge holds a space (see the module docstring)
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
