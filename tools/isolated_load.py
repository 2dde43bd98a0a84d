"""Load a model folder the ways its users will, in a process where this project is not importable, and embed texts.

Every export checks its folder with it, and so do `make demo`'s last step and tools/publish.py: each runs it
through tools/runs.py's load_isolated, as `python -I tools/isolated_load.py` (isolated mode: no PYTHONPATH, not even
this script's own folder on the path) from a temporary working directory, so only the installed packages and the
folder are used. It imports nothing from the project. It only loads and embeds; the callers compare.

The request (JSON on stdin):
    {"folder": "<path>", "texts": ["...", ...],
     "auto_model": true,             # AutoModel.from_pretrained(folder, trust_remote_code=True) and its encode()
     "amoe": true,                   # then attach_amoe(): the shipped collective (where none ships: attach_amoe()'s
                                     # error, and the first solo arm attached alone), encode with it and amoe_off()
     "sentence_transformers": true,  # SentenceTransformer(folder) and its encode()
     "manual_mean_pool": true,       # AutoTokenizer + AutoModel (stock code), a masked mean pool, L2-normalised
     "gguf": true}                   # every *-f16.gguf in the folder through llama.cpp (llama-cpp-python)
Each key left out (or false) is not loaded. The answer (the last stdout line, JSON) has one entry per load asked:
    {"auto_model": {"parameters", "trainable" (where the model counts them), "embedding_space" (None where the model
                    has none), "embeddings"},
     "amoe": {"roster", "embeddings", "off" (every arm off), "embedding_space", "no_collective" (the error, or None)},
     "sentence_transformers": {"parameters", "dimension", "embedding_space", "embeddings"},
     "manual_mean_pool": {"embeddings"}, "gguf": {"<file name>": embeddings}}
Embeddings are lists of float rows, exact (a float32 is a Python float without rounding).

Usage:
    echo '{"folder": "glyph-embedder-v2", "texts": ["a ⇒ b"], "sentence_transformers": true}' | \\
        python -I tools/isolated_load.py
"""

import importlib.util
import json
import sys
from pathlib import Path


def rows(embeddings):
    return [[float(value) for value in row] for row in embeddings]


def space_of(model):
    """A model's embedding-space id: its property (remote code), or its config's field (a stock model, whose export
    writes it there), or None."""
    return getattr(model, "embedding_space", None) or getattr(model.config, "embedding_space", None)


def auto_model(folder, texts):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    answer = {"parameters": sum(p.numel() for p in model.parameters()), "embedding_space": space_of(model),
              "embeddings": rows(model.encode(texts, show_progress_bar=False))}
    if hasattr(model, "trainable_parameters"):
        answer["trainable"] = sum(p.numel() for p in model.trainable_parameters())
    return model, answer


def amoe(model, folder, texts):
    no_collective = None
    try:
        model.attach_amoe()
    except FileNotFoundError as error:  # no collective ships: the error names the solo arms; one attaches alone
        no_collective = str(error)
        model.attach_amoe([min(path.stem for path in (Path(folder) / "amoe" / "routing").glob("*.safetensors"))])
    answer = {"embeddings": rows(model.encode(texts, show_progress_bar=False)), "embedding_space": space_of(model),
              "no_collective": no_collective}
    with model.amoe_off():
        answer["off"] = rows(model.encode(texts, show_progress_bar=False))
    answer["roster"] = model.detach_amoe()["dispatch"].roster
    return answer


def sentence_transformers(folder, texts):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, trust_remote_code=True, local_files_only=True, device="cpu")
    return {"parameters": sum(p.numel() for p in model.parameters()), "dimension": model.get_embedding_dimension(),
            "embedding_space": space_of(model[0].auto_model),
            "embeddings": rows(model.encode(texts, show_progress_bar=False))}


def manual_mean_pool(folder, texts):
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state  # (B, T, D)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return {"embeddings": rows(torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1))}


def gguf(folder, texts):
    from llama_cpp import Llama

    return {path.name: [Llama(model_path=str(path), embedding=True, verbose=False).embed(text) for text in texts]
            for path in sorted(Path(folder).glob("*-f16.gguf"))}


def main(argv=None):
    if importlib.util.find_spec("shared_modeling") is not None:
        raise SystemExit("the project is importable here: run this script with python -I from another folder")
    request = json.loads(sys.stdin.read())
    folder, texts, answer = request["folder"], request["texts"], {}
    if request.get("auto_model"):
        model, answer["auto_model"] = auto_model(folder, texts)
        if request.get("amoe"):
            answer["amoe"] = amoe(model, folder, texts)
    for name, load in (("sentence_transformers", sentence_transformers), ("manual_mean_pool", manual_mean_pool),
                       ("gguf", gguf)):
        if request.get(name):
            answer[name] = load(folder, texts)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
