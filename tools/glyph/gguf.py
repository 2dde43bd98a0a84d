"""Export a RoBERTa sentence embedder (glyph-embedder-v2) to a llama.cpp GGUF, and embed text through llama.cpp.

Usage:
    python -m tools.glyph.gguf --model glyph-embedder-v2 --out runs/gguf/glyph-embedder-v2-f32.gguf
    python -m tools.glyph.gguf --model glyph-embedder-v2 --out runs/gguf/glyph-embedder-v2-f16.gguf --dtype f16
    python -m tools.glyph.gguf --model glyph-embedder-v2 --out x.gguf --check "a ⇒ b" "¬x ∧ y"  # + parity check

Input: a folder with config.json + model.safetensors + tokenizer.json (what RobertaModel.save_pretrained and
tokenizer.save_pretrained write), or a sentence-transformers folder (Transformer -> Pooling(mean) -> [Normalize])
whose Transformer files sit at the top level or in the module's own sub-folder.

Why this does not call llama.cpp's convert_hf_to_gguf.py: that converter names a BPE pre-tokeniser by hashing the
tokens of a probe text, so a newly trained tokenizer is "not recognised". The glyph tokenizer is GPT-2's byte-level
BPE (regex pre-tokeniser, no prefix space) with RoBERTa's `<s> X </s>` template, which llama.cpp implements as
tokenizer.ggml.model "gpt2" + tokenizer.ggml.pre "gpt-2" (src/llama-vocab.cpp maps "gpt-2" to
LLAMA_VOCAB_PRE_TYPE_GPT2, the GPT-2 regex) and add_bos/add_eos set (a BPE vocab adds <s>/</s> only when they are).
So the file is written here with the gguf package, following the converter's RobertaModel/BertModel classes:

    metadata  general.architecture=bert, bert.{context_length, embedding_length, feed_forward_length, block_count,
              attention.head_count, attention.layer_norm_epsilon}, bert.attention.causal=false,
              bert.pooling_type=MEAN, tokenizer.ggml.{model=gpt2, pre=gpt-2, tokens, token_type, merges,
              token_type_count, bos/eos/sep/pad/unk/mask_token_id, add_bos/add_eos/add_sep_token=true}
    tensors   see tensor_map(); RoBERTa numbers positions from pad_token_id + 1, llama.cpp's bert graph from 0, so the
              position table loses its first pad_token_id + 1 rows and context_length shrinks by as many (258 -> 256)
    dtypes    f32: everything f32. f16: 2-D weights f16, except position_embd and token_types; 1-D tensors (norms,
              biases) f32 (the converter's rules; llama.cpp's CPU norms expect f32)

llama.cpp's pooled MEAN averages the last hidden states over every token of a sequence (<s> and </s> included) and
does not normalise; llama_embed() L2-normalises, so it returns what sentence-transformers' encode() returns.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared_modeling.encoding import truncate_keeping_last
from tools import runs

SPECIAL_IDS = {"bos": "<s>", "eos": "</s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}
GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh")  # llama.cpp's bert FFN is GELU (ggml_gelu, tanh form)
ST_MODULES = ("Transformer", "Pooling", "Normalize")  # class names; their module paths move between versions


class NotRobertaError(ValueError):
    """The folder is not a RobertaModel (+ byte-level BPE tokenizer) this exporter can write faithfully."""


@dataclass
class Config:
    model: Path = field(metadata={"help": "RobertaModel folder or sentence-transformers folder"})
    out: Path = field(metadata={"help": "the .gguf file to write"})
    dtype: str = field(default="f32", metadata={"choices": ("f32", "f16"), "help": (
        "weight precision (f16: 2-D weights only; norms, biases, position and type tables stay f32)")})
    name: str | None = field(default=None, metadata={"help": "general.name (default: the folder's name)"})
    check: list[str] = field(default_factory=list, metadata={
        "help": "texts to tokenise and embed with PyTorch and llama.cpp"})
    min_cosine: float = field(default=0.9999, metadata={
        "help": "--check fails below this cosine (f32 and f16 measure 1 - cos < 1e-6 on random weights)"})


# ---- tensor names: HF RobertaModel -> llama.cpp bert (gguf.TENSOR_NAMES; src/models/bert.cpp load_arch_tensors) ----
def tensor_map(n_layers):
    """{HF state-dict name: GGUF name} for a RobertaModel trunk; the pooler is not part of the export."""
    import gguf

    T, names = gguf.MODEL_TENSOR, gguf.TENSOR_NAMES
    mapping = {"embeddings.word_embeddings": names[T.TOKEN_EMBD],
               "embeddings.position_embeddings": names[T.POS_EMBD],
               "embeddings.token_type_embeddings": names[T.TOKEN_TYPES],
               "embeddings.LayerNorm": names[T.TOKEN_EMBD_NORM]}
    per_layer = {"attention.self.query": T.ATTN_Q, "attention.self.key": T.ATTN_K, "attention.self.value": T.ATTN_V,
                 "attention.output.dense": T.ATTN_OUT, "attention.output.LayerNorm": T.ATTN_OUT_NORM,
                 "intermediate.dense": T.FFN_UP, "output.dense": T.FFN_DOWN, "output.LayerNorm": T.LAYER_OUT_NORM}
    for i in range(n_layers):
        for hf, tensor in per_layer.items():
            mapping[f"encoder.layer.{i}.{hf}"] = names[tensor].format(bid=i)
    full = {}
    for hf, gg in mapping.items():
        full[f"{hf}.weight"] = f"{gg}.weight"
        if not hf.startswith("embeddings.") or hf.endswith("LayerNorm"):
            full[f"{hf}.bias"] = f"{gg}.bias"
    return full


IGNORED = ("pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids", "embeddings.token_type_ids")


# ---- input checks ---------------------------------------------------------------------------------------------------
def resolve_model_dir(model_dir):
    """The folder holding config.json, model.safetensors and tokenizer.json; checks a sentence-transformers
    pipeline is Transformer -> Pooling(mean) -> [Normalize], which is what llama.cpp's MEAN pooling reproduces."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir} is not a folder")
    files = model_dir
    if (model_dir / "modules.json").is_file():
        modules = json.loads((model_dir / "modules.json").read_text())
        unknown = [m["type"] for m in modules if not m["type"].startswith("sentence_transformers.")
                   or m["type"].rsplit(".", 1)[1] not in ST_MODULES]
        if unknown:
            raise NotRobertaError(f"{model_dir}: sentence-transformers modules {unknown} have no GGUF equivalent "
                                  "(only Transformer -> Pooling(mean) -> Normalize can be exported)")
        for module in modules:
            kind = module["type"].rsplit(".", 1)[1]
            if kind == "Transformer":
                files = model_dir / module["path"]
            if kind == "Pooling":
                pooling = json.loads((model_dir / module["path"] / "config.json").read_text())
                modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True)
                if pooling.get("pooling_mode", "mean") != "mean" or modes not in ([], ["pooling_mode_mean_tokens"]):
                    raise NotRobertaError(f"{model_dir}: pooling {pooling} is not plain mean pooling; the GGUF's "
                                          "pooling type is MEAN")
    missing = [name for name in ("config.json", "model.safetensors", "tokenizer.json") if not (files / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{files} lacks {missing}: expected RobertaModel.save_pretrained + "
                                "tokenizer.save_pretrained output (a single model.safetensors)")
    return files


def check_config(config, where):
    """Raise NotRobertaError listing every way `config` (config.json as a dict) is not a RobertaModel encoder."""
    problems = []
    if config.get("model_type") != "roberta":
        problems.append(f"model_type is {config.get('model_type')!r}, not 'roberta'")
    if config.get("architectures", ["RobertaModel"]) != ["RobertaModel"]:
        problems.append(f"architectures is {config.get('architectures')}, not ['RobertaModel']")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {config['position_embedding_type']!r} (llama.cpp: absolute only)")
    if config.get("hidden_act") not in GELU:
        problems.append(f"hidden_act {config.get('hidden_act')!r} (llama.cpp's bert FFN is GELU)")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        problems.append("a decoder / cross-attention model, not an encoder")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size", "pad_token_id", "layer_norm_eps"):
        if key not in config:
            problems.append(f"no {key}")
    if not problems:
        if config["hidden_size"] % config["num_attention_heads"]:
            problems.append("hidden_size is not a multiple of num_attention_heads")
        if config["max_position_embeddings"] <= config["pad_token_id"] + 1:
            problems.append("max_position_embeddings leaves no positions after pad_token_id + 1")
        if config["type_vocab_size"] < 1:
            problems.append("type_vocab_size < 1 (llama.cpp's bert needs a token type count)")
    if problems:
        raise NotRobertaError(f"{where} is not a RobertaModel this exporter supports: " + "; ".join(problems))


def read_tokenizer(tokenizer_json, vocab_size, where):
    """(tokens, token types, merges, special ids) of a byte-level BPE tokenizer.json with RoBERTa's template."""
    import gguf

    spec = json.loads(Path(tokenizer_json).read_text())
    pre, model, post = spec.get("pre_tokenizer") or {}, spec.get("model") or {}, spec.get("post_processor") or {}
    problems = []
    if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("dropout") \
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or model.get("ignore_merges"):
        problems.append("model is not a plain BPE")
    if pre != {**pre, "type": "ByteLevel", "add_prefix_space": False, "use_regex": True}:
        problems.append(f"pre_tokenizer {pre} is not GPT-2's ByteLevel(add_prefix_space=False, use_regex=True)")
    if spec.get("normalizer") is not None:
        problems.append(f"normalizer {spec['normalizer']['type']} has no llama.cpp gpt2 equivalent")
    if post.get("type") != "RobertaProcessing":
        problems.append(f"post_processor {post.get('type')} is not RobertaProcessing (<s> X </s>)")
    if problems:
        raise NotRobertaError(f"{where}: tokenizer.json is not a byte-level BPE with RoBERTa's template: "
                              + "; ".join(problems))

    vocab = dict(model["vocab"])
    added = {token["content"]: token for token in spec.get("added_tokens", [])}
    vocab.update({content: token["id"] for content, token in added.items()})
    if max(vocab.values()) >= vocab_size:
        raise NotRobertaError(f"{where}: the tokenizer has id {max(vocab.values())} but vocab_size is {vocab_size}")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]  # ids the tokenizer never emits, as the converter pads them
    types = [gguf.TokenType.UNUSED] * vocab_size
    for content, i in vocab.items():
        tokens[i] = content
        if content in added:
            types[i] = gguf.TokenType.CONTROL if added[content]["special"] else gguf.TokenType.USER_DEFINED
        else:
            types[i] = gguf.TokenType.NORMAL
    merges = [pair if isinstance(pair, str) else " ".join(pair) for pair in model.get("merges", [])]
    if any(len(merge.split(" ")) != 2 for merge in merges):
        raise NotRobertaError(f"{where}: a merge contains a space, which a byte-level BPE never produces")

    special = {}
    for role, content in SPECIAL_IDS.items():
        if content not in vocab:
            raise NotRobertaError(f"{where}: the tokenizer has no {content} token")
        special[role] = vocab[content]
    if (post["cls"][1], post["sep"][1]) != (special["bos"], special["eos"]):
        raise NotRobertaError(f"{where}: the template's cls/sep {post['cls']}/{post['sep']} are not <s>/</s>")
    return tokens, types, merges, special


def load_weights(safetensors_path):
    """{name: float32 numpy array} of a safetensors file."""
    from safetensors.torch import load_file

    return {name: tensor.float().numpy() for name, tensor in load_file(str(safetensors_path)).items()}


# ---- the export -----------------------------------------------------------------------------------------------------

def context_length(config):
    """The tokens a text can use in a RoBERTa config (dict), and so the GGUF's context length: RoBERTa numbers
    positions from pad_token_id + 1, llama.cpp's bert graph from 0."""
    return config["max_position_embeddings"] - config["pad_token_id"] - 1


def gguf_tensors(files, config, dtype):
    """{GGUF tensor name: the array as written} of a RobertaModel folder's weights: every tensor mapped by name (the
    position table without RoBERTa's offset rows), 2-D ones in f16 where dtype is f16 (the position and token-type
    tables stay f32); NotRobertaError for weights that are not a RobertaModel's, ValueError naming a tensor that is
    not finite as written."""
    import gguf

    weights = load_weights(files / "model.safetensors")
    mapping = tensor_map(config["num_hidden_layers"])
    unexpected = sorted(set(weights) - set(mapping) - set(IGNORED))
    missing = sorted(set(mapping) - set(weights))
    if unexpected or missing:
        raise NotRobertaError(f"{files}/model.safetensors is not a RobertaModel state dict: "
                              f"unexpected {unexpected[:5]}, missing {missing[:5]}")
    offset = config["pad_token_id"] + 1  # RoBERTa's first position id (create_position_ids_from_input_ids)
    position_table = weights["embeddings.position_embeddings.weight"]
    if position_table.shape[0] != config["max_position_embeddings"]:
        raise NotRobertaError(f"{files}: position table has {position_table.shape[0]} rows, config says "
                              f"{config['max_position_embeddings']}")
    weights["embeddings.position_embeddings.weight"] = position_table[offset:]  # (n_positions, D)

    f16_exempt = (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.POS_EMBD], gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.TOKEN_TYPES])
    tensors = {}  # {GGUF name: the array as written}
    for hf_name, gguf_name in mapping.items():
        data = np.ascontiguousarray(weights[hf_name], dtype=np.float32)
        if dtype == "f16" and data.ndim == 2 and not gguf_name.startswith(f16_exempt):
            with np.errstate(over="ignore"):  # an overflow is reported below, by name
                data = data.astype(np.float16)
        finite = np.isfinite(data)
        if not finite.all():
            raise ValueError(f"{files}/model.safetensors: {hf_name} ({gguf_name}) is not finite as written "
                             f"({'f16' if data.dtype == np.float16 else 'f32'}): {data.size - finite.sum():,} of "
                             f"{data.size:,} values; nothing written")
        tensors[gguf_name] = data
    return tensors


def export_gguf(model_dir, out_path, dtype="f32", name=None):
    """Write `model_dir` (RobertaModel or sentence-transformers folder) as a llama.cpp bert GGUF; returns the path.
    Refuses an out_path that does not end in .gguf, and weights that are not finite as written (f16 casts included);
    the file appears whole under its name or not at all."""
    import gguf

    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype must be f32 or f16, not {dtype!r}")
    out_path = Path(out_path)
    if out_path.suffix != ".gguf":  # none of the model's files is a .gguf, so this also keeps them from being written
        raise ValueError(f"{out_path}: not a .gguf path; the output must end in .gguf")
    files = resolve_model_dir(model_dir)
    config = json.loads((files / "config.json").read_text())
    check_config(config, files)
    tokens, types, merges, special = read_tokenizer(files / "tokenizer.json", config["vocab_size"], files)

    tensors = gguf_tensors(files, config, dtype)  # {GGUF name: the array as written}
    n_positions = context_length(config)

    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")  # renamed when complete: no half-written .gguf
    writer = gguf.GGUFWriter(str(partial), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name or Path(model_dir).resolve().name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(n_positions)
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_token_type_count(config["type_vocab_size"])
    for role, token_id in special.items():  # no cls id: llama.cpp reads <s> as bos (tokenizer.ggml.cls_token_id is
        getattr(writer, f"add_{role}_token_id")(token_id)  # deprecated and gguf 0.19 has no writer for it)
    writer.add_add_bos_token(True)  # RobertaProcessing: <s> X </s>, as gguf.SpecialVocab reads the template
    writer.add_add_eos_token(True)
    writer.add_add_sep_token(True)  # only used by llama-server's rerank pairs: <s> A </s></s> B </s>

    for gguf_name, data in tensors.items():
        writer.add_tensor(gguf_name, data)  # numpy (rows, cols) is ggml's {cols, rows}: HF Linear (out, in) fits
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(out_path)
    return out_path


# ---- embedding through llama.cpp ------------------------------------------------------------------------------------
def load_llama(gguf_path, batch_tokens=None, n_threads=None):
    """A llama_cpp.Llama in embedding mode whose batches pack several sequences, up to `batch_tokens` tokens in all
    (default: the model's context length, the fastest on CPU since attention spans the whole packed batch)."""
    from llama_cpp import Llama

    n_ctx = batch_tokens or 0  # Llama: n_ctx=0 means the model's context length, and n_batch is capped at n_ctx
    return Llama(model_path=str(gguf_path), embedding=True, n_ctx=n_ctx, n_batch=n_ctx or 1 << 20,
                 n_ubatch=n_ctx or 1 << 20, n_threads=n_threads, n_threads_batch=n_threads, verbose=False)


def llama_tokenize(llm, text):
    """Token ids llama.cpp feeds the model for `text`: <s> ... </s>, special tokens in the text parsed as HF does,
    truncated like sentence-transformers (at the model's context length, keeping </s>)."""
    import llama_cpp

    ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    limit = llama_cpp.llama_model_n_ctx_train(llm.model)
    return truncate_keeping_last(ids, limit)


def pack(sequences, n_tokens, n_seqs):
    """Yield (index of the first, group): consecutive sequences, at most n_seqs of them and n_tokens tokens in all.
    A non-causal model needs every sequence whole inside one batch (llama.cpp: n_ubatch >= the batch's tokens)."""
    first = 0
    while first < len(sequences):
        group, used = [], 0
        while first + len(group) < len(sequences) and len(group) < n_seqs \
                and used + len(sequences[first + len(group)]) <= n_tokens:
            used += len(sequences[first + len(group)])
            group.append(sequences[first + len(group)])
        if not group:
            raise ValueError(f"a text of {len(sequences[first])} tokens exceeds the batch of {n_tokens}")
        yield first, group
        first += len(group)


def llama_embed(model, texts, normalize=True, batch_tokens=None):
    """(len(texts), hidden) float32 embeddings from llama.cpp's MEAN pooling, L2-normalised unless normalize=False.
    model: a .gguf path or a Llama from load_llama(). Sequences are packed into batches of <= n_batch tokens.
    ValueError if an embedding is not finite (a corrupted file)."""
    import llama_cpp

    llm = load_llama(model, batch_tokens) if isinstance(model, (str, Path)) else model
    if not llm.context_params.embeddings:
        raise ValueError("the Llama was not created with embedding=True: use load_llama()")
    if llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE:
        raise ValueError("the model has no pooling type: export it with tools/glyph/gguf.py")
    ctx, n_batch, n_embd = llm.ctx, llm.n_batch, llm.n_embd()
    sequences = [llama_tokenize(llm, text) for text in texts]
    out = np.zeros((len(sequences), n_embd), dtype=np.float32)
    batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
    try:
        for first, group in pack(sequences, n_batch, llm.context_params.n_seq_max):
            k = 0
            for seq_id, ids in enumerate(group):  # each sequence keeps its own positions 0.. and seq_id
                for pos, token in enumerate(ids):
                    batch.token[k], batch.pos[k], batch.n_seq_id[k] = token, pos, 1
                    batch.seq_id[k][0], batch.logits[k] = seq_id, True
                    k += 1
            batch.n_tokens = k
            memory = llama_cpp.llama_get_memory(ctx)  # none for bert (no KV cache); cleared if a build has one
            if memory:
                llama_cpp.llama_memory_clear(memory, True)
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            for seq_id in range(len(group)):
                pointer = llama_cpp.llama_get_embeddings_seq(ctx, seq_id)  # (n_embd,) MEAN over the sequence
                if not pointer:
                    raise RuntimeError(f"llama.cpp returned no pooled embedding for sequence {seq_id}")
                out[first + seq_id] = np.ctypeslib.as_array(pointer, shape=(n_embd,))
    finally:
        llama_cpp.llama_batch_free(batch)
    broken = ~np.isfinite(out).all(axis=1)
    if broken.any():  # llama.cpp runs a corrupted file without a word; the PyTorch path refuses non-finite weights
        raise ValueError(f"{llm.model_path}: llama.cpp returned embeddings that are not finite for {broken.sum()} of "
                         f"{len(texts)} texts: the file's weights are corrupted (export it again)")
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


def torch_embed(model_dir, texts, batch_size=64):
    """The reference: RobertaModel's last hidden states, attention-masked mean, L2-normalised (float32 numpy)."""
    import torch
    from transformers import AutoTokenizer, RobertaModel

    from shared_modeling.pooling import l2_normalize, masked_mean_pool

    files = resolve_model_dir(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(files)
    model = RobertaModel.from_pretrained(files).eval()  # the pooler is not used
    rows = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(texts[i:i + batch_size], padding=True, truncation=True, return_tensors="pt")
            hidden = model(**batch).last_hidden_state  # (B, T, D)
            rows.append(l2_normalize(masked_mean_pool(hidden, batch["attention_mask"])))
    return torch.cat(rows).numpy()


def check_parity(model_dir, gguf_path, texts):
    """[(text, HF and llama.cpp token ids equal, cosine llama.cpp vs PyTorch)] for each text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(model_dir))
    llm = load_llama(gguf_path)
    same = [llama_tokenize(llm, text) == tokenizer(text, truncation=True)["input_ids"] for text in texts]
    cosines = (llama_embed(llm, texts) * torch_embed(model_dir, texts)).sum(1)
    return list(zip(texts, same, cosines.tolist()))


def main(argv=None):
    config = runs.parse_config(Config, argv, __doc__)
    try:
        path = export_gguf(config.model, config.out, config.dtype, config.name)
    except (ValueError, FileNotFoundError) as error:  # NotRobertaError is a ValueError
        raise SystemExit(f"export_gguf: {error}") from error
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {config.dtype})")
    if config.check:
        rows = check_parity(config.model, path, config.check)
        for text, same, cosine in rows:
            print(f"tokens {'identical' if same else 'DIFFER'}  cosine llama.cpp vs PyTorch {cosine:.6f}  {text!r}")
        if not all(same and cosine >= config.min_cosine for _, same, cosine in rows):
            raise SystemExit(f"{path} does not reproduce {config.model} "
                             f"(tokens differ or cosine < {config.min_cosine})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
