"""tools/glyph/gguf.py: a tiny random RobertaModel + glyph tokenizer, exported to GGUF and run by llama.cpp itself
(llama-cpp-python), must tokenise token for token like the HF tokenizer and embed like the PyTorch mean pooling."""

import json
import re
import shutil

import numpy as np
import pytest

import gguf
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertModel, RobertaModel

from helpers import N_POSITIONS, UNSEEN_OPERATORS
from tools.glyph import gguf as glyph_gguf

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (requirements.txt pins it; `make setup` builds it)")

HELD_OUT = [
    "retrieval_layer⊕compression ⇒ ¬attribution_edges↑",
    "cache_gate ∵ loss↓ ∴ grad_norm ≡ stable",
    "x ⊢ y ⊣ z ↛ w ∉ S",
    "  leading and trailing spaces  ",
    "double  spaces,\ttabs\tand\na newline",
    "a→b→c⇒d",
    "∄x ⊨ ψ ≢ φ ⟂ 🦙 中文",
    "CamelCase_Query 123 4567 3.14 20240915 node_77",  # digits: GPT-2 keeps a run whole, llama3/qwen2 split 3s
    "it's they're we'll I'D've",
    "marker <mask> inside and </s> too",
    "",
    "   ",
    " ".join(f"node_{i}⊕edge" for i in range(40)),  # longer than N_POSITIONS tokens: truncated, </s> kept
]
COSINE = {"f32": 0.9999, "f16": 0.9999}  # llama.cpp vs PyTorch, per string (measured 1 - cos < 1e-6)
SAME = 1 - 1e-5  # batch vs one at a time, both through llama.cpp


@pytest.fixture(scope="module")
def ggufs(tiny_roberta, tmp_path_factory):
    folder, _ = tiny_roberta
    out = tmp_path_factory.mktemp("gguf-out")
    return {dtype: glyph_gguf.export_gguf(folder, out / f"tiny-{dtype}.gguf", dtype) for dtype in ("f32", "f16")}


@pytest.fixture(scope="module")
def llamas(ggufs):
    return {dtype: glyph_gguf.load_llama(path, n_threads=2) for dtype, path in ggufs.items()}


def test_held_out_texts_are_held_out(tiny_roberta):
    _, texts = tiny_roberta
    seen = set("".join(texts))
    assert all(op not in seen for op in UNSEEN_OPERATORS)
    assert not set(HELD_OUT) & set(texts)


def test_metadata_and_tensors(tiny_roberta, ggufs):
    folder, _ = tiny_roberta
    config = json.loads((folder / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reader = gguf.GGUFReader(ggufs["f16"])
    kv = {name: field.contents() for name, field in reader.fields.items()}
    assert kv["general.architecture"] == "bert" and kv["bert.pooling_type"] == gguf.PoolingType.MEAN
    assert kv["bert.attention.causal"] is False and kv["bert.context_length"] == N_POSITIONS
    assert (kv["bert.embedding_length"], kv["bert.block_count"], kv["bert.attention.head_count"],
            kv["bert.feed_forward_length"]) == (64, 2, 4, 128)
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "gpt-2"
    assert kv["tokenizer.ggml.tokens"] == tokenizer.convert_ids_to_tokens(list(range(config["vocab_size"])))
    assert [kv[f"tokenizer.ggml.{key}"] for key in ("bos_token_id", "eos_token_id", "seperator_token_id",
            "padding_token_id", "unknown_token_id", "mask_token_id")] == [0, 2, 2, 1, 3, 4]
    assert kv["tokenizer.ggml.token_type"][:6] == [3, 3, 3, 3, 3, 1]  # 5 specials CONTROL, then NORMAL
    assert kv["tokenizer.ggml.add_bos_token"] and kv["tokenizer.ggml.add_eos_token"]
    merges = json.loads((folder / "tokenizer.json").read_text())["model"]["merges"]
    assert kv["tokenizer.ggml.merges"] == [" ".join(pair) for pair in merges]

    tensors = {t.name: t for t in reader.tensors}
    # our name table is gguf-py's own HF -> GGUF table for BERT (the one convert_hf_to_gguf.py uses)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, 2)
    mapping = glyph_gguf.tensor_map(2)
    assert {hf: name_map.get_name(hf, try_suffixes=(".weight", ".bias")) for hf in mapping} == mapping
    assert set(tensors) == set(mapping.values())
    for name, tensor in tensors.items():
        f16 = len(tensor.shape) == 2 and not name.startswith(("position_embd", "token_types"))
        assert tensor.tensor_type == (gguf.GGMLQuantizationType.F16 if f16 else gguf.GGMLQuantizationType.F32), name
    model = RobertaModel.from_pretrained(folder)
    positions = model.embeddings.position_embeddings.weight.detach().numpy()
    assert np.array_equal(np.asarray(tensors["position_embd.weight"].data), positions[2:])  # rows 2.. = positions 0..
    up = model.encoder.layer[1].intermediate.dense.weight.detach().numpy()  # (128, 64)
    assert np.array_equal(np.asarray(tensors["blk.1.ffn_up.weight"].data), up.astype(np.float16))


def test_tokens_match_hf(tiny_roberta, llamas):
    folder, _ = tiny_roberta
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text in HELD_OUT:
        expected = tokenizer(text, truncation=True)["input_ids"]
        assert glyph_gguf.llama_tokenize(llamas["f32"], text) == expected, text
    assert len(tokenizer(HELD_OUT[-1], truncation=True)["input_ids"]) == N_POSITIONS  # truncation was exercised


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_embeddings_match_pytorch(tiny_roberta, llamas, dtype):
    folder, _ = tiny_roberta
    reference = glyph_gguf.torch_embed(folder, HELD_OUT)
    batch = glyph_gguf.llama_embed(llamas[dtype], HELD_OUT)
    single = np.concatenate([glyph_gguf.llama_embed(llamas[dtype], [text]) for text in HELD_OUT])
    cosines = (batch * reference).sum(1)
    print(f"{dtype}: llama.cpp vs PyTorch, 1 - cosine max {1 - cosines.min():.2e}, "
          f"batch vs single {1 - (batch * single).sum(1).min():.2e}")
    assert cosines.min() >= COSINE[dtype], dict(zip(HELD_OUT, cosines.round(6)))
    assert np.allclose(np.linalg.norm(batch, axis=1), 1, atol=1e-5)
    assert (batch * single).sum(1).min() >= SAME  # packing sequences into one batch changes nothing
    # the tolerance can fail: another string's embedding, or RoBERTa's positions read from row 0, falls short of it
    assert (reference @ reference.T)[~np.eye(len(HELD_OUT), dtype=bool)].max() < COSINE[dtype]
    assert (unshifted_positions_embed(folder, HELD_OUT) * reference).sum(1).min() < COSINE[dtype]


def unshifted_positions_embed(folder, texts):
    """What an export without the position slice would compute: positions 0.. read rows 0.. of RoBERTa's table."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = RobertaModel.from_pretrained(folder).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer([text], truncation=True, return_tensors="pt")
            positions = torch.arange(batch["input_ids"].shape[1]).unsqueeze(0)
            rows.append(torch.nn.functional.normalize(model(**batch, position_ids=positions).last_hidden_state
                                                      .mean(1), dim=-1))
    return torch.cat(rows).numpy()


def test_sentence_transformers_folder(tiny_roberta, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    folder, _ = tiny_roberta
    transformer = modules.Transformer(str(folder), max_seq_length=N_POSITIONS)
    st = SentenceTransformer(modules=[transformer, modules.Pooling(64, "mean"), modules.Normalize()], device="cpu")
    st.save(str(tmp_path / "st"))
    path = glyph_gguf.export_gguf(tmp_path / "st", tmp_path / "st.gguf")
    cosines = (glyph_gguf.llama_embed(path, HELD_OUT) * st.encode(HELD_OUT)).sum(1)
    assert cosines.min() >= COSINE["f32"]

    pooling = tmp_path / "st" / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode": "cls"}))
    with pytest.raises(glyph_gguf.NotRobertaError, match="not plain mean pooling"):
        glyph_gguf.export_gguf(tmp_path / "st", tmp_path / "cls.gguf")


def test_not_roberta_is_refused(tiny_roberta, tmp_path):
    folder, _ = tiny_roberta
    BertModel(BertConfig(vocab_size=400, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path / "bert")
    AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path / "bert")
    with pytest.raises(glyph_gguf.NotRobertaError, match="model_type is 'bert'.*architectures"):
        glyph_gguf.export_gguf(tmp_path / "bert", tmp_path / "bert.gguf")
    with pytest.raises(SystemExit, match="is not a RobertaModel"):
        glyph_gguf.main(["--model", str(tmp_path / "bert"), "--out", str(tmp_path / "bert.gguf")])
    assert not (tmp_path / "bert.gguf").exists()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        glyph_gguf.export_gguf(tmp_path, tmp_path / "none.gguf")


def test_main_end_to_end(tiny_roberta, tmp_path, capsys):
    folder, _ = tiny_roberta
    out = tmp_path / "sub" / "tiny.gguf"
    assert glyph_gguf.main(["--model", str(folder), "--out", str(out), "--dtype", "f16",
                            "--check", *HELD_OUT[:3]]) == 0
    printed = capsys.readouterr().out
    assert out.is_file() and not list(out.parent.glob("*.partial")) and "f16" in printed
    assert printed.count("tokens identical") == 3
    assert min(float(line.split("PyTorch ")[1].split()[0]) for line in printed.splitlines()[1:]) >= COSINE["f16"]
    with pytest.raises(SystemExit, match="does not reproduce"):  # the check can fail
        glyph_gguf.main(["--model", str(folder), "--out", str(out), "--check", HELD_OUT[0], "--min-cosine", "1.001"])


def test_an_output_that_is_not_a_gguf_is_refused(tiny_roberta, tmp_path):
    folder = shutil.copytree(tiny_roberta[0], tmp_path / "glyph-tiny")
    inputs = {path: path.read_bytes() for path in folder.iterdir()}
    for out in [*inputs, tmp_path / "glyph-tiny.bin"]:
        with pytest.raises(SystemExit, match=re.escape(f"export_gguf: {out}: not a .gguf path")):
            glyph_gguf.main(["--model", str(folder), "--out", str(out)])
    assert {path: path.read_bytes() for path in folder.iterdir()} == inputs  # the weights are untouched
    assert sorted(tmp_path.iterdir()) == [folder]


@pytest.mark.parametrize("value, dtype", [(float("nan"), "f32"), (float("inf"), "f16"), (1e6, "f16")],
                         ids=["nan", "inf", "f16-overflow"])
def test_weights_that_are_not_finite_are_refused(tiny_roberta, tmp_path, value, dtype):
    folder = shutil.copytree(tiny_roberta[0], tmp_path / "glyph-tiny")
    weights = load_file(str(folder / "model.safetensors"))
    weights["encoder.layer.1.output.dense.weight"][3, 5] = value
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out" / "glyph-tiny.gguf"
    with pytest.raises(SystemExit, match=rf"encoder.layer.1.output.dense.weight \(blk.1.ffn_down.weight\) is not "
                                         rf"finite as written \({dtype}\): 1 of 8,192 values; nothing written"):
        glyph_gguf.main(["--model", str(folder), "--out", str(out), "--dtype", dtype])
    assert not out.parent.exists()


def test_a_corrupted_gguf_is_refused_not_embedded_as_nan(ggufs, tmp_path):
    """A GGUF whose weights were corrupted after export (a NaN in one tensor) loads in llama.cpp and returns NaN
    embeddings; llama_embed must raise, as the PyTorch path does, naming the file."""
    corrupted = shutil.copy(ggufs["f32"], tmp_path / "corrupted.gguf")
    reader = gguf.GGUFReader(corrupted, "r+")
    tensor = next(t for t in reader.tensors if t.name == "blk.1.ffn_down.weight")
    tensor.data.reshape(-1)[7] = np.nan
    reader.data.flush()
    del reader
    with pytest.raises(ValueError, match=r"corrupted.gguf: llama.cpp returned embeddings that are not finite"):
        glyph_gguf.llama_embed(corrupted, ["a ⇒ b", "¬b"])
