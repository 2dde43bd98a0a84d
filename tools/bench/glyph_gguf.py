"""glyph-embedder-v2: embeddings per second of its GGUF in llama.cpp (llama-cpp-python; f32 and f16) vs PyTorch fp32
(RobertaModel + masked mean pool, batches of --batch-size) on the same generated glyph strings, a random model of the
published shape (small with --tiny) with a BPE tokenizer trained on those strings. Reported, no target.
"""

import statistics
import tempfile
from pathlib import Path

import torch
from transformers import AutoTokenizer, RobertaModel

from tools.bench.common import in_dtype, naive_pipeline, race, row
from tools.glyph import data as glyph_data
from tools.glyph import gguf
from tools.glyph.generate import ClaimGenerator, Lexicon
from tools.glyph.grammar import to_text
from tools.glyph.tokenizer import train_tokenizer


def build_glyph(folder, config):
    """(texts, model): seeded glyph strings and a random RobertaModel of glyph-embedder-v2's shape (small with
    --tiny) saved in `folder` with a BPE tokenizer trained on those strings."""
    generator = ClaimGenerator(Lexicon.load(), config.seed)
    texts = [to_text(generator.claim()) for _ in range(config.glyph_texts)]
    tokenizer = train_tokenizer(texts, vocab_size=6000)
    tiny = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64} if config.tiny else {}
    torch.manual_seed(config.seed)
    model = RobertaModel(glyph_data.model_config(glyph_data.Config(corpus=folder, out=folder, **tiny), tokenizer))
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return texts, model


def measure(config, setup):
    """(rows, report part); setup is not used: the glyph model is its own. The rows: glyph-embedder-v2's
    embeddings/s through llama.cpp, GGUF f32 and f16, vs PyTorch fp32 on the same generated glyph strings; the part:
    the seconds under seconds/glyph."""
    with tempfile.TemporaryDirectory() as folder:
        glyph_texts, glyph_model = build_glyph(Path(folder), config)
        glyph_tokenizer = AutoTokenizer.from_pretrained(folder)
        contenders = {"pytorch fp32": in_dtype(lambda: naive_pipeline(glyph_tokenizer, glyph_model, glyph_texts,
                                                                      config.batch_size), "fp32")}
        for dtype in ("f32", "f16"):
            llm = gguf.load_llama(gguf.export_gguf(folder, Path(folder) / f"{dtype}.gguf", dtype))
            contenders[f"gguf {dtype}"] = lambda llm=llm: gguf.llama_embed(llm, glyph_texts)
        glyph = race(contenders, config.repeats, "glyph embeddings")
    reference = len(glyph_texts) / statistics.median(glyph["pytorch fp32"])
    rows = []
    for dtype in ("f32", "f16"):
        ours = len(glyph_texts) / statistics.median(glyph[f"gguf {dtype}"])
        rows.append(row(f"glyph: llama.cpp GGUF {dtype} vs PyTorch fp32 (throughput)", "emb/s", ours,
                        reference, ours / reference))
    return rows, {"seconds": {"glyph": glyph}}
