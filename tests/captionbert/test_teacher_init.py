"""Weight selection (tools/captionbert/teacher_init.py): a student started from a wider BERT-shaped teacher's
weights."""

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from helpers import CAPTIONBERT, TINY_CAPTIONBERT, build_from_folder, captionbert_copy
from tools.captionbert import teacher_init


def tiny_bert(hidden_size, heads, intermediate_size, layers=2, seed=0):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate_size, max_position_embeddings=64, layer_norm_eps=1e-12)
    return BertModel(config, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(CAPTIONBERT)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    folder = captionbert_copy(tmp_path_factory.mktemp("select") / "student", **TINY_CAPTIONBERT)
    return build_from_folder(folder)


def batch(tokenizer):
    encoded = tokenizer(["a dog runs on the grass", "two people ride bikes down a long road at night"],
                        padding=True, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"]


def test_selecting_everything_of_an_equal_size_bert_reproduces_its_token_states(student, tokenizer):
    c = TINY_CAPTIONBERT
    teacher = tiny_bert(c["hidden_size"], c["num_attention_heads"], c["intermediate_size"])
    tokens, mapped = teacher_init.token_map(tokenizer, tokenizer)
    assert mapped == len(tokenizer) and np.array_equal(tokens, np.arange(len(tokenizer)))
    selection = teacher_init.select(student.config, teacher.config, "even")
    assert np.array_equal(selection.dims, np.arange(c["hidden_size"]))
    copied = teacher_init.copy_selected(student, teacher, selection, tokens)
    assert copied == 64  # the teacher's positions
    input_ids, attention_mask = batch(tokenizer)
    with torch.no_grad():
        expected = teacher(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        states = student(input_ids, attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(states[real], expected[real], rtol=1e-5, atol=1e-5)


def test_selection_takes_the_chosen_rows_and_columns(student, tokenizer):
    teacher = tiny_bert(48, 3, 96)  # head width 16, as the student's (32 / 2)
    selection = teacher_init.Selection(dims=np.r_[0:16, 30:46],
                                       heads=[np.array([0, 2]), np.array([1, 2])],
                                       units=[np.arange(0, 64), np.arange(32, 96)])
    tokens, _ = teacher_init.token_map(tokenizer, tokenizer)
    teacher_init.copy_selected(student, teacher, selection, tokens)
    dims = torch.as_tensor(selection.dims)
    source = teacher.encoder.layer[1]
    # Layer 1 keeps heads 1 and 2: query rows 16..47; its key block follows the query block in the fused qkv.
    rows = torch.arange(16, 48)
    qkv = student.encoder.layers[1].attention.qkv.weight
    assert torch.equal(qkv[:32], source.attention.self.query.weight[rows][:, dims])
    assert torch.equal(qkv[32:64], source.attention.self.key.weight[rows][:, dims])
    out = source.attention.output.dense.weight
    assert torch.equal(student.encoder.layers[1].attention.out.weight, out[dims][:, rows])
    assert torch.equal(student.encoder.layers[1].feed_forward.down.weight,
                       source.output.dense.weight[dims][:, 32:96])
    up = teacher.encoder.layer[0].intermediate.dense.bias
    assert torch.equal(student.encoder.layers[0].feed_forward.up.bias, up[:64])
    assert torch.equal(student.encoder.layers[0].attention_norm.weight,
                       teacher.encoder.layer[0].attention.output.LayerNorm.weight[dims])
    # Token-type row 0 is folded into the positions.
    embeddings = teacher.embeddings
    position = embeddings.position_embeddings.weight[5, dims] + embeddings.token_type_embeddings.weight[0, dims]
    assert torch.equal(student.embeddings.position_embeddings.weight[5], position)
    assert torch.equal(student.embeddings.word_embeddings.weight[2000], embeddings.word_embeddings.weight[2000, dims])


def test_importance_selection_keeps_the_strongest_elements(student, tokenizer):
    teacher = tiny_bert(48, 3, 96)
    with torch.no_grad():  # make residual dimension 7 loud and head 1 of layer 0 silent
        for layer in teacher.encoder.layer:
            layer.output.LayerNorm.weight[7] = 20.0
        teacher.encoder.layer[0].attention.output.dense.weight[:, 16:32] = 0.0
    importance = teacher_init.measure_importance(teacher, [batch(tokenizer)])
    assert importance["dims"].shape == (48,) and importance["heads"].shape == (2, 3)
    assert importance["units"].shape == (2, 96)
    assert importance["dims"].argmax() == 7 and importance["heads"][0, 1] == 0.0
    selection = teacher_init.select(student.config, teacher.config, "importance", importance)
    assert 7 in selection.dims and len(selection.dims) == 32
    assert list(selection.heads[0]) == [0, 2]
    assert all(len(u) == 64 and np.all(np.diff(u) > 0) for u in selection.units)


def test_token_map_matches_strings_and_special_roles(tokenizer, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "dog": 4, "##s": 5, "<mask>": 6}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    teacher = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", cls_token="<s>", sep_token="</s>",
                                      eos_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    mapping, mapped = teacher_init.token_map(tokenizer, teacher)
    ids = tokenizer.convert_tokens_to_ids
    assert mapping[ids("[CLS]")] == 0 and mapping[ids("[SEP]")] == 2 and mapping[ids("[PAD]")] == 1
    assert mapping[ids("[UNK]")] == 3 and mapping[ids("[MASK]")] == 6
    assert mapping[ids("dog")] == 4 and mapping[ids("##s")] == 5 and mapping[ids("cat")] == -1
    assert mapped == 7


def test_a_student_that_cannot_be_selected_is_refused(student):
    teacher = tiny_bert(48, 2, 96)  # head width 24, not 16
    with pytest.raises(ValueError, match="head width"):
        teacher_init.select(student.config, teacher.config, "even")
    with pytest.raises(ValueError, match="importance"):
        teacher_init.select(student.config, tiny_bert(48, 3, 96).config, "importance")


def test_static_table_is_written_by_token_string_and_the_rest_stays_random(tokenizer, tmp_path):
    student = build_from_folder(captionbert_copy(tmp_path / "student", **TINY_CAPTIONBERT))
    weight = student.embeddings.word_embeddings.weight
    before = weight.detach().clone()
    width = weight.shape[1]
    vectors = np.stack([np.full(width, 1.0), np.full(width, 2.0), np.full(width, -3.0)]).astype(np.float32)
    vocabulary = {"dog": 0, "##s": 1, "not-a-student-token": 2}

    assert teacher_init.copy_static(student, tokenizer, vectors, vocabulary) == 2
    ids = tokenizer.convert_tokens_to_ids
    scale = before.norm(dim=1).mean() / torch.as_tensor(vectors[:2]).norm(dim=1).mean()
    torch.testing.assert_close(weight[ids("dog")], torch.full((width,), 1.0) * scale)
    torch.testing.assert_close(weight[ids("##s")], torch.full((width,), 2.0) * scale)
    untouched = torch.ones(len(weight), dtype=torch.bool)
    untouched[[ids("dog"), ids("##s")]] = False
    assert torch.equal(weight[untouched], before[untouched])
    with pytest.raises(ValueError, match="-d"):
        teacher_init.copy_static(student, tokenizer, vectors[:, :3], vocabulary)
