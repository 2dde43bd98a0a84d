"""glyph-embedder-v2's build steps: the notation's grammar, the generated corpus and the BPE tokenizer."""
