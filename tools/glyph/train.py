"""Train glyph-embedder-v2 from scratch: stage 1 masked-language modelling on the glyph corpus, stage 2 contrastive
fine-tuning on (anchor, paraphrase, mutation) triples.

Usage:
    python -m tools.glyph.train --corpus runs/demo/glyph/corpus --out runs/demo/glyph/train            # cpu preset
    python -m tools.glyph.train --preset paper --corpus runs/paper/glyph/corpus --out runs/paper/glyph/train
    python -m tools.glyph.train --corpus C --out O --mlm-steps 50 --contrastive-steps 50   # preset values overridden
Rerunning the same command after a crash or kill -9 resumes from the last checkpoint of the running stage.

Model: transformers' RobertaModel with no custom code (hidden 256, 6 layers, 4 heads, FFN 1,024, 256 token
positions: 6,407,168 parameters with the tokenizer's 6,000-token vocabulary), the sentence embedding is the masked
mean of the last hidden states, L2-normalised.
Stage 1: RobertaForMaskedLM, 15% of tokens masked (80% <mask>, 10% random, 10% kept).
Stage 2: its encoder with InfoNCE of each anchor against every paraphrase of the batch plus every mutation of the
batch (the anchor's own mutation is its hard negative). Validation also tracks the win rate on mirror flips (a⇒b ->
a⇐b, whose tokens are those of the paraphrase b⇐a, so only their order tells them apart), the weakest families.
Both stages run the loop in tools/training.py: AdamW (weight decay 0.01), linear warm-up then linear decay, bf16
autocast on the forward pass where the hardware computes bf16 (--precision auto; float32 elsewhere); batches are
seeded shuffles whose order depends only on (seed, epoch), so a resumed run sees the same batches.

The out folder gets: checkpoint-mlm.pt and checkpoint-contrastive.pt (model, optimiser, schedule, RNG, history;
written atomically), mlm/ (the stage-1 model), tensorboard/, metrics.json (history, final validation win rate,
MRR@10 and mirror-flip win rate on validation.jsonl, which holds training atoms never seen in training),
training_curve.png, and final/, a sentence-transformers folder (Transformer -> mean Pooling -> Normalize) that loads
with no custom code. --save-dtype float16 (both presets) stores its weights in half the bytes; metrics.json records the
validation win rate of the weights as stored.
"""

import random
import shutil
import sys

import torch
from safetensors.torch import load_file
from transformers import (
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    RobertaForMaskedLM,
    RobertaModel,
)

from shared_modeling.losses import info_nce_with_hard_negatives
from shared_modeling.pooling import l2_normalize, masked_mean_pool
from tools import runs
from tools.glyph.data import PRESETS, Config, model_config, read_triples
from tools.glyph.grammar import INVERSE_PAIRS, MIRROR
from tools.glyph.metrics import score_embeddings
from tools.plots import Panel, curve, plot_history
from tools.training import (STORAGE_DTYPES, Batches, accelerator_for, gathered, process_device, resolve_precision,
                            run_stage, save_stored)

MIRROR_FLIPS = {f"{a}/{b}" for a, b in INVERSE_PAIRS if MIRROR.get(a) == b}  # mutation families: a⇒b -> a⇐b


def parse_config(argv):
    config = runs.parse_config(Config, argv, __doc__, presets=PRESETS,
                               positive=("mlm_steps", "contrastive_steps", "mlm_batch_size", "max_length",
                                         "validate_every", "checkpoint_every", "log_every"))
    if config.contrastive_batch_size < 2:
        raise SystemExit("--contrastive-batch-size must be at least 2 (InfoNCE needs in-batch negatives)")
    if config.save_dtype not in STORAGE_DTYPES:
        raise SystemExit(f"--save-dtype must be one of {', '.join(STORAGE_DTYPES)}, got {config.save_dtype!r}")
    if config.hidden_size % config.num_heads:
        raise SystemExit(f"--hidden-size {config.hidden_size} is not a multiple of --num-heads {config.num_heads}")
    config.precision = resolve_precision(config.precision, process_device())
    return config


# ---- data ----------------------------------------------------------------------------------------------------------

def embed(encoder, token_ids, tokenizer):
    """Masked-mean-pooled, L2-normalised embeddings (B, D) of lists of token ids (right-padded by the tokenizer)."""
    batch = tokenizer.pad({"input_ids": token_ids}, return_tensors="pt")
    input_ids, attention_mask = batch["input_ids"].to(encoder.device), batch["attention_mask"].to(encoder.device)
    states = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, D)
    return l2_normalize(masked_mean_pool(states.float(), attention_mask))


def save_sentence_transformer(encoder, tokenizer, config, final):
    """Write `final` as a sentence-transformers folder: Transformer -> mean Pooling -> Normalize, its weights stored
    as config.save_dtype (the encoder in memory is rounded the same way)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    plain = config.out / "final.hf"
    encoder.save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    modules = [Transformer(str(plain), max_seq_length=config.max_length), Pooling(config.hidden_size, "mean"),
               Normalize()]
    if final.exists():
        shutil.rmtree(final)
    SentenceTransformer(modules=modules, device="cpu").save(str(final))
    save_stored(encoder, final, config.save_dtype)  # the Transformer module's weights and config.json, at the root
    runs.forget_load_location(final)
    shutil.rmtree(plain)


# ---- the run's parts -------------------------------------------------------------------------------------------------

def mlm_stage(config, accelerator, tokenizer, corpus_ids):
    """Stage 1: masked-language modelling on the corpus, saved to out/mlm/ (its history.json last); a finished stage
    is read back. Returns its history."""
    folder = config.out / "mlm"
    if (folder / "history.json").exists():
        return runs.read_json(folder / "history.json")
    mlm = RobertaForMaskedLM(model_config(config, tokenizer)).to(accelerator.device)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=config.mask_probability,
                                               return_tensors="pt")
    print(f"stage 1: MLM on {len(corpus_ids)} strings, {config.mlm_steps} steps of {config.mlm_batch_size}")

    batches = Batches(len(corpus_ids), config.mlm_batch_size, config.seed)

    def mlm_loss(step, share):
        rows = share.of(batches.at(step))
        batch = collator([{"input_ids": corpus_ids[i]} for i in rows])
        return {"loss": mlm(**{key: value.to(accelerator.device) for key, value in batch.items()}).loss}

    history = run_stage("mlm", mlm, config.mlm_steps, config.mlm_learning_rate, mlm_loss, config, accelerator)
    if accelerator.is_main_process:
        mlm.save_pretrained(folder)
        runs.write_json(folder / "history.json", history)
    accelerator.wait_for_everyone()
    return history


def encoder_from_mlm(config, tokenizer, device):
    """Stage 2's encoder: a RobertaModel (its pooler unused) with stage 1's weights."""
    torch.manual_seed(config.seed + 1)  # the same state whether or not stage 1 ran in this process
    encoder = RobertaModel(model_config(config, tokenizer))
    mlm_weights = load_file(config.out / "mlm" / "model.safetensors")
    missing, _ = encoder.load_state_dict({key.removeprefix("roberta."): value for key, value in mlm_weights.items()
                                          if key.startswith("roberta.")}, strict=False)
    if any(not key.startswith("pooler.") for key in missing):
        raise SystemExit(f"{config.out / 'mlm'} lacks encoder weights: {missing}")
    return encoder.to(device)


def validation_scores(encode, validation):
    """The validation triples' win rate and MRR@10, and the win rate of the mirrored-operator families alone."""
    scores = score_embeddings(encode, validation, len(validation))
    mirror = [family for name, family in scores["families"].items() if name in MIRROR_FLIPS]
    mirror_win_rate = (sum(family["win_rate"] * family["triples"] for family in mirror)
                       / max(1, sum(family["triples"] for family in mirror)))
    return {"win_rate": scores["win_rate"], "mrr_at_10": scores["mrr_at_10"], "mirror_flip_win_rate": mirror_win_rate}


def stage_record(steps, batch_size, examples, history):
    """metrics.json's entry of one stage."""
    return {"steps": steps, "epochs": round(steps * batch_size / examples, 3),
            "final_loss": history["train"][-1]["loss"], "training_minutes": round(history["training_seconds"] / 60, 1)}


# ---- the run -------------------------------------------------------------------------------------------------------

def main(argv=None):
    config = parse_config(argv)
    for name in ("corpus.txt", "train.jsonl", "validation.jsonl", "tokenizer"):
        if not (config.corpus / name).exists():
            raise SystemExit(f"{config.corpus} has no {name}: build it with tools/glyph/corpus.py")
    config.out.mkdir(parents=True, exist_ok=True)
    if runs.run_state(config.out, config) == "complete":
        print(f"{config.out} is complete (metrics.json); nothing to do")
        return 0
    accelerator = accelerator_for(config.precision, config.gradient_accumulation_steps)
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(config.corpus / "tokenizer"))
    corpus = (config.corpus / "corpus.txt").read_text().splitlines()
    triples = read_triples(config.corpus / "train.jsonl")
    validation = read_triples(config.corpus / "validation.jsonl")
    if len(corpus) < config.mlm_batch_size or len(triples) < config.contrastive_batch_size:
        raise SystemExit(f"{len(corpus)} corpus strings / {len(triples)} triples cannot fill one batch")

    def tokenise(texts):
        return tokenizer(texts, truncation=True, max_length=config.max_length)["input_ids"]

    triple_ids = {key: tokenise([t[key] for t in triples]) for key in ("anchor", "positive", "negative")}
    with runs.RunRecord(config.out, config, "glyph.train") as record:
        mlm_history = mlm_stage(config, accelerator, tokenizer, tokenise(corpus))
        # Stage 2: contrastive fine-tuning of the encoder on the triples.
        encoder = encoder_from_mlm(config, tokenizer, accelerator.device)
        parameters = sum(p.numel() for p in encoder.parameters())
        print(f"stage 2: contrastive on {len(triples)} triples, {config.contrastive_steps} steps of "
              f"{config.contrastive_batch_size}; encoder {parameters:,} parameters")

        batches = Batches(len(triples), config.contrastive_batch_size, config.seed)

        def contrastive_loss(step, share):
            rows = share.of(batches.at(step))
            anchors, positives, negatives = (gathered(embed(encoder, [triple_ids[key][i] for i in rows], tokenizer))
                                             for key in ("anchor", "positive", "negative"))  # the whole batch
            return {"loss": info_nce_with_hard_negatives(anchors, positives, negatives, config.temperature)}

        def encode(texts):
            return torch.cat([embed(encoder, tokenise(texts[i:i + 256]), tokenizer)
                              for i in range(0, len(texts), 256)]).cpu().numpy()

        history = run_stage("contrastive", encoder, config.contrastive_steps, config.contrastive_learning_rate,
                            contrastive_loss, config, accelerator, lambda: validation_scores(encode, validation))
        if not accelerator.is_main_process:
            return 0  # the main process saves and records

        final = config.out / "final"
        save_sentence_transformer(encoder, tokenizer, config, final)
        stored_scores = history["validation"][-1]  # float32 stores the weights as trained
        if config.save_dtype != "float32":
            with torch.no_grad():
                stored_scores = validation_scores(encode, validation)
        plot_history([
            Panel("loss", {"MLM": curve(mlm_history["train"], "loss")}, "stage 1: masked-language modelling"),
            Panel("loss", {"InfoNCE": curve(history["train"], "loss")}, "stage 2: contrastive",
                  {"win rate": curve(history["validation"], "win_rate"),
                   "MRR@10": curve(history["validation"], "mrr_at_10")}, validation_limits=(0, 1))],
            config.out / "training_curve.png")
        metrics = {
            "parameters": parameters, "corpus_strings": len(corpus), "train_triples": len(triples),
            "validation_triples": len(validation),
            "mlm": stage_record(config.mlm_steps, config.mlm_batch_size, len(corpus), mlm_history),
            "contrastive": {**stage_record(config.contrastive_steps, config.contrastive_batch_size, len(triples),
                                           history), "validation": history["validation"][-1]},
            "save_dtype": config.save_dtype, "stored_validation": stored_scores,
            "history": {"mlm": mlm_history, "contrastive": history}}
        runs.write_json(config.out / "metrics.json", metrics)
        record.info["device"] = str(accelerator.device)
    final_scores = metrics["contrastive"]["validation"]
    print(f"validation win rate {final_scores['win_rate']:.4f}, MRR@10 {final_scores['mrr_at_10']:.4f} "
          f"({stored_scores['win_rate']:.4f}, {stored_scores['mrr_at_10']:.4f} as stored in {config.save_dtype}); "
          f"wrote {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
