"""The bundle's three pipelines, listed once: what each builds and where. cards, publish, vendor, demo and bench read
this list; nothing else names the models.

A pipeline's tools live in tools/<name>/ with the same file names in each (train, evaluate, export, ...), run as
`python -m tools.<name>.<step>`; its Hub folder is <folder>/ at the repository root, and its export step writes
runs/<budget>/<name>/export, whose records the card is generated from.
"""

from dataclasses import dataclass

from tools import runs


@dataclass(frozen=True)
class Pipeline:
    name: str  # its package under tools/ and its run folders' prefix under runs/<budget>/
    folder: str  # the Hub folder (a directory at the repository root), also the Hub repo's name
    vendored: tuple  # the shared_modeling modules its folder vendors as shared_<module>.py (with their imports)
    weights: tuple  # glob patterns (paths in the folder) that must each match a published file: what make demo builds
    loader: str  # how a user loads the folder: "AutoModel" (remote code, .encode) or "SentenceTransformer"

    @property
    def path(self):
        return runs.ROOT / self.folder

    @property
    def export(self):
        """Its export step's run folder below a budget's root: the records its card comes from."""
        return f"{self.name}/export"


PIPELINES = (
    Pipeline("captionbert", "captionbert-8192-v2",
             ("layers", "pooling", "identity", "checks", "encoding", "amoe_mixin", "amoe"),
             ("model.safetensors", "amoe/*/dispatch.safetensors", "amoe/arms/*.safetensors"), "AutoModel"),
    Pipeline("glyph", "glyph-embedder-v2", (),
             ("model.safetensors", "glyph-embedder-v2-f32.gguf", "glyph-embedder-v2-f16.gguf"), "SentenceTransformer"),
    Pipeline("geolip", "geolip-clip-ctx576", ("pooling", "segments", "identity", "checks", "encoding"),
             ("model.safetensors",), "AutoModel"),
)
BY_NAME = {pipeline.name: pipeline for pipeline in PIPELINES}
BY_FOLDER = {pipeline.folder: pipeline for pipeline in PIPELINES}
CAPTIONBERT, GLYPH, GEOLIP = PIPELINES


def of_folder(folder):
    """The pipeline whose Hub folder has this folder's name, or SystemExit naming the known ones."""
    pipeline = BY_FOLDER.get(folder.name)
    if pipeline is None:
        raise SystemExit(f"{folder}: not one of the bundle's Hub folders ({', '.join(BY_FOLDER)})")
    return pipeline

# The module names of the steps before tools/ was grouped by pipeline. Run records written before then name these
# tools, and tools/demo.py's step fingerprints keep hashing these names, so that runs finished before the regroup
# stay finished (a fingerprint's meaning is the step's command, not where its module lives) and their cards
# regenerate.
FORMER_NAMES = {
    "captionbert.extract": "extract_teachers", "captionbert.align": "align_teachers",
    "captionbert.train": "distill_captionbert", "captionbert.evaluate": "evaluate",
    "captionbert.long_inputs": "evaluate_long_inputs", "captionbert.export": "export_captionbert",
    "captionbert.tokenizer": "make_tokenizer", "captionbert.teacher_init": "teacher_init",
    "captionbert.amoe.pairs": "pairs", "captionbert.amoe.silver": "silver_pairs",
    "captionbert.amoe.train": "train_amoe",
    "glyph.corpus": "build_glyph_corpus", "glyph.train": "train_glyph", "glyph.evaluate": "evaluate_glyph",
    "glyph.gguf": "export_gguf", "glyph.export": "export_glyph",
    "geolip.train": "train_geolip", "geolip.evaluate": "evaluate_geolip", "geolip.export": "export_geolip",
}


def module_of_record(tool):
    """The module (under tools/) a run record's "tool" names, whether written before the regroup or after."""
    return {former: module for module, former in FORMER_NAMES.items()}.get(tool, tool)
