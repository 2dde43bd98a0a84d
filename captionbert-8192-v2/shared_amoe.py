# Generated from shared_modeling/amoe.py by `make vendor`. Do not edit: edit the source and regenerate.
"""AMOE arms: small adapters on a frozen trunk's residual stream, mixed per token by a sinh/cosh dispatch.

The maths, which this file is the whole of (the classes below write out each term). An arm has one `ArmSite` after
every transformer block; a `Dispatch` has one `BlockDispatch` per block; `AmoeLayer` wraps a trunk layer (kept as
`base_layer`) and adds

    y = x + sum over ENABLED arms k of (w_k / z) * delta_k(x),   w_k = sinh(u_k),  z = sum over ALL arms cosh(u_j)

to the layer's output x (`add_arms` computes every enabled arm of a block at once). With no arm enabled the layer
returns its base layer's output object untouched, which is the toggle law: the trunk's outputs stay bit-identical.
Which arms are enabled is an `ArmSwitch`, shared by the wrapped layers of one model and read once per forward pass.
Legend: N tokens (packed), D hidden, S slots (64), G slot groups (16) of width 4, K codebook atoms (64), H head
width (178), A arms in the roster, A' of them enabled.
"""

import contextlib
import contextvars
import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from .shared_checks import check_finite
from .shared_identity import content_hash

SLOTS, GROUP_WIDTH, ATOMS, HEAD_WIDTH = 64, 4, 64, 178
KEY_WIDTH = 64  # width of the dispatch's fixed key projection
TAU = 0.1
GATE_INIT = -3.0


def mix_matrices(atoms, values, taus):
    """The two matrices of sinh_cosh_mix for A codebooks at once, from the unit atoms a (K, W), the values v (K, V)
    and the temperature tau of each codebook (three lists of length A): block-diagonal, one block per codebook,

        [a, -a]^T / tau over a last row of -1/tau, (A W + 1, A 2K);    [[v, 1], [-v, 1]], (A 2K, A (V + 1))."""
    if not all(1 / tau < 80 for tau in taus):
        raise ValueError(f"tau must exceed 1/80 for e^(-1/tau) to stay a normal float, got {list(taus)}")
    signed_atoms = [torch.cat([a, -a]).T / tau for a, tau in zip(atoms, taus)]  # (W, 2K) each
    shifts = torch.cat([block.new_full((1, block.shape[1]), -1 / tau) for block, tau in zip(signed_atoms, taus)], 1)
    signed_values = [torch.cat([torch.cat([v, ones], 1), torch.cat([-v, ones], 1)])
                     for v in values for ones in [v.new_ones(v.shape[0], 1)]]
    return torch.cat([torch.block_diag(*signed_atoms), shifts]), torch.block_diag(*signed_values)


def sinh_cosh_mix(vectors, matrices):
    """sum_k sinh(u_k) v_k / sum_k cosh(u_k) with u_k = <x, a_k> / tau for unit vectors x, each against its own
    codebook: vectors (M, A, W) -> (M, A, V), where matrices = mix_matrices of the A codebooks' unit atoms a_k,
    values v_k and taus.

    Stable for any tau > 1/80: as x and a_k are unit vectors, |u| <= 1/tau, so subtracting that bound (rather than
    each row's max|u|) keeps every e^(+-u - 1/tau) in [e^(-2/tau), 1] and the denominator above 128 e^(-1/tau).
    Written for few passes, as this is the hot loop of an arm: one matmul gives [u, -u] already shifted for every
    codebook (x gains a column of ones; block-diagonal, as a CPU multiplies one wide 2-D matrix far faster than a
    batch of thin ones), one in-place exp, and one matmul against [[v, 1], [-v, 1]] gives sum sinh(u) v and
    sum cosh(u) together (the 1/2s cancel). It runs in float32 at least, whatever the caller's dtype or autocast:
    a CPU exponentiates float32 twice as fast as bfloat16; the result comes back in the caller's dtype."""
    (count, codebooks), dtype = vectors.shape[:2], torch.promote_types(vectors.dtype, torch.float32)
    with torch.autocast(vectors.device.type, enabled=False):
        shifted_atoms, signed_values = (matrix.to(dtype) for matrix in matrices)
        flat = vectors.reshape(count, -1).to(dtype)
        exponentials = (torch.cat([flat, flat.new_ones(count, 1)], 1) @ shifted_atoms).exp_()  # e^(+-u - 1/tau)
        sums = (exponentials @ signed_values).view(count, codebooks, -1)  # (M, A, V + 1)
        return (sums[..., :-1] / sums[..., -1:]).to(vectors.dtype)


class ArmSite(nn.Module):
    """The parameters of one arm at one block: slots -> sinh/cosh address over a codebook -> ReLU^2 head -> sigmoid
    gate, 136,599 at D = 512. `add_arms` computes it. The output projection is zero-initialised, so a fresh site
    adds exact zeros."""

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


class ArmWeights(NamedTuple):
    """What add_arms needs of A' sites, derived from their parameters alone (arm_weights). Slot rows and W_in's
    inputs come in (group, arm, width) order, so that the arms' slot groups lie side by side in memory."""
    slot_weight: torch.Tensor  # (G A' 4, D) the slot projections P_k, rows in (group, arm, width) order
    mix: tuple  # mix_matrices of the sites' normalised codebooks, with the atoms as values
    head_in_weight: torch.Tensor  # (G A' 4, A' H) each W_in^T, block-diagonal over the arms
    head_in_bias: torch.Tensor  # (A' H,)
    gates: torch.Tensor  # (A',) sigmoid(g)
    out_weight: torch.Tensor  # (A' H + A', D) each (W_out diag(gamma))^T, then each W_out beta + b_out: the
    #                           LayerNorm's affine folded into the output projection
    eps: float  # LayerNorm's epsilon


def arm_weights(sites):
    """ArmWeights of the ArmSites `sites`; differentiable, so training derives them on every step."""
    count, groups = len(sites), SLOTS // GROUP_WIDTH
    hidden_size = sites[0].slots.weight.shape[1]
    slot_weight = torch.stack([site.slots.weight.view(groups, GROUP_WIDTH, hidden_size) for site in sites], 1)
    atoms = [F.normalize(site.codebook, dim=-1) for site in sites]
    one_hot = torch.eye(count, dtype=slot_weight.dtype, device=slot_weight.device)
    head_in_weight = torch.stack([  # (G, A', 4, A', H): arm k's W_in^T in the k-th diagonal block, zeros elsewhere
        site.head_in.weight.T.reshape(groups, GROUP_WIDTH, 1, HEAD_WIDTH) * one_hot[k].view(1, 1, count, 1)
        for k, site in enumerate(sites)], 1)
    return ArmWeights(
        slot_weight=slot_weight.reshape(-1, hidden_size),
        mix=mix_matrices(atoms, atoms, [site.tau for site in sites]),
        head_in_weight=head_in_weight.reshape(groups * count * GROUP_WIDTH, count * HEAD_WIDTH),
        head_in_bias=torch.cat([site.head_in.bias for site in sites]),
        gates=torch.sigmoid(torch.stack([site.gate for site in sites])),
        out_weight=torch.cat([*((site.head_out.weight * site.head_norm.weight).T for site in sites),
                              torch.stack([site.head_out(site.head_norm.bias) for site in sites])]),
        eps=sites[0].head_norm.eps)


def add_arms(hidden, slots, weights, arms):
    """hidden + sum_k weights[:, k] * delta_k(hidden) for A' arm sites, given hidden (N, D), their slots
    hidden @ arms.slot_weight^T (N, G A' 4), weights (N, A') and the sites' ArmWeights `arms`. One arm's delta, per
    token x (the spec's maths):

        s = P x as G groups s_j of width 4, each L2-normalised;  u_jk = <s_j, a_k> / tau over the unit atoms a_k
        m_j = sum_k sinh(u_jk) a_k / sum_k cosh(u_jk);  f = LayerNorm(ReLU(W_in concat_j m_j + b_in)^2)
        delta = sigmoid(g) (W_out f + b_out)

    Every arm goes through each step at once, because a CPU spends an arm's time in many small passes: the slots
    come in one matmul with the dispatch's keys (AmoeLayer), the address and W_in are block-diagonal matmuls, and
    ONE output matmul takes the arms' features scaled per token by w_k sigmoid(g_k) (the LayerNorm's affine folded
    into the output projection) and adds them onto hidden."""
    count, tokens = weights.shape[1], hidden.shape[0]
    groups = F.normalize(slots.reshape(-1, count, GROUP_WIDTH), dim=-1)  # (N G, A', 4) s_j
    addressed = sinh_cosh_mix(groups, arms.mix).view(tokens, -1)  # (N, G A' 4) m_j
    features = F.relu(torch.addmm(arms.head_in_bias, addressed, arms.head_in_weight)).square()  # (N, A' H)
    features = F.layer_norm(features.view(tokens, count, HEAD_WIDTH), (HEAD_WIDTH,), eps=arms.eps)
    coefficient = weights * arms.gates  # (N, A')
    scaled = (features * coefficient.unsqueeze(-1)).view(tokens, count * HEAD_WIDTH)
    return torch.addmm(hidden, torch.cat([scaled, coefficient], dim=1), arms.out_weight)


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

    def routing_mix(self):
        """mix_matrices of the normalised routing keys with one-hot values: sinh_cosh_mix then gives w / z."""
        routing_keys = F.normalize(self.routing_keys, dim=-1)  # (A, 64)
        identity = torch.eye(routing_keys.shape[0], dtype=routing_keys.dtype, device=routing_keys.device)
        return mix_matrices([routing_keys], [identity], [self.tau])

    def forward(self, keys, routing_mix):
        """keys = hidden @ key_projection.T (N, 64) -> w / z (N, A): sinh(u_k) / sum over the whole roster of
        cosh(u_j). The caller projects, so that AmoeLayer folds K into the arms' slot matmul, and hands over
        routing_mix(), which it keeps between calls."""
        return sinh_cosh_mix(F.normalize(keys, dim=-1)[:, None], routing_mix)[:, 0]



def arm_step(output, projection, dispatch, routing_mix, arms, columns):
    """What the enabled arms add at one block, from its derived weights (AmoeLayer.derived_weights): the layer's
    output (N, D) plus sum_k (w_k / z) delta_k. One matmul gives the dispatch's keys (N, 64) and every enabled arm's
    slots (N, A' S); of the BlockDispatch's w / z (N, A) the `columns` of the enabled arms are kept."""
    projected = output @ projection  # (N, 64 + A' S)
    weights = dispatch(projected[:, :KEY_WIDTH], routing_mix)[:, columns]  # (N, A') w_k / z, z over the roster
    return add_arms(output, projected[:, KEY_WIDTH:], weights, arms)


def compiled_arm_step():
    """arm_step through torch.compile (Inductor's C++ backend, dynamic token counts), so that the arms' many small
    ops fuse into a few loops; compiled on its first call per roster, shared by every model in the process. None,
    with a warning that says why, where no C++ compiler is found: the arms then run eagerly."""
    if not any(name and shutil.which(name) for name in (os.environ.get("CXX"), "g++", "c++", "clang++")):
        warnings.warn("compiled=True needs a C++ compiler for torch.compile's CPU backend (g++ or clang++ on PATH, or "
                      "$CXX) and none was found: the arms run eagerly, at eager speed", stacklevel=3)
        return None
    return torch.compile(arm_step, dynamic=True)


ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # an arm's name is its file's stem under amoe/arms/


class Dispatch(nn.Module):
    """The routing of one collective: a BlockDispatch per block; row k of every block belongs to roster[k]."""

    def __init__(self, roster, hidden_size, num_blocks, seed=0, tau=TAU):
        super().__init__()
        if len(set(roster)) != len(roster) or not roster:
            raise ValueError(f"a roster lists distinct arm names, at least one: {roster}")
        bad = [name for name in roster if not isinstance(name, str) or not ARM_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"arm names are plain file stems (letters, digits, '_', '-'): {bad} in roster {roster}")
        self.roster = list(roster)
        self.blocks = nn.ModuleList(BlockDispatch(hidden_size, len(roster), seed + i, tau) for i in range(num_blocks))


class ArmSwitch:
    """Which arms of a roster contribute, shared by the wrapped layers of one model.

    `enabled` is a tuple that `set` replaces whole, never edits, and a forward pass reads it once (`pinned`): every
    wrapped layer of that pass sees the same roster, whatever another thread sets meanwhile. `pinned(())` turns
    every arm off for the calling thread's context alone (amoe_off). `set` changes the model for every thread."""

    # {id(switch): roster} pinned in this context; read-only, every pin sets a new mapping
    _pins = contextvars.ContextVar("amoe_pins", default=MappingProxyType({}))

    def __init__(self, roster):
        self.roster = tuple(roster)
        self.enabled = self.roster

    def set(self, names):
        """Enable exactly these arms (any iterable of roster names, kept in roster order; empty = none)."""
        if isinstance(names, str):
            raise TypeError(f"names must be a list of arm names, not the str {names!r}")
        names = list(names)
        unknown = [name for name in names if name not in self.roster]
        if unknown:
            raise ValueError(f"unknown arms {unknown}; the roster is {list(self.roster)}")
        self.enabled = tuple(name for name in self.roster if name in names)

    def current(self):
        """The arms a forward pass in this context uses: the pinned roster inside `pinned`, else `enabled`."""
        return self._pins.get().get(id(self), self.enabled)

    @contextlib.contextmanager
    def pinned(self, enabled=None):
        """Within the block this context reads `enabled` (None: the current roster, read now) for this switch."""
        roster = self.current() if enabled is None else tuple(enabled)
        token = self._pins.set({**self._pins.get(), id(self): roster})
        try:
            yield
        finally:
            self._pins.reset(token)


class AmoeLayer(nn.Module):
    """A trunk layer wrapped with the arms' sites at its index. `switch` (an ArmSwitch shared by every wrapped layer
    of one model) names the arms that contribute; with none enabled the base layer's output is returned as is."""

    def __init__(self, base_layer, index, arms, dispatch, switch, step=arm_step):
        super().__init__()
        self.base_layer = base_layer
        self.step = step  # arm_step, or compiled_arm_step()'s compiled version of it
        self.index = index
        self.sites = nn.ModuleDict({name: arms[name].blocks[index] for name in dispatch.roster})
        self.dispatch = dispatch.blocks[index]
        self.roster = dispatch.roster
        self.switch = switch
        self.kept = None  # (the sources' states, the derived weights) from the last call without autograd

    def forward(self, hidden, *args, **kwargs):
        output = self.base_layer(hidden, *args, **kwargs)  # (N, D) packed tokens
        enabled = self.switch.current()
        if not enabled:
            return output
        columns, projection, routing_mix, arms = self.derived_weights(enabled)
        return self.step(output, projection, self.dispatch, routing_mix, arms, columns)

    def derived_weights(self, enabled):
        """(the `enabled` arms' roster columns, [K; their sites' slot_weight]^T, the dispatch's routing_mix, their
        ArmWeights): everything the forward pass derives from parameters alone.

        With autograd on (training) they are derived afresh on every call. Without it (inference) they are kept
        and reused while the enabled arms and every source tensor stay the same: the same tensor objects, holding
        the same storage, with unchanged in-place version counters (an optimizer step, load_state_dict, copy_ or
        .to() all change one of these), and the same taus. The kept entry is read once and replaced whole, so
        threads running other rosters at once each get their own roster's weights (at worst derived twice)."""
        columns = [k for k, name in enumerate(self.roster) if name in enabled]
        sites = [self.sites[self.roster[k]] for k in columns]
        sources = [self.dispatch.key_projection, self.dispatch.routing_keys,
                   *(tensor for site in sites for tensor in site.parameters())]
        if torch.is_grad_enabled() or any(tensor.is_inference() for tensor in sources):
            self.kept = None  # inference tensors keep no version counter, so nothing derived from them is kept
            return self._derive(columns, sites)
        taus = (columns, self.dispatch.tau, [site.tau for site in sites])
        kept = self.kept
        if kept is None or not self._same_sources(kept[0], taus, sources):
            pinned = [(tensor, tensor.detach(), tensor._version) for tensor in sources]  # detach(): pins the storage
            kept = self.kept = (taus, pinned), self._derive(columns, sites)
        return kept[1]

    @staticmethod
    def _same_sources(kept, taus, sources):
        kept_taus, pinned = kept
        return kept_taus == taus and len(pinned) == len(sources) and all(
            tensor is kept_tensor and tensor.data_ptr() == alias.data_ptr() and tensor._version == version
            for (kept_tensor, alias, version), tensor in zip(pinned, sources))

    def _derive(self, columns, sites):
        arms = arm_weights(sites)
        projection = torch.cat([self.dispatch.key_projection, arms.slot_weight]).T
        return columns, projection, self.dispatch.routing_mix(), arms


def wrap_layers(layers, arms, dispatch, switch, step=arm_step):
    """Replace each entry of the ModuleList `layers` by an AmoeLayer around it, in place; `switch` (an ArmSwitch of
    the dispatch's roster) says which arms contribute, `step` computes them (arm_step or its compiled version)."""
    missing = [name for name in dispatch.roster if name not in arms]
    if missing:
        raise KeyError(f"no arm loaded for roster entries {missing}")
    for index in range(len(layers)):
        if isinstance(layers[index], AmoeLayer):
            raise ValueError("these layers already carry arms; detach first")
        layers[index] = AmoeLayer(layers[index], index, arms, dispatch, switch, step)


def unwrap_layers(layers):
    """Put every wrapped layer's very own base_layer object back, in place."""
    for index in range(len(layers)):
        if isinstance(layers[index], AmoeLayer):
            layers[index] = layers[index].base_layer


# ---- files: safetensors only, header metadata checked on load -------------------------------------------------------

ARM_FORMAT, DISPATCH_FORMAT, FORMAT_VERSION = "amoe-arm", "amoe-dispatch", "2"
HASHED_FIELDS = {ARM_FORMAT: ("format", "version", "name", "trunk_hash"),  # what changes behaviour: the content
                 DISPATCH_FORMAT: ("format", "version", "roster", "tau", "trunk_hash")}  # hash covers these too


def file_hash(tensors, metadata):
    """sha256 over an AMOE file's tensors (identity.content_hash) and the header fields that change behaviour, so
    a renamed arm or a rewritten roster or tau reads as a changed file."""
    header = {field: metadata[field] for field in HASHED_FIELDS[metadata["format"]]}
    return hashlib.sha256(f"{content_hash(tensors)}|{json.dumps(header, sort_keys=True)}".encode()).hexdigest()


def _read(path, expected_format):
    """(tensors, metadata) of an AMOE file, after checking its format, version, content hash and that every weight
    is finite; clear errors otherwise."""
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
    if metadata.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path} has {expected_format} format version {metadata.get('version')!r}; this code reads "
                         f"version {FORMAT_VERSION} (retrain or re-save it with the tools in tools/captionbert/amoe/)")
    if any(field not in metadata for field in HASHED_FIELDS[expected_format]) \
            or metadata.get("content_hash") != file_hash(tensors, metadata):
        raise ValueError(f"{path}: content hash mismatch, the tensors or header (name, roster, tau, trunk) were "
                         "changed or corrupted")
    check_finite(tensors, path)
    return tensors, metadata


def _check_trunk(path, metadata, trunk_hash, force):
    if trunk_hash is not None and metadata["trunk_hash"] != trunk_hash and not force:
        raise ValueError(f"{path} was trained on trunk {metadata['trunk_hash'][:12]}, not this one "
                         f"({trunk_hash[:12]}): arms do not transfer between trunks (force=True overrides)")


def save_arm(path, arm, name, trunk_hash, meta):
    """amoe/arms/<name>.safetensors: tensors blocks.{i}.{param}; metadata format, version, name, trunk_hash,
    meta (JSON), content_hash (file_hash)."""
    if not ARM_NAME.fullmatch(name):
        raise ValueError(f"arm names are plain file stems (letters, digits, '_', '-'), got {name!r}")
    tensors = {key: value.detach().contiguous() for key, value in arm.state_dict().items()}
    check_finite(tensors, f"arm {name!r}")
    metadata = {"format": ARM_FORMAT, "version": FORMAT_VERSION, "name": name, "trunk_hash": trunk_hash,
                "meta": json.dumps(meta, sort_keys=True)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={**metadata, "content_hash": file_hash(tensors, metadata)})


def load_arm(path, hidden_size, num_blocks, trunk_hash=None, force=False, name=None):
    """(Arm, metadata) from a file written by save_arm; refuses another trunk's arm unless force, and an arm whose
    header names another arm than `name` (when given)."""
    tensors, metadata = _read(path, ARM_FORMAT)
    if name is not None and metadata["name"] != name:
        raise ValueError(f"{path} holds arm {metadata['name']!r}, not {name!r}: arm files were swapped or renamed")
    _check_trunk(path, metadata, trunk_hash, force)
    arm = Arm(hidden_size, num_blocks)
    arm.load_state_dict(tensors)
    return arm, metadata


def save_dispatch(path, dispatch, trunk_hash):
    """amoe/<collective>/dispatch.safetensors: key projections and routing keys; the roster ORDER in metadata."""
    tensors = {key: value.detach().contiguous() for key, value in dispatch.state_dict().items()}
    check_finite(tensors, "dispatch")
    metadata = {"format": DISPATCH_FORMAT, "version": FORMAT_VERSION, "roster": json.dumps(dispatch.roster),
                "tau": repr(dispatch.blocks[0].tau), "trunk_hash": trunk_hash}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={**metadata, "content_hash": file_hash(tensors, metadata)})


def load_dispatch(path, hidden_size, num_blocks, trunk_hash=None, force=False):
    """(Dispatch, metadata) from a file written by save_dispatch; the roster and its order come from the file."""
    tensors, metadata = _read(path, DISPATCH_FORMAT)
    _check_trunk(path, metadata, trunk_hash, force)
    dispatch = Dispatch(json.loads(metadata["roster"]), hidden_size, num_blocks, tau=float(metadata["tau"]))
    dispatch.load_state_dict(tensors)
    return dispatch, metadata
