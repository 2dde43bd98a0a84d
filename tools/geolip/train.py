"""Train geolip-clip-ctx576's geometric memory by distillation from a frozen long-context teacher; the base stays
frozen too, so only the memory system and the teacher projector learn.

Usage:
    python -m tools.geolip.train --out runs/demo/geolip/train    # cpu preset: all-MiniLM-L6-v2 base, all-mpnet teacher
    python -m tools.geolip.train --preset paper --texts cc12m-llava.txt --out runs/paper/geolip/train
                                                # CLIP-L base, ModernBERT-large teacher (needs the Hub and a GPU)
    python -m tools.geolip.train --out O --steps 20 --batch-size 8  # preset values overridden
Rerunning the same command resumes from the last checkpoint (the loop in tools/training.py).

Data: the long ImageInWords descriptions, split by image, so that the `validation_texts` held out (the m_acc
gallery) share no image with training; plus Flickr8k train captions (short texts, where one segment is all there
is). `--texts FILE` (one text per line) replaces the long descriptions, as the paper preset's CC12M captions do.
Teacher: a frozen encoder reading each whole text (tools/encoders.py spec; its own token limit), in bf16 autocast
where the hardware computes bf16 (--teacher-precision auto; float32 elsewhere); its embeddings are computed once and
cached (in the run folder, or a --teacher-cache file that runs on the same texts share).
Model: GeolipModel (geolip-clip-ctx576/) around the frozen base given by --base (a folder or Hub id: a CLIP
checkpoint gives its text tower): the base's embedding of the text's window (--base-window tokens, special tokens
included: CLIP's 77, in both presets) plus what the memory, reading segments of 18 content tokens every 14 (at most
32) of the whole text, adds through a zero-initialised projection; untrained, it is exactly the base on its window
(--start blend: exactly the best fixed blend of the window and the segments' mean, its weight fitted on the
projector's training sample as tools/geolip/evaluate.py fits the card's blend row).
Loss: InfoNCE(projector(student) -> teacher, in-batch negatives) x 1.0 + the SVD-Procrustes residual of the
student batch against the teacher batch x 0.3 + (pentachoron CV of each text's segment anchors - the teacher's CV)^2
x 0.05 over texts with at least 5 segments (+ 1 - cosine(projected student, teacher) x --cosine-weight, 0 in the
published loss). With --hard-negative-groups, each batch also holds --groups-per-batch (1) spliced-tails groups of
training texts: --splice-k texts that share their first --base-window tokens (one text's prefix, then the tails of
others) and differ only after them, so only what the memory reads past the window tells them apart. The teacher's
CV: its embeddings of the segment texts of a sample of training texts, each text's CV averaged. The projector
starts as the orthogonal Procrustes map of the untrained student onto the teacher on a training sample (the cosine
before and after is recorded).
m_acc: top-1 retrieval of each validation text's teacher embedding, among the whole gallery's, by its projected
student embedding.
The card's rows (the model against its baselines on the held-out gallery and on spliced-tails groups) are
tools/geolip/evaluate.py's; this run's teacher cache holds the embeddings it needs (training, held-out and spliced
texts).
Training: AdamW with linear warm-up and decay, bf16 autocast on the forward pass where the hardware computes bf16
(--precision auto; float32 elsewhere; the losses always in float32).
The out folder gets config.json, run.json, checkpoint-memory.pt, teacher.npy (the cache of the training, held-out
and spliced texts' teacher embeddings, unless --teacher-cache names a shared one), tensorboard/, metrics.json
(history, init, CV target, the minutes each phase took, and the validation m_acc of the weights as stored) and
training_curve.png, and final/, the model folder (weights, tokenizer, remote code): the frozen base's weights in
base.safetensors, byte for byte the same for every run on the same base, the trained ones in memory.safetensors
(tools/geolip/data.store_base_apart). --save-dtype float16 (both
presets) stores every weight, the frozen base's too, in half the bytes; the model loads and computes in float32.
"""

import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoTokenizer

from shared_modeling.geometry import pentachoron_cv
from shared_modeling.losses import info_nce_with_hard_negatives, pentachoron_cv_loss, procrustes_residual
from shared_modeling.segments import segment_spans
from tools import encoders, runs
from tools.geolip.data import (PRESETS, Config, base_folder, build_model, split_texts, spliced_tails,
                               store_base_apart, teacher_embeddings, teacher_encode)
from tools.geolip.metrics import fit_blend_weight, m_acc, mean_cosine, procrustes_maps, row_embeddings
from tools.plots import Panel, curve, plot_history
from tools.training import (STORAGE_DTYPES, Batches, accelerator_for, gathered, process_device, resolve_precision,
                            run_stage, save_stored)


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__, presets=PRESETS,
                               positive=("steps", "batch_size", "validation_texts", "cv_samples", "cv_target_texts",
                                         "init_texts", "splice_k", "splice_groups", "groups_per_batch",
                                         "validate_every", "checkpoint_every", "log_every"))
    if config.batch_size < 2:
        raise SystemExit("--batch-size must be at least 2 (InfoNCE needs in-batch negatives)")
    if config.splice_k < 2:
        raise SystemExit("--splice-k must be at least 2 (a group of one retrieves itself)")
    groups_size = config.splice_k * config.groups_per_batch
    if config.hard_negative_groups < 0 or (config.hard_negative_groups and config.batch_size < groups_size):
        raise SystemExit("--hard-negative-groups must be >= 0, and with groups the batch must hold "
                         f"--groups-per-batch {config.groups_per_batch} of --splice-k {config.splice_k}")
    if config.hard_negative_groups and config.groups_per_batch > config.hard_negative_groups:
        raise SystemExit(f"--groups-per-batch {config.groups_per_batch} is more than the "
                         f"{config.hard_negative_groups} hard-negative groups")
    if min(config.procrustes_weight, config.cv_weight, config.cosine_weight) < 0:
        raise SystemExit("--procrustes-weight, --cv-weight and --cosine-weight must be >= 0")
    if config.start not in ("window", "blend"):
        raise SystemExit(f"--start must be window or blend, got {config.start!r}")
    if config.save_dtype not in STORAGE_DTYPES:
        raise SystemExit(f"--save-dtype must be one of {', '.join(STORAGE_DTYPES)}, got {config.save_dtype!r}")
    config.precision = resolve_precision(config.precision, process_device())  # before the run record, which keeps
    #                                                                           what ran
    config.teacher_precision = resolve_precision(config.teacher_precision, "cpu")
    return config


# ---- the CV target ---------------------------------------------------------------------------------------------------

def cv_target(config, model, teacher, content_ids):
    """The teacher's pentachoron CV of segment texts: the first cv_target_texts training texts with >= 5 segments,
    each cut as the student cuts it, each segment's text embedded by the teacher, each text's CV averaged."""
    generator = torch.Generator().manual_seed(config.seed)
    values = []
    for ids in content_ids:
        spans = segment_spans(len(ids), config.segment_size, config.segment_stride, config.max_segments)
        if len(spans) >= 5:
            pieces = [model.tokenizer.decode(ids[start:end]) for start, end in spans]
            values.append(pentachoron_cv(torch.from_numpy(teacher_encode(config, teacher, pieces)).double(),
                                         config.cv_samples, generator).item())
        if len(values) == config.cv_target_texts:
            break
    if not values:
        raise SystemExit("no training text has 5 segments: the CV term has nothing to act on")
    return float(np.mean(values)), len(values)


# ---- the run's parts -------------------------------------------------------------------------------------------------

def start_from(config, model, texts, targets):
    """Where training starts (`texts`, `targets`: the initialisation sample): with --start blend the model's output is
    the blend of window and segment mean (its weight fitted here), and the projector is the orthogonal Procrustes map
    of that output onto the teacher (evaluate fits each baseline's map on the same sample). Returns the record."""
    init = {"texts": len(texts)}
    if config.start == "blend":  # start where the best fixed blend of window and segment mean ends
        init["blend_weight"], init["blend_cosine"] = fit_blend_weight(
            row_embeddings(model, texts, config.batch_size), targets)
        model.config.blend_weight = init["blend_weight"]
        print(f"the start: the blend of {init['blend_weight']:.2f} x window + {1 - init['blend_weight']:.2f} x "
              f"segment mean (mean cosine to the teacher after its map: {init['blend_cosine']:.3f})")
    student = row_embeddings(model, texts, config.batch_size)["memory"]
    init["cosine_before"] = mean_cosine(model.projector(student).detach(), targets)
    with torch.no_grad():
        model.projector.weight.copy_(procrustes_maps({"memory": student}, targets)["memory"].T)
    init["cosine_after"] = mean_cosine(model.projector(student).detach(), targets)
    return init


def memory_loss(config, model, batches, target_cv):
    """loss_at(step, share) of tools/training.py: `batches(step) -> (content ids, teacher rows)` of the whole step;
    InfoNCE, Procrustes and cosine over every process's rows (training.gathered), the CV term over this process's
    texts with >= 5 segments."""
    def loss_at(step, share):
        ids, teacher_rows = batches(step)
        ids, teacher_rows = share.of(ids), gathered(share.of(teacher_rows))
        with sdpa_kernel(SDPBackend.MATH):  # on a CPU, bf16 flash attention's backward is ~10x slower here
            output = model.embed(ids)
        with torch.autocast(output.pooler_output.device.type, enabled=False):  # the losses in float32
            student = gathered(output.last_hidden_state[:, 0].float())  # the whole batch's, but for the CV term
            counts = [len(segment_spans(len(row), config.segment_size, config.segment_stride, config.max_segments))
                      for row in ids]
            anchor_sets = [chunk for chunk in output.segment_anchors.float().split(counts) if len(chunk) >= 5]
            generator = torch.Generator().manual_seed(config.seed * 1_000_000 + step)  # resumes exactly
            projected = model.projector(student)
            terms = {"info_nce": info_nce_with_hard_negatives(projected, teacher_rows, None, config.temperature),
                     "procrustes": procrustes_residual(student, teacher_rows),
                     "cv": (pentachoron_cv_loss(anchor_sets, target_cv, config.cv_samples, generator)
                            if anchor_sets else student.new_zeros(()))}
            if config.cosine_weight:
                terms["cosine"] = 1 - F.cosine_similarity(projected, teacher_rows).mean()
            terms["loss"] = (terms["info_nce"] + config.procrustes_weight * terms["procrustes"]
                             + config.cv_weight * terms["cv"] + config.cosine_weight * terms.get("cosine", 0))
        return terms
    return loss_at


def save_final(config, model, history, validate):
    """out/final: the trained model stored as config.save_dtype (the frozen base in a file of its own) with its
    tokenizer; returns (the folder, the validation m_acc of the weights as stored)."""
    folder = config.out / "final"
    if folder.exists():
        shutil.rmtree(folder)
    save_stored(model, folder, config.save_dtype)  # the model is now the stored weights
    store_base_apart(folder)  # the frozen base in a file of its own
    stored_m_acc = history["validation"][-1]["m_acc"]  # float32 stores the weights as trained
    if config.save_dtype != "float32":
        with torch.no_grad():
            stored_m_acc = validate()["m_acc"]
    model.tokenizer.save_pretrained(folder)
    runs.forget_load_location(folder)
    plot_history([Panel("loss", {"loss": curve(history["train"], "loss")},
                        validation={"m_acc": curve(history["validation"], "m_acc")},
                        validation_label="validation m_acc", validation_limits=(0, 1))],
                 config.out / "training_curve.png")
    return folder, stored_m_acc


# ---- the run -------------------------------------------------------------------------------------------------------

def main(argv=None):
    config = parse_config(argv)
    config.out.mkdir(parents=True, exist_ok=True)
    if runs.run_state(config.out, config) == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    torch.manual_seed(config.seed)
    training, validation = split_texts(config)
    tokenizer = AutoTokenizer.from_pretrained(base_folder(config.base))
    splice, skipped = spliced_tails(tokenizer, validation, config.base_window, config.splice_k, config.splice_groups,
                                    config.seed)
    # Hard negatives: spliced groups of training texts, k texts that only their tails tell apart (none held out).
    hard, _ = (spliced_tails(tokenizer, training, config.base_window, config.splice_k, config.hard_negative_groups,
                             config.seed + 1) if config.hard_negative_groups else ([], 0))
    _, teacher = encoders.load(config.teacher)
    accelerator = accelerator_for(config.precision, config.gradient_accumulation_steps)

    with runs.RunRecord(config.out, config, "geolip.train") as record:
        started = time.perf_counter()
        with accelerator.main_process_first():  # the main process fills the cache, the others read it
            # the spliced texts' embeddings are only cached here, for tools/geolip/evaluate.py
            targets = teacher_embeddings(config, teacher, training + validation + splice)
            hard_targets = (teacher_embeddings(config, teacher, hard,  # a part per count of groups
                                               part=f"hard-negatives-{config.hard_negative_groups}") if hard else None)
        teacher_minutes = (time.perf_counter() - started) / 60  # ~0 when the cache held them
        model = build_model(config, targets.shape[1]).to(accelerator.device)
        targets = torch.from_numpy(targets).to(accelerator.device)
        hard_targets = None if hard_targets is None else torch.from_numpy(hard_targets).to(accelerator.device)
        train_targets, validation_targets, _ = targets.split([len(training), len(validation), len(splice)])
        train_ids, hard_ids = model.content_ids(training), model.content_ids(hard)
        hard_groups, k = len(hard) // config.splice_k, config.splice_k
        trainable = model.trainable_parameters()
        print(f"geolip: frozen base {sum(p.numel() for p in model.base.parameters()):,} parameters, trainable "
              f"{sum(p.numel() for p in trainable):,}; {len(training)} training texts, {len(validation)} held out; "
              f"{len(splice) // config.splice_k} spliced-tails groups of {config.splice_k} ({skipped} skipped); "
              f"{hard_groups} hard-negative groups of training texts")
        target_cv, cv_texts = cv_target(config, model, teacher, train_ids)
        sample = list(range(min(config.init_texts, len(training))))
        init = start_from(config, model, [training[i] for i in sample], train_targets[sample])
        print(f"projector init by Procrustes on {len(sample)} texts: cosine {init['cosine_before']:.3f} -> "
              f"{init['cosine_after']:.3f}; teacher CV target {target_cv:.4f} ({cv_texts} texts)")

        per_batch = config.groups_per_batch if hard_groups else 0  # hard-negative groups in each batch
        random_rows = config.batch_size - per_batch * k  # 0: the batch is its groups alone
        batches = Batches(len(training), random_rows, config.seed) if random_rows else None

        def batch(step):
            rows = batches.at(step) if random_rows else []
            ids, teacher_rows = [train_ids[i] for i in rows], train_targets[rows]
            for group in range(step * per_batch, (step + 1) * per_batch):  # the step's groups of hard negatives
                texts = slice(group % hard_groups * k, (group % hard_groups + 1) * k)
                ids, teacher_rows = ids + hard_ids[texts], torch.cat([teacher_rows, hard_targets[texts]])
            return ids, teacher_rows

        def validate():
            rows = row_embeddings(model, validation, config.batch_size)["memory"]
            return {"m_acc": m_acc(model.projector(rows), validation_targets)}

        history = run_stage("memory", model, config.steps, config.learning_rate,
                            memory_loss(config, model, batch, target_cv), config, accelerator, validate)
        if not accelerator.is_main_process:
            return 0  # the main process saves and records
        folder, stored_m_acc = save_final(config, model, history, validate)
        metrics = {"training_texts": len(training), "validation_texts": len(validation),
                   "hard_negative_groups": hard_groups,
                   "trainable_parameters": sum(p.numel() for p in trainable),
                   "base_parameters": sum(p.numel() for p in model.base.parameters()),
                   "projector_init": init, "cv_target": {"value": target_cv, "texts": cv_texts},
                   "teacher_minutes": round(teacher_minutes, 1),
                   "training_minutes": round(history["training_seconds"] / 60, 1),
                   "save_dtype": config.save_dtype, "stored_validation_m_acc": stored_m_acc, "history": history}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["validation_m_acc"] = history["validation"][-1]["m_acc"]
    print(f"validation m_acc {history['validation'][-1]['m_acc']:.4f} at step {history['validation'][-1]['step']} "
          f"({stored_m_acc:.4f} as stored in {config.save_dtype}); "
          f"the card's rows: python -m tools.geolip.evaluate --train {config.out} --out <folder>")
    print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
