# Generated from shared_modeling/amoe.py by `make vendor`. Do not edit: edit the source and regenerate.
"""AMOE arms: small adapters on a frozen trunk's residual stream, mixed per token by a sinh/cosh dispatch.

The maths is the contract in ../shared/specs/amoe.md. An arm has one `ArmSite` after every transformer block; a
`Dispatch` has one `BlockDispatch` per block; `AmoeLayer` wraps a trunk layer (kept as `base_layer`) and adds

    y = x + sum over ENABLED arms k of (w_k / z) * delta_k(x),   w_k = sinh(u_k),  z = sum over ALL arms cosh(u_j)

to the layer's output x. With no arm enabled the layer returns its base layer's output object untouched, which is
the toggle law: the trunk's outputs stay bit-identical. Legend: N tokens (packed), D hidden, S slots (64),
G slot groups (16) of width 4, K codebook atoms (64), A arms in the roster.
"""

import hashlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

SLOTS, GROUP_WIDTH, ATOMS, HEAD_WIDTH = 64, 4, 64, 178
KEY_WIDTH = 64  # width of the dispatch's fixed key projection
TAU = 0.1
GATE_INIT = -3.0


def sinh_cosh_mix(logits, values):
    """sum_k sinh(u_k) v_k / sum_k cosh(u_k) over the last axis of `logits` (..., K) with values (K, W), computed
    with max|u| subtracted before exponentiating so large |u| (small tau) stays finite. The 1/2 of sinh and cosh
    cancels. Written for few memory passes over (..., K): this is the hot loop of an arm on a CPU."""
    shift = torch.maximum(logits.amax(dim=-1, keepdim=True), -logits.amin(dim=-1, keepdim=True))  # max|u|
    positive = (logits - shift).exp_()  # e^(u - shift)
    negative = (logits + shift).neg_().exp_()  # e^(-u - shift)
    denominator = positive.sum(dim=-1, keepdim=True) + negative.sum(dim=-1, keepdim=True)
    return (positive @ values - negative @ values) / denominator


class ArmSite(nn.Module):
    """One arm at one block: slots -> sinh/cosh address over a codebook -> ReLU^2 head -> sigmoid gate.
    136,599 parameters at D = 512. The output projection is zero-initialised, so a fresh site emits exact zeros."""

    def __init__(self, hidden_size, tau=TAU):
        super().__init__()
        self.tau = tau
        self.slots = nn.Linear(hidden_size, SLOTS, bias=False)
        nn.init.orthogonal_(self.slots.weight)
        self.codebook = nn.Parameter(F.normalize(torch.randn(ATOMS, GROUP_WIDTH), dim=-1))
        self.head_in = nn.Linear(SLOTS, HEAD_WIDTH)
        self.head_norm = nn.LayerNorm(HEAD_WIDTH)
        self.head_out = nn.Linear(HEAD_WIDTH, hidden_size)
        nn.init.zeros_(self.head_out.weight)
        nn.init.zeros_(self.head_out.bias)
        self.gate = nn.Parameter(torch.tensor(GATE_INIT))

    def forward(self, hidden):
        """hidden (N, D) -> delta (N, D)."""
        slots = F.normalize(self.slots(hidden).unflatten(-1, (SLOTS // GROUP_WIDTH, GROUP_WIDTH)), dim=-1)  # (N, G, 4)
        atoms = F.normalize(self.codebook, dim=-1)  # (K, 4)
        addressed = sinh_cosh_mix(slots @ (atoms.T / self.tau), atoms)  # (N, G, 4); 1/tau on the small side
        features = F.relu(self.head_in(addressed.flatten(-2))) ** 2  # (N, 178)
        return torch.sigmoid(self.gate) * self.head_out(self.head_norm(features))  # (N, D)


class Arm(nn.Module):
    """One named arm: an ArmSite after each of the trunk's blocks (state keys blocks.{i}.{param})."""

    def __init__(self, hidden_size, num_blocks, tau=TAU):
        super().__init__()
        self.blocks = nn.ModuleList(ArmSite(hidden_size, tau) for _ in range(num_blocks))


class BlockDispatch(nn.Module):
    """Per-token routing at one block: a fixed seeded orthonormal key projection K and one trainable key per arm."""

    def __init__(self, hidden_size, num_arms, seed, tau=TAU):
        super().__init__()
        if hidden_size < KEY_WIDTH:
            raise ValueError(f"the dispatch projects onto {KEY_WIDTH} orthonormal keys: hidden_size must be at least "
                             f"{KEY_WIDTH}, got {hidden_size}")
        self.tau = tau
        generator = torch.Generator().manual_seed(seed)
        keys = torch.linalg.qr(torch.randn(hidden_size, KEY_WIDTH, generator=generator)).Q.T  # (64, D) orthonormal rows
        self.register_buffer("key_projection", keys.contiguous())
        self.routing_keys = nn.Parameter(torch.empty(num_arms, KEY_WIDTH))
        nn.init.orthogonal_(self.routing_keys)

    def forward(self, hidden):
        """hidden (N, D) -> w / z (N, A): sinh(u_k) / sum over the whole roster of cosh(u_j)."""
        token_keys = F.normalize(hidden @ self.key_projection.T, dim=-1)  # (N, 64)
        logits = token_keys @ F.normalize(self.routing_keys, dim=-1).T / self.tau  # (N, A)
        return sinh_cosh_mix(logits, torch.eye(logits.shape[-1], dtype=logits.dtype, device=logits.device))


class Dispatch(nn.Module):
    """The routing of one collective: a BlockDispatch per block; row k of every block belongs to roster[k]."""

    def __init__(self, roster, hidden_size, num_blocks, seed=0, tau=TAU):
        super().__init__()
        if len(set(roster)) != len(roster) or not roster:
            raise ValueError(f"a roster lists distinct arm names, at least one: {roster}")
        self.roster = list(roster)
        self.blocks = nn.ModuleList(BlockDispatch(hidden_size, len(roster), seed + i, tau) for i in range(num_blocks))


class AmoeLayer(nn.Module):
    """A trunk layer wrapped with the arms' sites at its index. `enabled` (a list shared by every wrapped layer of
    one model) names the arms that contribute; with none enabled the base layer's output is returned as is."""

    def __init__(self, base_layer, index, arms, dispatch, enabled):
        super().__init__()
        self.base_layer = base_layer
        self.index = index
        self.sites = nn.ModuleDict({name: arms[name].blocks[index] for name in dispatch.roster})
        self.dispatch = dispatch.blocks[index]
        self.roster = dispatch.roster
        self.enabled = enabled

    def forward(self, hidden, *args, **kwargs):
        output = self.base_layer(hidden, *args, **kwargs)  # (N, D) packed tokens
        if not self.enabled:
            return output
        weights = self.dispatch(output)  # (N, A)
        mixed = output
        for k, name in enumerate(self.roster):
            if name in self.enabled:
                mixed = torch.addcmul(mixed, weights[:, k:k + 1], self.sites[name](output))  # x + (w_k/z) delta_k
        return mixed


def wrap_layers(layers, arms, dispatch, enabled):
    """Replace each entry of the ModuleList `layers` by an AmoeLayer around it, in place."""
    missing = [name for name in dispatch.roster if name not in arms]
    if missing:
        raise KeyError(f"no arm loaded for roster entries {missing}")
    for index in range(len(layers)):
        if isinstance(layers[index], AmoeLayer):
            raise ValueError("these layers already carry arms; detach first")
        layers[index] = AmoeLayer(layers[index], index, arms, dispatch, enabled)


def unwrap_layers(layers):
    """Put every wrapped layer's very own base_layer object back, in place."""
    for index in range(len(layers)):
        if isinstance(layers[index], AmoeLayer):
            layers[index] = layers[index].base_layer


# ---- files: safetensors only, header metadata checked on load -------------------------------------------------------

ARM_FORMAT, DISPATCH_FORMAT, FORMAT_VERSION = "amoe-arm", "amoe-dispatch", "1"


def content_hash(tensors):
    """sha256 over a {name: tensor} dict: sorted names, dtypes, shapes and bytes. Used for files and trunks alike."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def trunk_hash(trunk):
    """The trunk identity arms record: content_hash of the trunk module's state dict with floating tensors rounded
    to bfloat16, so one trunk has one identity whether it runs in float32 or bfloat16, while any trained change of
    its weights still changes it."""
    return content_hash({name: tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
                         for name, tensor in trunk.state_dict().items()})


def _read(path, expected_format):
    """(tensors, metadata) of an AMOE file, after checking its format and content hash; clear errors otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AMOE file {path} not found")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as error:  # safetensors raises its own error types for truncated or garbled files
        raise ValueError(f"{path} is not a readable safetensors file (truncated or corrupted?): {error}") from error
    if metadata.get("format") != expected_format:
        raise ValueError(f"{path} is not an {expected_format} file (format {metadata.get('format')!r})")
    if metadata.get("content_hash") != content_hash(tensors):
        raise ValueError(f"{path}: content hash mismatch, the tensors were changed or corrupted")
    return tensors, metadata


def _check_trunk(path, metadata, trunk_hash, force):
    if trunk_hash is not None and metadata["trunk_hash"] != trunk_hash and not force:
        raise ValueError(f"{path} was trained on trunk {metadata['trunk_hash'][:12]}, not this one "
                         f"({trunk_hash[:12]}): arms do not transfer between trunks (force=True overrides)")


def save_arm(path, arm, name, trunk_hash, meta):
    """amoe/arms/<name>.safetensors: tensors blocks.{i}.{param}; metadata format, version, name, trunk_hash,
    meta (JSON), content_hash."""
    tensors = {key: value.detach().contiguous() for key, value in arm.state_dict().items()}
    metadata = {"format": ARM_FORMAT, "version": FORMAT_VERSION, "name": name, "trunk_hash": trunk_hash,
                "meta": json.dumps(meta, sort_keys=True), "content_hash": content_hash(tensors)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)


def load_arm(path, hidden_size, num_blocks, trunk_hash=None, force=False):
    """(Arm, metadata) from a file written by save_arm; refuses another trunk's arm unless force."""
    tensors, metadata = _read(path, ARM_FORMAT)
    _check_trunk(path, metadata, trunk_hash, force)
    arm = Arm(hidden_size, num_blocks)
    arm.load_state_dict(tensors)
    return arm, metadata


def save_dispatch(path, dispatch, trunk_hash):
    """amoe/<collective>/dispatch.safetensors: key projections and routing keys; the roster ORDER in metadata."""
    tensors = {key: value.detach().contiguous() for key, value in dispatch.state_dict().items()}
    metadata = {"format": DISPATCH_FORMAT, "version": FORMAT_VERSION, "roster": json.dumps(dispatch.roster),
                "tau": repr(dispatch.blocks[0].tau), "trunk_hash": trunk_hash, "content_hash": content_hash(tensors)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=metadata)


def load_dispatch(path, hidden_size, num_blocks, trunk_hash=None, force=False):
    """(Dispatch, metadata) from a file written by save_dispatch; the roster and its order come from the file."""
    tensors, metadata = _read(path, DISPATCH_FORMAT)
    _check_trunk(path, metadata, trunk_hash, force)
    dispatch = Dispatch(json.loads(metadata["roster"]), hidden_size, num_blocks, tau=float(metadata["tau"]))
    dispatch.load_state_dict(tensors)
    return dispatch, metadata
