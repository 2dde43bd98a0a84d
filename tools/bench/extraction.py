"""Teacher extraction on the real caption mix (a seeded sample of tools/corpus.py's default corpus, long ImageInWords
descriptions included), fp32: tools/encoders.py's length-bucketed path (what tools/captionbert/extract.py runs) vs
naive padded batches in corpus order, both on the benchmark's BertModel saved as a plain HF teacher folder.
Target >= 1.5x.
"""

import statistics
import tempfile

from tools import encoders
from tools.bench.common import corpus_sample, in_dtype, naive_pipeline, race, row


def measure(config, setup):
    """(rows, report part). The row: teacher extraction of the corpus sample, fp32, length-bucketed vs naive padded
    batches in corpus order, on setup.bert saved (never run) as a plain HF teacher folder and loaded back; the part:
    the sample's token counts under corpus_sample and the seconds under seconds/extraction."""
    tokenizer, size = setup.tokenizer, config.batch_size
    mix, mix_ids = corpus_sample(config, tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        setup.bert.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        _, teacher = encoders.load(folder, encoders.EncodeOptions(size, 512, show_progress=False))

    extract = race({"bucketed": in_dtype(lambda: teacher.encode(mix), "fp32"),
                    "naive": in_dtype(lambda: naive_pipeline(tokenizer, teacher.model, mix, size, truncation=True,
                                                             max_length=512), "fp32")},
                   config.repeats, "extraction")
    ours, theirs = statistics.median(extract["bucketed"]), statistics.median(extract["naive"])
    rows = [row("extraction fp32: length-bucketed vs naive batches", "texts/s", len(mix) / ours,
                len(mix) / theirs, theirs / ours, (">=", 1.5))]
    return rows, {"corpus_sample": {"count": len(mix), "real_tokens": sum(map(len, mix_ids)),
                                    "longest": max(map(len, mix_ids))},
                  "seconds": {"extraction": extract}}
