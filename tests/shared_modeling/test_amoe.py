"""shared_modeling/amoe.py against the contract in ../shared/specs/amoe.md: sizes, the sinh/cosh maths, inert
fresh arms, and the toggle law on a wrapped encoder (arms off == bare trunk, bit for bit)."""

import json
import math

import numpy as np
import pytest
import torch

from safetensors import safe_open
from safetensors.torch import save_file

from shared_modeling.amoe import (ARM_FORMAT, FORMAT_VERSION, Arm, ArmSite, ArmSwitch, Dispatch, add_arms, arm_weights,
                                  file_hash, load_arm, load_dispatch, mix_matrices, save_arm, save_dispatch,
                                  sinh_cosh_mix, unwrap_layers, wrap_layers)
from helpers import trained_like
from shared_modeling.identity import content_hash, trunk_hash
from shared_modeling.layers import Encoder


def test_parameter_counts_match_the_spec():
    assert sum(p.numel() for p in ArmSite(512).parameters()) == 136_599
    assert sum(p.numel() for p in Arm(512, 12).parameters()) == 1_639_188  # "1.64M per arm"


def test_sinh_cosh_mix_is_exact_and_stable():
    torch.manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(6, 4, dtype=torch.float64), dim=-1)
    atoms = torch.nn.functional.normalize(torch.randn(5, 4, dtype=torch.float64), dim=-1)
    values = torch.randn(5, 3, dtype=torch.float64)
    for tau in (0.1, 0.02):  # 0.02: |u| up to 50, and e^50 overflows float16
        u = vectors @ atoms.T / tau
        expected = torch.sinh(u) @ values / torch.cosh(u).sum(dim=-1, keepdim=True)
        torch.testing.assert_close(mix(vectors, atoms, values, tau), expected)
        single = mix(vectors.float(), atoms.float(), values.float(), tau)
        assert single.dtype == torch.float32 and torch.isfinite(single).all()
        torch.testing.assert_close(single.double(), expected, atol=1e-5, rtol=1e-5)
    low = mix(vectors.bfloat16(), atoms.bfloat16(), values.bfloat16(), 0.1)
    assert low.dtype == torch.bfloat16  # computed in float32, returned in the caller's dtype
    assert torch.autograd.gradcheck(lambda x: mix(x, atoms, values, 0.1), (vectors.clone().requires_grad_(),))
    with pytest.raises(ValueError, match="tau must exceed 1/80"):
        mix_matrices([atoms], [values], [0.01])
    # several codebooks at once (block-diagonal): each vector column against its own codebook and tau
    other_atoms = torch.nn.functional.normalize(torch.randn(7, 4, dtype=torch.float64), dim=-1)
    other_values = torch.randn(7, 3, dtype=torch.float64)
    together = sinh_cosh_mix(torch.stack([vectors, vectors.flip(0)], 1),
                             mix_matrices([atoms, other_atoms], [values, other_values], [0.1, 0.05]))
    torch.testing.assert_close(together[:, 0], mix(vectors, atoms, values, 0.1))
    torch.testing.assert_close(together[:, 1], mix(vectors.flip(0), other_atoms, other_values, 0.05))


def mix(vectors, atoms, values, tau):
    """sinh_cosh_mix of (M, W) vectors against one codebook."""
    return sinh_cosh_mix(vectors[:, None], mix_matrices([atoms], [values], [tau]))[:, 0]


def spec_delta(site, hidden):
    """One arm site's delta written straight from the spec, token by token: the reference for add_arms."""
    deltas = []
    for x in hidden:
        s = torch.nn.functional.normalize((site.slots.weight @ x).view(16, 4), dim=-1)  # 16 slot groups of width 4
        atoms = torch.nn.functional.normalize(site.codebook, dim=-1)
        u = s @ atoms.T / site.tau  # (16, 64)
        m = (torch.sinh(u) @ atoms) / torch.cosh(u).sum(dim=-1, keepdim=True)
        f = site.head_norm(torch.relu(site.head_in(m.flatten())) ** 2)
        deltas.append(torch.sigmoid(site.gate) * site.head_out(f))
    return torch.stack(deltas)


@pytest.mark.parametrize("arms", [1, 3])
def test_add_arms_computes_the_spec_for_every_arm_at_once(arms):
    torch.manual_seed(arms)
    sites = [ArmSite(64).double() for _ in range(arms)]
    with torch.no_grad():
        for site in sites:  # trained-like: every parameter away from its initial value
            for parameter in site.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.3)
    hidden, weights = torch.randn(5, 64, dtype=torch.float64), torch.rand(5, arms, dtype=torch.float64) * 2 - 1
    probe = torch.randn(5, 64, dtype=torch.float64)  # a random direction to take gradients along

    def values_and_gradients(compute):
        for site in sites:
            site.zero_grad()
        output = compute()
        (output * probe).sum().backward()
        return output.detach(), [p.grad.clone() for site in sites for p in site.parameters()]

    def fused():  # as AmoeLayer calls it
        arms = arm_weights(sites)
        return add_arms(hidden, hidden @ arms.slot_weight.T, weights, arms)

    fused, fused_grads = values_and_gradients(fused)
    spec, spec_grads = values_and_gradients(
        lambda: hidden + sum(weights[:, k:k + 1] * spec_delta(site, hidden) for k, site in enumerate(sites)))
    torch.testing.assert_close(fused, spec)
    assert not torch.equal(fused, hidden)
    for fused_grad, spec_grad in zip(fused_grads, spec_grads):
        torch.testing.assert_close(fused_grad, spec_grad)


def test_dispatch_weights_one_arm_is_tanh_and_the_budget_is_below_one():
    torch.manual_seed(0)
    hidden = torch.randn(50, 64)
    single = Dispatch(["a"], 64, num_blocks=1).blocks[0]
    keys = torch.nn.functional.normalize(hidden @ single.key_projection.T, dim=-1)
    u = keys @ torch.nn.functional.normalize(single.routing_keys, dim=-1).T / single.tau
    torch.testing.assert_close(single(hidden @ single.key_projection.T, single.routing_mix()), torch.tanh(u))
    three = Dispatch(["a", "b", "c"], 64, num_blocks=1).blocks[0]
    weights = three(hidden @ three.key_projection.T, three.routing_mix())
    assert (weights.abs().sum(dim=-1) < 1).all() and (weights < 0).any()  # inhibition is allowed


def test_key_projection_is_seeded_and_orthonormal():
    first, second = Dispatch(["a"], 64, 2, seed=7), Dispatch(["a"], 64, 2, seed=7)
    for one, two in zip(first.blocks, second.blocks):
        assert torch.equal(one.key_projection, two.key_projection)
    keys = first.blocks[0].key_projection
    torch.testing.assert_close(keys @ keys.T, torch.eye(keys.shape[0]), atol=1e-5, rtol=0)
    assert not torch.equal(first.blocks[0].key_projection, first.blocks[1].key_projection)
    with pytest.raises(ValueError, match="at least 64"):
        Dispatch(["a"], 32, 1)


def tiny_encoder():
    torch.manual_seed(0)
    return Encoder(2, 64, 2, 128, 1e-12, 0.1).eval()


def encode(encoder, hidden, mask):
    with torch.no_grad():
        return encoder(hidden, mask, "sdpa")


def test_toggle_law_on_a_wrapped_encoder():
    encoder = tiny_encoder()
    hidden, mask = torch.randn(3, 7, 64), torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    bare = encode(encoder, hidden, mask)
    originals = list(encoder.layers)
    arms = {"a": trained_like(Arm(64, 2)), "b": trained_like(Arm(64, 2))}
    switch = ArmSwitch(["a", "b"])
    wrap_layers(encoder.layers, arms, Dispatch(["a", "b"], 64, 2), switch)
    assert not torch.equal(encode(encoder, hidden, mask), bare)  # trained arms change the output
    switch.set([])
    assert torch.equal(encode(encoder, hidden, mask), bare)  # every arm off == bare, bit for bit
    switch.set(["b"])
    only_b = encode(encoder, hidden, mask)
    assert not torch.equal(only_b, bare)
    switch.set([])
    unwrap_layers(encoder.layers)
    assert all(now is before for now, before in zip(encoder.layers, originals))  # the very same objects back
    assert torch.equal(encode(encoder, hidden, mask), bare)
    with pytest.raises(KeyError, match="no arm loaded"):
        wrap_layers(encoder.layers, {"a": arms["a"]}, Dispatch(["a", "b"], 64, 2), switch)


def test_a_fresh_arm_is_exactly_inert():
    encoder = tiny_encoder()
    hidden, mask = torch.randn(2, 5, 64), torch.ones(2, 5, dtype=torch.long)
    bare = encode(encoder, hidden, mask)
    wrap_layers(encoder.layers, {"fresh": Arm(64, 2)}, Dispatch(["fresh"], 64, 2), ArmSwitch(["fresh"]))
    assert torch.equal(encode(encoder, hidden, mask), bare)
    assert math.isclose(torch.sigmoid(torch.tensor(-3.0)).item(), torch.sigmoid(Arm(64, 1).blocks[0].gate).item())



def test_weights_kept_between_calls_follow_every_change_of_the_arms():
    """Without autograd an AmoeLayer keeps what it derives from the parameters (AmoeLayer.derived_weights); every
    way of changing an arm must still reach the output, which must equal a pass that derives everything afresh."""
    encoder = tiny_encoder()
    hidden, mask = torch.randn(2, 6, 64), torch.ones(2, 6, dtype=torch.long)
    arms = {"a": trained_like(Arm(64, 2)), "b": trained_like(Arm(64, 2))}
    switch = ArmSwitch(["a", "b"])
    wrap_layers(encoder.layers, arms, Dispatch(["a", "b"], 64, 2), switch)

    def kept_and_fresh():
        kept = encode(encoder, hidden, mask)
        with torch.enable_grad():  # autograd on: derived afresh, nothing kept
            fresh = encoder(hidden, mask, "sdpa").detach()
        assert encoder.layers[0].kept is None
        return kept, fresh

    def check(change):
        before = encode(encoder, hidden, mask)
        assert encoder.layers[0].kept is not None
        with torch.no_grad():
            change()
        kept, fresh = kept_and_fresh()
        torch.testing.assert_close(kept, fresh, rtol=0, atol=1e-6)
        assert not torch.equal(kept, before)

    site = arms["a"].blocks[1]
    check(lambda: site.head_out.weight.add_(0.25))  # in place, as an optimizer step does
    check(lambda: arms["b"].load_state_dict(trained_like(Arm(64, 2)).state_dict()))  # copy_ into every parameter
    check(lambda: setattr(site.head_in.weight, "data", site.head_in.weight.data * 2))  # new storage, same object
    check(lambda: setattr(site, "codebook", torch.nn.Parameter(torch.randn(64, 4))))  # a new parameter object
    check(lambda: setattr(site, "tau", 0.05))
    check(lambda: switch.set(["b"]))

# ---- files -------------------------------------------------------------------------------------------------------

def test_arm_and_dispatch_files_round_trip_and_keep_the_roster_order(tmp_path):
    arm = trained_like(Arm(64, 2))
    save_arm(tmp_path / "arms" / "equiv.safetensors", arm, "equiv", "trunk-1", {"data": "snli"})
    loaded, metadata = load_arm(tmp_path / "arms" / "equiv.safetensors", 64, 2, trunk_hash="trunk-1")
    assert metadata["name"] == "equiv" and json.loads(metadata["meta"]) == {"data": "snli"}
    assert content_hash(loaded.state_dict()) == content_hash(arm.state_dict())
    assert sorted(loaded.state_dict())[0].startswith("blocks.0.")

    dispatch = Dispatch(["paraphrase", "equiv"], 64, 2, seed=3)
    save_dispatch(tmp_path / "collective" / "dispatch.safetensors", dispatch, "trunk-1")
    restored, _ = load_dispatch(tmp_path / "collective" / "dispatch.safetensors", 64, 2, trunk_hash="trunk-1")
    assert restored.roster == ["paraphrase", "equiv"]
    hidden = torch.randn(5, 64)
    keys = hidden @ dispatch.blocks[1].key_projection.T
    assert torch.equal(restored.blocks[1].key_projection, dispatch.blocks[1].key_projection)
    assert torch.equal(restored.blocks[1](keys, restored.blocks[1].routing_mix()),
                       dispatch.blocks[1](keys, dispatch.blocks[1].routing_mix()))


def test_arm_files_refuse_other_trunks_corruption_truncation_and_wrong_kinds(tmp_path):
    path = tmp_path / "arm.safetensors"
    save_arm(path, trained_like(Arm(64, 1)), "equiv", "trunk-1", {})
    with pytest.raises(ValueError, match="do not transfer"):
        load_arm(path, 64, 1, trunk_hash="trunk-2")
    load_arm(path, 64, 1, trunk_hash="trunk-2", force=True)
    with pytest.raises(ValueError, match="not an amoe-dispatch file"):
        load_dispatch(path, 64, 1)

    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # one flipped bit pattern inside the last tensor
    corrupted = tmp_path / "corrupted.safetensors"
    corrupted.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="content hash mismatch"):
        load_arm(corrupted, 64, 1)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        load_arm(truncated, 64, 1)
    with pytest.raises(FileNotFoundError):
        load_arm(tmp_path / "missing.safetensors", 64, 1)



def rewrite_header(path, **changes):
    """Rewrite fields of a safetensors file's header, keeping its tensors and its recorded content_hash."""
    with safe_open(str(path), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {name: handle.get_tensor(name) for name in handle.keys()}
    save_file(tensors, str(path), metadata={**metadata, **changes})


@pytest.mark.parametrize("file, changes", [
    ("arms/equiv.safetensors", {"name": "paraphrase"}),
    ("arms/equiv.safetensors", {"trunk_hash": "another"}),
    ("collective/dispatch.safetensors", {"roster": json.dumps(["equiv", "paraphrase"])}),
    ("collective/dispatch.safetensors", {"tau": "0.05"}),
])
def test_the_content_hash_covers_the_header_fields_that_change_behaviour(model_with_arms, file, changes):
    folder, model = model_with_arms
    rewrite_header(folder / "amoe" / file, **changes)
    with pytest.raises(ValueError, match="content hash mismatch"):
        model.attach_amoe(force=True)


def test_swapped_arm_files_and_rosters_leaving_the_arms_folder_are_refused(model_with_arms, tmp_path):
    folder, model = model_with_arms
    arms = folder / "amoe" / "arms"
    (arms / "equiv.safetensors").rename(tmp_path / "equiv.safetensors")
    (arms / "paraphrase.safetensors").rename(arms / "equiv.safetensors")
    (tmp_path / "equiv.safetensors").rename(arms / "paraphrase.safetensors")
    with pytest.raises(ValueError, match="holds arm 'equiv', not 'paraphrase'"):
        model.attach_amoe()
    for name in ("../../outside", "sub/arm", ".hidden", ""):
        with pytest.raises(ValueError, match="plain file stems"):
            Dispatch([name], 64, 2)
    with pytest.raises(ValueError, match="plain file stems"):
        save_arm(tmp_path / "x.safetensors", Arm(64, 2), "../x", "trunk-1", {})


def test_non_finite_weights_are_refused_when_arms_are_saved_or_loaded(tmp_path):
    arm = trained_like(Arm(64, 1))
    with torch.no_grad():
        arm.blocks[0].head_out.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        save_arm(tmp_path / "nan.safetensors", arm, "nan", "trunk-1", {})
    tensors = {key: value.contiguous() for key, value in arm.state_dict().items()}  # written past save_arm's check,
    metadata = {"format": ARM_FORMAT, "version": FORMAT_VERSION, "name": "nan", "trunk_hash": "trunk-1"}  # hash valid
    save_file(tensors, str(tmp_path / "nan.safetensors"), metadata={**metadata, "meta": "{}",
                                                                     "content_hash": file_hash(tensors, metadata)})
    with pytest.raises(ValueError, match="non-finite.*blocks.0.head_out.weight"):
        load_arm(tmp_path / "nan.safetensors", 64, 1)

# ---- the model API on a tiny captionbert ---------------------------------------------------------------------------

def embed(model):
    return model._amoe_fingerprint()


def test_embedding_space_names_the_trunk_and_the_enabled_arms(model_with_arms):
    _, model = model_with_arms
    bare = model.embedding_space
    assert len(bare) == 12 and model.to(torch.bfloat16).embedding_space == bare  # precision is not a new space
    model.float()
    model.attach_amoe()
    both = model.embedding_space
    assert both.startswith(bare + "+amoe(paraphrase,equiv):")
    with model.amoe_off():
        assert model.embedding_space == bare  # every arm off is the bare trunk, bit for bit
    model.set_amoe(["equiv"])
    assert model.embedding_space.startswith(bare + "+amoe(equiv):") and model.embedding_space != both
    model.set_amoe(["paraphrase", "equiv"])
    assert model.embedding_space == both
    model.detach_amoe()
    assert model.embedding_space == bare
    with torch.no_grad():
        model.encoder.layers[0].attention.qkv.weight.add_(0.01)  # another training run: another space
    assert model.embedding_space != bare


def test_model_toggle_law_attach_off_set_detach_cycles(model_with_arms):
    _, model = model_with_arms
    bare, layers = embed(model), list(model.encoder.layers)
    for _ in range(2):  # repeated cycles
        model.attach_amoe()
        on = embed(model)
        assert not torch.equal(on, bare)
        with model.amoe_off():
            assert torch.equal(embed(model), bare)
        assert torch.equal(embed(model), on)  # amoe_off restores the previous state
        model.set_amoe([])
        assert torch.equal(embed(model), bare)
        model.set_amoe(["equiv"])
        assert not torch.equal(embed(model), bare) and not torch.equal(embed(model), on)
        detached = model.detach_amoe()
        assert list(detached["arms"]) == ["paraphrase", "equiv"]
        assert all(now is before for now, before in zip(model.encoder.layers, layers))
        assert torch.equal(embed(model), bare)


def test_model_attach_errors(model_with_arms, tmp_path):
    folder, model = model_with_arms
    with pytest.raises(ValueError, match="roster"):
        model.attach_amoe(names=["equiv", "paraphrase"])  # the wrong order
    with pytest.raises(RuntimeError, match="no arms attached"):
        model.set_amoe([])
    model.attach_amoe(names=["paraphrase", "equiv"])
    with pytest.raises(ValueError, match="unknown arms"):
        model.set_amoe(["simplify"])
    with pytest.raises(RuntimeError, match="attached already"):
        model.attach_amoe()
    with pytest.raises(RuntimeError, match="before save_pretrained"):
        model.save_pretrained(tmp_path / "saved")
    model.detach_amoe()

    with torch.no_grad():  # another trunk: the same architecture with one weight changed
        model.head.dense.bias.add_(1.0)
    with pytest.raises(ValueError, match="do not transfer"):
        model.attach_amoe()
    model.attach_amoe(force=True)
    model.detach_amoe()
    with pytest.raises(FileNotFoundError, match="ships no AMOE arms"):
        model.attach_amoe(path=tmp_path / "nowhere")


def test_arms_in_memory_attach_through_the_same_entry_point_and_keep_training(model_with_arms):
    _, model = model_with_arms
    bare = embed(model)
    torch.manual_seed(2)
    arm, dispatch = trained_like(Arm(64, 2)), Dispatch(["fresh"], 64, 2)
    with pytest.raises(ValueError, match="pass both or neither"):
        model.attach_amoe(arms={"fresh": arm})
    model.attach_amoe(arms={"fresh": arm}, dispatch=dispatch)
    assert model._amoe.arms["fresh"] is arm and model._amoe.dispatch is dispatch  # not copies: training updates them
    on = embed(model)
    assert not torch.equal(on, bare)
    with torch.no_grad():
        next(arm.parameters()).add_(0.1)  # an optimiser step on the arm changes the attached model
    assert not torch.equal(embed(model), on)
    with model.amoe_off():
        assert torch.equal(embed(model), bare)
    assert model.detach_amoe()["arms"]["fresh"] is arm
    with torch.no_grad():  # a trunk changed while the arms were on: the toggle law fails when they leave
        model.attach_amoe(arms={"fresh": arm}, dispatch=dispatch)
        model.head.dense.bias.add_(1.0)
    with pytest.raises(RuntimeError, match="after detaching"):
        model.detach_amoe()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_arms_detach_after_the_model_changes_dtype(model_with_arms, dtype):
    """attach_amoe(); model.to(half); detach_amoe(): the float32 fingerprint no longer applies, so the toggle law is
    checked as the model is now (every arm off, before == the bare trunk, after)."""
    _, model = model_with_arms
    model.attach_amoe()
    model.to(dtype)
    on = embed(model)
    with model.amoe_off():
        off = embed(model)
    assert not torch.equal(on, off)
    model.detach_amoe()
    assert model.dtype == dtype and torch.equal(embed(model), off)


def test_one_encode_call_keeps_one_roster_while_another_thread_sets_another(model_with_arms):
    """set_amoe between two batches of one encode call (as another thread may do) changes the next call, not the
    rest of this one."""
    _, model = model_with_arms
    texts = ["a dog runs", "two men play chess", "a red car", "rain on the window"]
    model.attach_amoe()
    on = model.encode(texts, batch_size=1)
    with model.amoe_off():
        off = model.encode(texts, batch_size=1)
    embed_ids = model.embed_ids

    def set_between_batches(rows):
        embeddings = embed_ids(rows)
        model.set_amoe([])
        return embeddings

    model.embed_ids = set_between_batches
    assert np.array_equal(model.encode(texts, batch_size=1), on)  # the roster the call started with, every batch
    assert np.array_equal(model.encode(texts, batch_size=1), off)  # the next call reads the new one
    del model.embed_ids


def test_loading_the_bare_model_does_not_import_the_amoe_code(model_with_arms):
    import subprocess
    import sys

    folder, _ = model_with_arms
    script = ("import sys\nfrom transformers import AutoModel\n"
              f"model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
              "loaded = lambda: [m for m in sys.modules if m.endswith('shared_amoe')]\n"
              "assert not loaded(), loaded()\nmodel.attach_amoe()\nassert loaded()\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


def test_toggle_law_survives_save_and_reload(model_with_arms, tmp_path):
    from transformers import AutoModel

    folder, model = model_with_arms
    bare = embed(model)
    model.attach_amoe()
    on = embed(model)
    detached = model.detach_amoe()
    trunk = trunk_hash(model)
    for name, arm in detached["arms"].items():
        save_arm(tmp_path / "copy" / "arms" / f"{name}.safetensors", arm, name, trunk, {})
    save_dispatch(tmp_path / "copy" / "collective" / "dispatch.safetensors", detached["dispatch"], trunk)
    reloaded = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    reloaded.attach_amoe(path=tmp_path / "copy")
    assert torch.equal(embed(reloaded), on)  # the arms' effect round-trips bit for bit
    with reloaded.amoe_off():
        assert torch.equal(embed(reloaded), bare)


def test_arms_run_in_the_trunks_dtype(model_with_arms):
    _, model = model_with_arms
    model.to(torch.bfloat16)
    bare = embed(model)
    model.attach_amoe()
    assert all(p.dtype == torch.bfloat16 for p in model._amoe.dispatch.parameters())
    assert not torch.equal(embed(model), bare)
    with model.amoe_off():
        assert torch.equal(embed(model), bare)
    model.detach_amoe()


def test_set_amoe_takes_any_iterable_of_names_and_refuses_a_str(model_with_arms):
    _, model = model_with_arms
    model.attach_amoe()
    only_equiv = model.embedding_space.split("+")[0] + "+amoe(equiv):"
    model.set_amoe(name for name in ["equiv"])  # a generator: read once, not emptied by the name check
    assert model.embedding_space.startswith(only_equiv)
    model.set_amoe({"equiv"})
    assert model.embedding_space.startswith(only_equiv)
    with pytest.raises(TypeError, match="not the str"):
        model.set_amoe("equiv")
    model.detach_amoe()


def test_one_forward_pass_sees_one_roster_whatever_changes_meanwhile(model_with_arms):
    """A set_amoe during a forward (here from a hook after the first block, while another thread runs a whole
    forward with the new roster) reaches the next forward, not the running one."""
    import threading

    _, model = model_with_arms
    model.attach_amoe()
    on = embed(model)
    model.set_amoe(["equiv"])
    only_equiv = embed(model)
    model.set_amoe(["paraphrase", "equiv"])
    seen = {}

    def toggle_mid_forward(module, args, output):
        handle.remove()
        model.set_amoe(["equiv"])
        other = threading.Thread(target=lambda: seen.update(other=embed(model)))
        other.start()
        other.join()

    handle = model.encoder.layers[0].register_forward_hook(toggle_mid_forward)
    assert torch.equal(embed(model), on)  # the roster the pass started with, in every block
    assert torch.equal(seen["other"], only_equiv)
    assert torch.equal(embed(model), only_equiv)  # the next pass sees the change
    model.detach_amoe()


def test_amoe_off_holds_for_the_calling_thread_only(model_with_arms):
    import threading

    _, model = model_with_arms
    bare = embed(model)
    model.attach_amoe()
    on = embed(model)
    entered, done, seen = threading.Event(), threading.Event(), {}

    def off_in_another_thread():
        with model.amoe_off():
            entered.set()
            done.wait(60)
            seen["inside"] = embed(model)

    other = threading.Thread(target=off_in_another_thread)
    other.start()
    assert entered.wait(60)
    assert torch.equal(embed(model), on)  # this thread keeps its arms while the other has them off
    done.set()
    other.join()
    assert torch.equal(seen["inside"], bare)
    model.detach_amoe()


@pytest.mark.slow  # Inductor compiles the arms' loops with g++ (minutes on 2 cores)
def test_compiled_arms_equal_eager_arms_and_arms_off_stays_the_bare_trunk(model_with_arms):
    """attach_amoe(compiled=True): the same embeddings as the eager arms (float32 rounding apart) on batches of
    several token counts (dynamic shapes: one compilation, padding included); every arm off is the bare trunk bit
    for bit, as the trunk's layers stay eager."""
    _, model = model_with_arms
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(1000, 30000, (rows, length), generator=generator) for rows, length in ((3, 7), (5, 23))]
    masks = [torch.ones_like(ids) for ids in batches]
    masks[1][2, 11:] = 0

    def embeddings():
        with torch.no_grad():
            return [embed(model)] + [model(ids, mask).pooler_output for ids, mask in zip(batches, masks)]

    bare = embeddings()
    model.attach_amoe()
    eager = embeddings()
    model.detach_amoe()
    assert not torch.allclose(eager[0], bare[0], atol=1e-3)  # the arms do change the embedding
    model.attach_amoe(compiled=True)
    try:
        assert all(torch.allclose(got, want, atol=1e-5) for got, want in zip(embeddings(), eager))
        with model.amoe_off():
            assert all(torch.equal(got, want) for got, want in zip(embeddings(), bare))
    finally:
        model.detach_amoe()
