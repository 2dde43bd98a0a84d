"""captionbert-8192-v2 as a Sentence Transformers (v6) module; modules.json names it, so loading it needs
`SentenceTransformer(<repo or folder>, trust_remote_code=True)`.

It is the stock `Transformer` module, configured by sentence_bert_config.json to run the model's own `forward` and
take its `pooler_output`: the masked mean pool -> head -> L2 normalisation that `model.encode` returns, so the pooling
exists once, in modeling_captionbert.py, and no Pooling or Normalize module follows. Inputs are truncated at
`max_seq_length` (the positions training reached) keeping [CLS] ... [SEP], as `encode` does. Two changes: the
stock module would report the token states' width (hidden_size, 512) as the embedding width, this one reports
output_dim (768); and a text with no content is a ValueError, as in `encode`.
"""

from sentence_transformers.sentence_transformer.modules import Transformer

from .shared_checks import check_texts


class CaptionBertTransformer(Transformer):
    """The stock Transformer module whose output is the model's sentence embedding (B, output_dim)."""

    def get_embedding_dimension(self):
        return self.config.output_dim

    def preprocess(self, inputs, *args, **kwargs):
        if all(isinstance(text, str) for text in inputs):
            check_texts(list(inputs))
        return super().preprocess(inputs, *args, **kwargs)


__all__ = ["CaptionBertTransformer"]
