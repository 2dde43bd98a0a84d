"""tools/training.py: the shared training loop resumes exactly, keeps frozen parameters out of its checkpoints and
leaves them untouched, and draws the same batches whatever the step it starts from; every trainer resolves
--precision auto to bf16 only where the hardware computes it."""

import numpy as np
import pytest
import torch
from torch import nn

import toy_training
from helpers import plant_code, torchrun
from tools import training
from tools.geolip import train as geolip_train
from tools.glyph import train as glyph_train
from tools.training import Batches, epoch_batches, run_stage
from toy_training import Interrupted, LoopConfig, train


def test_an_interrupted_run_resumes_to_the_same_weights_and_history(tmp_path):
    straight, straight_history = train(tmp_path / "straight")
    with pytest.raises(Interrupted):
        train(tmp_path / "killed", stop_at=5)
    resumed, resumed_history = train(tmp_path / "killed")
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert [p["loss"] for p in resumed_history["train"]] == [p["loss"] for p in straight_history["train"]]
    assert [p["step"] for p in resumed_history["validation"]] == [3, 6]
    saved = torch.load(tmp_path / "killed" / "checkpoint-toy.pt", weights_only=True)
    assert set(saved["model"]) == {"2.weight", "2.bias"}  # the frozen layer is not checkpointed


def test_a_cosine_schedule_its_warm_up_in_steps_and_the_history_s_entries_survive_a_resume(tmp_path):
    options = {"warmup_steps": 2, "decay": "cosine", "history": {"init": {"kind": "toy"}}}
    with pytest.raises(Interrupted):
        train(tmp_path, stop_at=5, **options)
    _, history = train(tmp_path, **options)
    assert history["init"] == {"kind": "toy"}
    rates = [point["lr"] for point in history["train"]]
    assert rates[:2] == [0.025, 0.05]  # warm-up over two steps, then cosine decay to 0 at step 6
    assert rates[2:] == pytest.approx([0.05 * (1 + np.cos(np.pi * k / 4)) / 2 for k in (1, 2, 3, 4)])


def test_a_loss_that_reports_its_tokens_gets_tokens_per_second(tmp_path):
    model = nn.Linear(2, 1)
    history = run_stage("tokens", model, 4, 0.01,
                        lambda step, share: {"loss": model(torch.ones(3, 2)).sum(), "tokens": 30},
                        LoopConfig(tmp_path, log_every=2), training.accelerator_for("fp32"))
    assert [point["step"] for point in history["train"]] == [2, 4]
    assert all(point["tokens_per_second"] > 0 and "tokens" not in point for point in history["train"])
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_shares_cut_a_batch_into_contiguous_parts_and_refuse_a_batch_too_small():
    rows = list(range(7))
    parts = [training.Share(index, 3).of(rows) for index in range(3)]
    assert parts == [[0, 1], [2, 3], [4, 5, 6]] and training.Share(0, 1).of(rows) == rows
    with pytest.raises(SystemExit, match="a batch of 2 cannot be shared among 3 parts"):
        training.Share(0, 3).of([0, 1])
    with pytest.raises(SystemExit, match="--gradient-accumulation-steps must be >= 1"):
        training.accelerator_for("fp32", 0)


def test_gradient_accumulation_over_micro_steps_gives_the_weights_of_the_whole_batch(tmp_path):
    """Two micro-steps of half a batch each, accumulated by the Accelerator, make the step one step of the whole
    batch makes (an MSE: a mean over the rows, so the halves' mean is the whole's)."""
    whole, _ = train(tmp_path / "whole", steps=4, batch_size=8, noise=False)
    halves, _ = train(tmp_path / "halves", steps=4, batch_size=8, noise=False, micro_steps=2)
    for (name, a), b in zip(whole.state_dict().items(), halves.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_two_processes_at_a_global_batch_make_the_weights_of_one_process_and_resume_on_one(tmp_path):
    """Data-parallel on two CPU processes (torchrun, gloo): three steps at a global batch of 8 (4 a process), with
    in-batch InfoNCE over the gathered rows, end at the weights one process reaches at a batch of 8; and a run killed
    on two processes resumes on one to the weights of an uninterrupted run."""
    one, _ = train(tmp_path / "one", steps=3, batch_size=8, noise=False, contrastive=True)
    result = torchrun(toy_training.__file__, tmp_path / "two", 3, 8)  # two CPU processes: gloo
    assert result.returncode == 0, result.stderr[-3000:]
    two = torch.load(tmp_path / "two" / "weights.pt", weights_only=True)
    assert set(two) == set(one.state_dict())
    for name, weight in one.state_dict().items():
        torch.testing.assert_close(two[name], weight, rtol=1e-5, atol=1e-6, msg=name)

    killed = torchrun(toy_training.__file__, tmp_path / "killed", 6, 8, 5)  # stops after the checkpoint of step 4
    assert killed.returncode != 0 and "Interrupted" in killed.stderr
    assert torch.load(tmp_path / "killed" / "checkpoint-toy.pt", weights_only=True)["step"] == 4
    straight, _ = train(tmp_path / "straight", steps=6, batch_size=8, noise=False, contrastive=True)
    resumed, _ = train(tmp_path / "killed", steps=6, batch_size=8, noise=False, contrastive=True)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    with pytest.raises(Interrupted):
        train(tmp_path, stop_at=5)
    checkpoint = tmp_path / "checkpoint-toy.pt"
    plant_code(checkpoint, tmp_path / "ran")
    with pytest.raises(SystemExit, match=f"{checkpoint}: not a checkpoint save_checkpoint wrote"):
        train(tmp_path)
    assert not (tmp_path / "ran").exists()


def test_batches_depend_only_on_seed_and_step():
    batches = Batches(23, 5, seed=7)
    epoch = [batches.at(step) for step in range(4)]  # 4 batches of 5 per epoch; 3 examples dropped
    assert len(set(np.concatenate(epoch).tolist())) == 20
    assert np.array_equal(batches.at(5), Batches(23, 5, seed=7).at(5))  # a fresh sampler: a resumed run
    assert not np.array_equal(batches.at(4), epoch[0])  # a new epoch, a new shuffle
    assert np.array_equal(batches.at(2), epoch[2]) and batches.epochs(6) == 1.5  # going back restarts from epoch 0
    with pytest.raises(ValueError, match="3 examples cannot fill one batch of 5"):
        Batches(3, 5, seed=7)


def test_length_grouped_batches_pad_less_cap_rows_times_longest_and_epochs_chain():
    lengths = np.random.default_rng(0).integers(5, 200, size=7000)
    grouped, shuffled = epoch_batches(7000, 32, 1, 0, lengths), epoch_batches(7000, 32, 1, 0)
    padded = [sum(len(b) * lengths[b].max() - lengths[b].sum() for b in batches) for batches in (grouped, shuffled)]
    assert padded[0] < padded[1] / 10  # similar lengths in a batch: little padding
    assert len(grouped) == len(shuffled) == 7000 // 32  # a group holds 64 whole batches: the last one drops the tail
    assert len({int(i) for b in grouped for i in b}) == 32 * len(grouped)  # no row twice in an epoch
    assert {int(i) for b in grouped[:3] for i in b} != {int(i) for b in shuffled[:3] for i in b}
    capped = epoch_batches(7000, 32, 1, 0, lengths, max_batch_tokens=1000)
    assert all(1 <= len(b) <= 32 and len(b) * lengths[b].max() <= 1000 for b in capped)
    assert any(len(b) < 32 for b in capped) and any(len(b) == 32 for b in capped)
    batches = Batches(7000, 32, 1, lengths, max_batch_tokens=1000)
    sizes = [len(epoch_batches(7000, 32, 1, epoch, lengths, 1000)) for epoch in range(3)]
    assert len(set(sizes)) > 1  # with a cap, epochs differ in length
    assert np.array_equal(batches.at(sizes[0] + 2), epoch_batches(7000, 32, 1, 1, lengths, 1000)[2])
    assert np.array_equal(batches.at(3), capped[3]) and batches.epochs(sizes[0] + sizes[1]) == 2.0


@pytest.mark.parametrize("native", [True, False])
def test_precision_auto_is_bf16_only_where_the_hardware_computes_it(monkeypatch, native):
    """On a CPU without AVX-512 BF16 or AMX, bf16 autocast is emulated and far slower than float32: every trainer's
    auto must then run float32, and record what ran."""
    monkeypatch.setattr(training, "bf16_native", lambda device: native)
    expected = "bf16" if native else "fp32"
    assert training.resolve_precision("auto", "cpu") == expected
    assert training.resolve_precision("fp32", "cpu") == "fp32" and training.resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(SystemExit, match="--precision must be one of auto, bf16, fp32, got 'half'"):
        training.resolve_precision("half", "cpu")
    assert glyph_train.parse_config(["--corpus", "c", "--out", "o"]).precision == expected
    geolip = geolip_train.parse_config(["--out", "o"])
    assert geolip.precision == expected and geolip.teacher_precision == expected
    assert geolip_train.parse_config(["--out", "o", "--precision", "fp32"]).precision == "fp32"


def test_float16_storage_loads_as_float32_equal_to_the_rounded_model_and_refuses_overflow(tmp_path):
    """save_stored halves the file, keeps config.json's compute dtype float32, leaves the model in memory equal to
    what the folder loads as, and refuses a weight float16 cannot hold instead of saving inf."""
    from safetensors import safe_open
    from transformers import AutoModel, BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64))
    original = model.embeddings.word_embeddings.weight.detach().clone()
    training.save_stored(model, tmp_path / "half", "float16")
    with safe_open(str(tmp_path / "half" / "model.safetensors"), "pt") as stored:
        assert {stored.get_slice(key).get_dtype() for key in stored.keys()} == {"F16"}
    loaded = AutoModel.from_pretrained(tmp_path / "half")
    assert next(loaded.parameters()).dtype == torch.float32
    for (name, mine), (_, theirs) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(mine, theirs), name
    assert not torch.equal(model.embeddings.word_embeddings.weight, original)  # rounded in memory too
    torch.testing.assert_close(model.embeddings.word_embeddings.weight, original, atol=1e-3, rtol=1e-3)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[0, 0] = 1e6
    with pytest.raises(SystemExit, match="word_embeddings.weight holds values outside float16"):
        training.save_stored(model, tmp_path / "overflow", "float16")
    with pytest.raises(SystemExit, match="--save-dtype must be one of"):
        training.save_stored(model, tmp_path / "bad", "int8")
