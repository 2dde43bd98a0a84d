"""Map every teacher into the reference teacher's frame (whitened Procrustes) and write the consensus targets.

Usage:
    python -m tools.captionbert.align --extract runs/demo/extract --out runs/demo/align
    python -m tools.captionbert.align --extract runs/x --out runs/y --fit-rows 200000 --holdout-rows 20000 \
        --shrinkage 0.05

Per teacher, on a sample of rows (float64):
    1. centre: x - mu_x, y - mu_y                     (x: teacher row, y: reference row of the same text)
    2. whiten with shrinkage ZCA: W = ((1 - a) C + a tr(C)/d I)^(-1/2), C the sample covariance
    3. orthogonal Procrustes: R = U V^T from the SVD of Xw^T Yw; semi-orthogonal (R R^T = I) when the teacher is
       narrower than the reference
    4. back into the reference's coordinates: f(x) = (x - mu_x) W_x R W_y^-1 + mu_y = x A + b
The sample is stratified by chunk (shard): every chunk gives the same fraction of its rows, split at random into
disjoint fit and held-out rows. The report is out of sample: mean row cosine between f(x) and the reference on
held-out rows (and before alignment, where widths agree), the in-sample cosine beside it, and the canonical
correlations (singular values of the whitened cross-covariance) that say how many directions a teacher shares with
the reference.

Consensus, per chunk: the L2-normalised mean of the L2-normalised aligned teachers. A chunk that lacks any teacher's
shard is dropped and listed, never filled from the others. Writes into --out: maps.safetensors (A_<i>, b_<i> per
teacher), report.json, consensus/shard-NNNNN.safetensors (float16, like the extraction) and manifest.json (the
kept chunks and where their texts are), which tools/captionbert/train.py reads.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from tqdm.auto import tqdm

from shared_modeling.geometry import erank, self_cos
from tools import runs
from tools.captionbert.data import write_shard


@dataclass
class Config:
    extract: Path = field(metadata={"help": "extraction folder of tools/captionbert/extract.py (manifest.json)"})
    out: Path = field(metadata={"help": "alignment folder to write"})
    reference: str | None = field(default=None, metadata={
        "help": "name of the teacher whose frame the consensus lives in (default: the extraction's first)"})
    fit_rows: int = 20000  # rows the maps are fitted on (stratified by chunk)
    holdout_rows: int = 4000  # disjoint rows the report is measured on
    shrinkage: float = 0.1  # a in (1 - a) C + a tr(C)/d I, between 0 and 1
    correlation_threshold: float = 0.5  # a canonical correlation above this counts as a shared direction
    seed: int = 0  # sampling seed


# ---- the maths, on float64 numpy arrays ----------------------------------------------------------------------------

def shrunk_whitener(centred, shrinkage):
    """(W, W^-1) of shrinkage ZCA whitening for centred rows (n, d)."""
    covariance = centred.T @ centred / (centred.shape[0] - 1)
    dim = covariance.shape[0]
    covariance = (1 - shrinkage) * covariance + shrinkage * np.trace(covariance) / dim * np.eye(dim)
    values, vectors = np.linalg.eigh(covariance)
    values = np.clip(values, 1e-12, None)
    return (vectors / np.sqrt(values)) @ vectors.T, (vectors * np.sqrt(values)) @ vectors.T


def fit_whitened_procrustes(teacher, reference, shrinkage):
    """Affine map x -> x A + b from teacher rows (n, d_t) into the reference frame (n, d_r), and the canonical
    correlations (min(d_t, d_r),) of the whitened pair, largest first."""
    if teacher.shape[1] > reference.shape[1]:
        raise ValueError(f"a teacher ({teacher.shape[1]}-d) wider than the reference ({reference.shape[1]}-d) "
                         "cannot map into it without losing directions; pick the widest teacher as reference")
    mean_t, mean_r = teacher.mean(axis=0), reference.mean(axis=0)
    white_t, _ = shrunk_whitener(teacher - mean_t, shrinkage)
    white_r, unwhite_r = shrunk_whitener(reference - mean_r, shrinkage)
    cross = ((teacher - mean_t) @ white_t).T @ ((reference - mean_r) @ white_r)  # (d_t, d_r)
    u, _, vt = np.linalg.svd(cross, full_matrices=False)
    rotation = u @ vt  # (d_t, d_r), R R^T = I
    matrix = white_t @ rotation @ unwhite_r
    return matrix, mean_r - mean_t @ matrix, canonical_correlations(teacher - mean_t, reference - mean_r)


def canonical_correlations(first, second):
    """Canonical correlations of two centred row sets, largest first: the singular values of the cross-covariance
    after exact whitening (a 1e-9 ridge only for numerical safety; the alignment's shrinkage would distort them)."""
    white_first, _ = shrunk_whitener(first, 1e-9)
    white_second, _ = shrunk_whitener(second, 1e-9)
    cross = (first @ white_first).T @ (second @ white_second) / (first.shape[0] - 1)
    return np.clip(np.linalg.svd(cross, compute_uv=False), 0, 1)


def row_cosines(first, second):
    first = first / np.linalg.norm(first, axis=1, keepdims=True)
    second = second / np.linalg.norm(second, axis=1, keepdims=True)
    return (first * second).sum(axis=1)


def consensus(aligned):
    """L2-normalised centroid of the L2-normalised aligned teachers: list of (n, d) -> (n, d)."""
    rows = sum(a / np.linalg.norm(a, axis=1, keepdims=True) for a in aligned) / len(aligned)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# ---- the run -------------------------------------------------------------------------------------------------------

def stratified_rows(chunk_sizes, fit_rows, holdout_rows, seed):
    """Per chunk, (fit row indices, held-out row indices) inside the chunk: the same fraction of every chunk."""
    total = sum(chunk_sizes.values())
    if fit_rows + holdout_rows > total:
        raise SystemExit(f"--fit-rows + --holdout-rows = {fit_rows + holdout_rows} exceeds the {total} usable rows")
    rng = np.random.default_rng(seed)
    picks = {}
    for chunk, size in chunk_sizes.items():
        order = rng.permutation(size)
        n_fit, n_held = round(size * fit_rows / total), round(size * holdout_rows / total)
        picks[chunk] = (np.sort(order[:n_fit]), np.sort(order[n_fit:n_fit + n_held]))
    return picks


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__)
    if not 0 <= config.shrinkage <= 1:
        raise SystemExit(f"--shrinkage must lie in [0, 1], got {config.shrinkage}")
    if config.fit_rows < 2 or config.holdout_rows < 2:
        raise SystemExit("--fit-rows and --holdout-rows must be at least 2")
    if not (config.extract / "manifest.json").exists():
        raise SystemExit(f"{config.extract / 'manifest.json'} not found: run tools.captionbert.extract to the end "
                         "first")
    return config


def ordered_teachers(manifest, reference):
    """The extracted teachers, the reference first and the others in extraction order; SystemExit if the reference
    is not one of them."""
    teachers = sorted(manifest["teachers"], key=lambda t: t["name"] != reference)
    if reference not in [t["name"] for t in teachers]:
        raise SystemExit(f"reference {reference!r} is not an extracted teacher; have {[t['name'] for t in teachers]}")
    return teachers


def complete_chunks(config, manifest, teachers):
    """(kept, dropped, {kept chunk: its rows}): the chunks every teacher has; the others are dropped, never filled."""
    shard_rows, rows = manifest["shard_rows"], manifest["corpus"]["rows"]
    chunk_count = len(teachers[0]["shards"])
    present = {c: all((config.extract / t["shards"][c]).exists() for t in teachers) for c in range(chunk_count)}
    kept = [c for c in range(chunk_count) if present[c]]
    if not kept:
        raise SystemExit("no chunk has every teacher's shard")
    return kept, [c for c in range(chunk_count) if not present[c]], {
        c: min(shard_rows, rows - c * shard_rows) for c in kept}


def load_chunk(config, teacher, chunk):
    return load_file(str(config.extract / teacher["shards"][chunk]))["embeddings"].astype(np.float64)


def sample_rows(config, teachers, picks):
    """({teacher: fit rows}, {teacher: held-out rows}): the stratified sample `picks` of every kept chunk."""
    fit, held = {t["name"]: [] for t in teachers}, {t["name"]: [] for t in teachers}
    for chunk in tqdm(list(picks), desc="sample", unit="chunk"):
        for teacher in teachers:
            embeddings = load_chunk(config, teacher, chunk)
            fit[teacher["name"]].append(embeddings[picks[chunk][0]])
            held[teacher["name"]].append(embeddings[picks[chunk][1]])
    return ({name: np.concatenate(parts) for name, parts in fit.items()},
            {name: np.concatenate(parts) for name, parts in held.items()})


def fit_maps(config, teachers, fit, held):
    """({teacher: (matrix, bias)} onto the reference (teachers[0]), {teacher: its report row}), printing each one."""
    reference, reference_dim = teachers[0]["name"], teachers[0]["dim"]
    maps, report = {}, {}
    mean_reference = fit[reference].mean(axis=0)
    for index, teacher in enumerate(teachers):
        name, dim = teacher["name"], teacher["dim"]
        if name == reference:
            matrix, bias, correlations = np.eye(dim), np.zeros(dim), np.ones(dim)
        else:
            matrix, bias, correlations = fit_whitened_procrustes(fit[name], fit[reference], config.shrinkage)
        maps[name] = (matrix, bias)
        before = row_cosines(held[name], held[reference]).mean() if dim == reference_dim else None
        report[name] = {
            "dim": dim, "map": f"A_{index}, b_{index}",
            "holdout_cosine_before": None if before is None else float(before),
            "holdout_cosine_after": float(row_cosines(held[name] @ matrix + bias, held[reference]).mean()),
            # The same with the reference mean taken off both sides: agreement beyond the shared mean direction.
            "holdout_centred_cosine_after": float(row_cosines(held[name] @ matrix + bias - mean_reference,
                                                              held[reference] - mean_reference).mean()),
            "fit_cosine_after": float(row_cosines(fit[name] @ matrix + bias, fit[reference]).mean()),
            "canonical_correlations_top10": [round(float(c), 4) for c in correlations[:10]],
            "shared_directions": int((correlations > config.correlation_threshold).sum()),
        }
        print(f"{name}: held-out cosine to {reference} before "
              f"{'n/a (widths differ)' if before is None else f'{before:.3f}'}, "
              f"after {report[name]['holdout_cosine_after']:.3f}; "
              f"{report[name]['shared_directions']} canonical correlations > {config.correlation_threshold}")
    return maps, report


def write_consensus(config, teachers, maps, sizes, shard_rows):
    """Every kept chunk's consensus shard under out/consensus/; their manifest entries."""
    files = []
    for chunk in tqdm(list(sizes), desc="consensus", unit="chunk"):
        aligned = [load_chunk(config, t, chunk) @ maps[t["name"]][0] + maps[t["name"]][1] for t in teachers]
        path = config.out / "consensus" / f"shard-{chunk:05d}.safetensors"
        write_shard(path, consensus(aligned))
        files.append({"chunk": chunk, "first_row": chunk * shard_rows, "rows": sizes[chunk],
                      "file": str(path.relative_to(config.out))})
    return files


def main(argv=None):
    config = parse_config(argv)
    manifest = runs.read_json(config.extract / "manifest.json")
    reference = config.reference or manifest["reference"]
    teachers = ordered_teachers(manifest, reference)
    names = [t["name"] for t in teachers]
    kept, dropped, sizes = complete_chunks(config, manifest, teachers)
    picks = stratified_rows(sizes, config.fit_rows, config.holdout_rows, config.seed)

    with runs.RunRecord(config.out, config, "captionbert.align"):
        fit, held = sample_rows(config, teachers, picks)
        maps, report = fit_maps(config, teachers, fit, held)
        save_file({key: value.astype(np.float32) for index, teacher in enumerate(teachers)
                   for key, value in zip((f"A_{index}", f"b_{index}"), maps[teacher["name"]])},
                  str(config.out / "maps.safetensors"), metadata={"teachers": ",".join(names)})
        held_consensus = torch.from_numpy(consensus([held[t["name"]] @ maps[t["name"]][0] + maps[t["name"]][1]
                                                     for t in teachers]))
        consensus_files = write_consensus(config, teachers, maps, sizes, manifest["shard_rows"])
        others = [name for name in names if name != reference]
        summary = {
            "reference": reference, "teachers": report, "shrinkage": config.shrinkage,
            "fit_rows": int(len(fit[reference])), "holdout_rows": int(len(held[reference])),
            "chunks_kept": len(kept), "chunks_dropped": dropped,
            "consensus_rows": int(sum(sizes.values())),
            "consensus_erank_holdout": erank(held_consensus), "consensus_self_cos_holdout": self_cos(held_consensus),
            "shared_directions_all_teachers": min((report[n]["shared_directions"] for n in others), default=None),
        }
        runs.write_json(config.out / "report.json", summary)
        runs.write_json(config.out / "manifest.json", {
            "extract": str(config.extract.resolve()), "texts": str((config.extract / "texts.jsonl").resolve()),
            "corpus_sha256": manifest["corpus"]["sha256"], "dim": teachers[0]["dim"],
            "reference": reference, "shards": consensus_files})
    print(f"consensus: {summary['consensus_rows']} rows in {len(kept)} chunks ({len(dropped)} dropped), "
          f"erank {summary['consensus_erank_holdout']:.1f} on held-out rows; wrote {config.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
