"""The bundle's three pipelines, listed once: what each builds and where. cards, publish, vendor, demo and bench read
this list; nothing else names the models.

A pipeline's tools live in tools/<name>/ with the same file names in each (train, evaluate, export, ...), run as
`python -m tools.<name>.<step>`; its Hub folder is <folder>/ at the repository root. Its export step writes
runs/<budget>/<name>/export, whose records the card is generated from, and builds the model's folder inside it
(runs/<budget>/<name>/export/<folder>/), starting from the Hub folder's own files; tools/release.py copies that
build into the Hub folder.
"""

import fnmatch
import shutil
from dataclasses import dataclass
from pathlib import Path

from tools import runs


@dataclass(frozen=True)
class Pipeline:
    name: str  # its package under tools/ and its run folders' prefix under runs/<budget>/
    folder: str  # the Hub folder (a directory at the repository root), also the Hub repo's name
    vendored: tuple  # the shared_modeling modules its folder vendors as shared_<module>.py (with their imports)
    weights: tuple  # glob patterns (paths in the folder) that must each match a published file: what make demo builds
    loader: str  # how a user loads the folder: "AutoModel" (remote code, .encode) or "SentenceTransformer"
    built: tuple  # fnmatch patterns (paths in the folder) of what its export writes besides `weights`: the rest of the
    #               Hub folder (code, config, tokenizer) is the folder's own, the files a build starts from
    files: tuple  # every path its Hub repo holds but the vendored shared_*.py and the AMOE library (which
    #               tools/publish.manifest adds): the folder's own code, config and tokenizer, and what export writes
    layouts: tuple = ()  # where the weights files changed: each layout's files, the current one last; a folder holds
    #                      one whole (files_of), until the next release replaces a former one

    def files_of(self, folder):
        """`files` and the weights layout the folder holds: the first held whole, else the current one."""
        present = [layout for layout in self.layouts if all((Path(folder) / name).is_file() for name in layout)]
        return (*self.files, *(present[0] if present else self.layouts[-1] if self.layouts else ()))

    @property
    def path(self):
        return runs.ROOT / self.folder

    @property
    def export(self):
        """Its export step's run folder below a budget's root: the records its card comes from."""
        return f"{self.name}/export"

    @property
    def card(self):
        """Its card library (tools/<name>/card.py, beside the card.md template it fills): CARD, the template's path,
        and card_context(records), its values; tools/cards.py imports it by this name."""
        return f"tools.{self.name}.card"

    def is_built(self, relative):
        """Whether this path in the folder (a str with "/") is written by an export, not the folder's own."""
        return any(fnmatch.fnmatch(relative, pattern) for pattern in (*self.weights, *self.built))

    def weights_files(self, folder):
        """The files of a built or shipped folder that `weights` match: its binaries, as relative paths ("/")."""
        names = (path.relative_to(folder).as_posix() for path in Path(folder).rglob("*") if path.is_file())
        return sorted(name for name in names if any(fnmatch.fnmatch(name, pattern) for pattern in self.weights))

    def weights_sha256(self, folder):
        """{relative path: sha256 of its bytes} of a folder's binaries: what an export records of the files it built
        (after checking they are the ones its evaluation scored), so a shipped file can be checked against it."""
        return {relative: runs.file_sha256(Path(folder) / relative) for relative in self.weights_files(folder)}

    def start_build(self, to, source=None):
        """Make `to` a copy of the own files (everything an export does not write) of `source`, by default the Hub
        folder, removing what was there: the folder an export then fills."""
        source = Path(source or self.path)
        if not source.is_dir():
            raise SystemExit(f"{source} is not a folder: a build starts from a {self.folder} folder's own files")
        if Path(to).resolve() in (self.path, source.resolve()):
            raise SystemExit(f"{to} is a Hub folder: exports build beside it, `make release` copies a build in")
        if Path(to).exists():
            shutil.rmtree(to)
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source).as_posix()
            if path.is_file() and not self.is_built(relative) and "__pycache__" not in path.parts:
                (Path(to) / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, Path(to) / relative)


SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
PIPELINES = (
    Pipeline("captionbert", "captionbert-8192-v2",
             ("layers", "pooling", "identity", "checks", "encoding", "amoe_mixin", "amoe"),
             ("model.safetensors", "amoe/arms/*.safetensors", "amoe/*/*.safetensors"), "AutoModel",
             ("README.md", "loss_curve.png", "amoe/*"),
             ("config.json", "configuration_captionbert.py", "modeling_captionbert.py",
              "sentence_transformers_module.py", "tokenizer.json", "tokenizer_config.json",
              *SENTENCE_TRANSFORMERS_FILES, "model.safetensors", "README.md", "loss_curve.png")),
    Pipeline("glyph", "glyph-embedder-v2", (),
             ("model.safetensors", "glyph-embedder-v2-f16.gguf"), "SentenceTransformer",
             ("README.md", "training_curve.png", "*.gguf"),
             ("config.json", "tokenizer.json", "tokenizer_config.json", *SENTENCE_TRANSFORMERS_FILES,
              "1_Pooling/config.json", "2_Normalize/config.json", "model.safetensors", "glyph-embedder-v2-f16.gguf",
              "README.md", "training_curve.png")),
    # geolip's weights: base.safetensors (the frozen base, the same bytes in every build on it) and memory.safetensors
    # with their index (tools/geolip/data.store_base_apart); before, one model.safetensors, which the shipped folder
    # holds until its next release
    Pipeline("geolip", "geolip-clip-ctx576", ("pooling", "segments", "identity", "checks", "encoding"),
             ("*.safetensors",), "AutoModel", ("README.md", "training_curve.png", "model.safetensors.index.json"),
             ("config.json", "configuration_geolip.py", "modeling_geolip.py", "tokenizer.json", "tokenizer_config.json",
              "README.md", "training_curve.png"),
             (("model.safetensors",), ("base.safetensors", "memory.safetensors", "model.safetensors.index.json"))),
)
BY_NAME = {pipeline.name: pipeline for pipeline in PIPELINES}
BY_FOLDER = {pipeline.folder: pipeline for pipeline in PIPELINES}
CAPTIONBERT, GLYPH, GEOLIP = PIPELINES
