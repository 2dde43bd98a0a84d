"""The card engine every pipeline's card library (tools/<pipeline>/card.py) builds on: Overview (what a model is for
and how it compares, the card's opening and its README rows), render (a card.md template filled with values),
front_matter (the YAML metadata), the paragraphs every card with remote code shares, and Records (an export run's
records, read by name). tools/cards.py renders the cards with it; it imports no pipeline."""

from dataclasses import dataclass
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCardData

from tools import runs

LANGUAGE, LICENCE = "en", "apache-2.0"  # every card's


@dataclass

class Overview:
    """What a model is for and how it compares with what a user would pick instead, from its run records: the short
    list and comparison table its card opens with (sentence-transformers' card template does the same), and its rows
    in the project README's tables (readme_sections)."""
    model: str  # the Hub folder
    job: str  # what to use it for, one line
    reads: str  # how many tokens of a text it reads, as trained
    width: int  # output dimension
    similarity: str  # how to compare two embeddings
    alternative: str  # what a user would pick instead, measured in the same harness
    results: list  # [(measure, on, this model's value, the alternative's value)], the headline first

    def markdown(self):
        """The card's opening (its template's `{{ overview.markdown() }}`): the short list, then this model beside
        the alternative on each measure."""
        lines = [f"- **Job:** {self.job}", f"- **Maximum sequence length:** {self.reads}",
                 f"- **Output dimensionality:** {self.width}, L2-normalised",
                 f"- **Similarity function:** {self.similarity}", f"- **Language:** {LANGUAGE}",
                 f"- **Licence:** {LICENCE}", "",
                 f"| measure | on | this model | {self.alternative} (what a user might pick instead) |",
                 "|---|---|---|---|"]
        lines += [f"| {measure} | {on} | **{value:.4f}** | {theirs:.4f} |"
                  for measure, on, value, theirs in self.results]
        return "\n".join(lines)


def render(template, block=None, **values):
    """A card's text from its Markdown template (tools/<pipeline>/card.md, Jinja syntax) and the values its
    card_context computed from the run records: every {{ name }} must be given (a missing value is an error, not a
    blank), and the rest of the template is kept byte for byte. block: render only that {% block %} of it."""
    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    card = environment.from_string(Path(template).read_text())
    if block is None:
        return card.render(**values)
    return "".join(card.blocks[block](card.new_context(values)))


def front_matter(*, library_name, pipeline_tag, tags, datasets, model_name, results, base_model=None):
    """The card's YAML metadata (huggingface_hub's ModelCardData): licence, library, pipeline tag, tags, base model,
    datasets, and a model-index of the measured results. results: [{"task_type", "dataset_type", "dataset_name",
    "metric_type", "metric_name", "metric_value", optional "dataset_split"}, ...]."""
    data = ModelCardData(language=LANGUAGE, license=LICENCE, library_name=library_name, pipeline_tag=pipeline_tag,
                         tags=tags, base_model=base_model, datasets=datasets, model_name=model_name,
                         eval_results=[EvalResult(**result) for result in results])
    return f"---\n{data.to_yaml()}\n---\n"


def embedding_space_paragraph(export, accessor):
    """The card's note on the embedding-space id (shared_modeling/identity.py), read from the export record; an export
    that hashed the config fields with the weights (identity.embedding_space's config) says so in the record, and
    records written before that field existed hashed the weights alone."""
    covers_config = export.get("embedding_space_covers_config", False)
    hashed = "these weights and of the config fields that run them" if covers_config else "these weights"
    return (f"**Embedding space: `{export['embedding_space']}`** (`{accessor}`), a hash of {hashed}. Store it with "
            "any index built from these embeddings and query that index only with a model that reports the same id: "
            "two trainings of the same code give unrelated spaces.")


def inputs_and_threads_paragraph(extra_state=""):
    """The card's note on what `encode` refuses and what may run in parallel (shared_modeling/checks.py, the same for
    every model with remote code); extra_state names further calls that change the model for every thread."""
    return ("**Refused, never embedded silently.** `encode` takes a str or a list (or tuple) of str: `None`, a dict, a "
            "generator, an array or a non-string item raises `TypeError` naming it, and so does a `batch_size` "
            "that is neither an int nor None (the model's default). A text with no content (empty, blank, "
            "zero-width or control characters only), one the tokenizer reduces to no token (a combining accent "
            "alone, U+FFFD, a variation selector, private-use characters) or one with a lone surrogate raises "
            "`ValueError` naming it; "
            "emoji are not refused: the tokenizer makes each one the unknown token `[UNK]`, so emoji-only texts "
            "embed alike. Loading refuses weights with NaN or infinite "
            "values, and the first `encode` a tokenizer whose vocabulary is not the model's (a folder missing "
            "tokenizer.json); an embedding that comes out non-finite raises `RuntimeError`.\n\n"
            "**Threads.** `encode` and `forward` may run from several threads at once on one model in eval mode "
            "(the mode `from_pretrained` leaves it in): they change nothing in it (in train mode `encode` switches "
            "it to eval for the call, so do not encode while another thread trains). Loading, `.to()`, training"
            f"{extra_state} change the model for every thread: do them before serving, or from one thread.")


class Records:
    """The run records one card is built from, read by name: the export run's own files (`own`) and those of the run
    folders its config.json names (`read("train", "config.json")`: the run given to the export as --train), each
    path relative to `root` (the repository, or a records folder that mirrors it)."""

    def __init__(self, export_folder, root=runs.ROOT):
        self.folder, self.root = Path(export_folder), Path(root)
        self.config = runs.read_json(self.folder / "config.json")

    def own(self, name="metrics.json"):
        return runs.read_json(self.folder / name)

    def run(self, option):
        """The run folder the export's config names as `option`."""
        return self.root / self.config[option]

    def read(self, option, name="metrics.json"):
        """A JSON file of the run folder the export's config names as `option`; None where it names none (an
        optional run, or a record written before the option existed)."""
        return None if self.config.get(option) is None else runs.read_json(self.run(option) / name)

    def follow(self, option, key, name="metrics.json"):
        """A JSON file of the run folder that the run named as `option` names as its own `key` (its config.json's);
        None where the export's config names no `option` run."""
        config = self.read(option, "config.json")
        return None if config is None else runs.read_json(self.root / config[key] / name)
