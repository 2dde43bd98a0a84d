# Generated from shared_modeling/amoe_mixin.py by `make vendor`. Do not edit: edit the source and regenerate.
"""The AMOE lifecycle of a trunk: attach_amoe, amoe_off, set_amoe, detach_amoe, and the toggle law they keep.

A model mixes `AmoeMixin` in before its PreTrainedModel class; it needs `encoder.layers` (the blocks the arms
follow), config.hidden_size / num_hidden_layers / vocab_size, and a forward(input_ids, attention_mask) whose
pooler_output is the sentence embedding, run under `amoe_roster_pinned()` so that one forward pass sees one roster.
The arms' code (amoe.py) is imported only when arms are attached: loading the bare trunk never runs it.

The toggle law: with every arm off, the model is the bare trunk bit for bit. attach_amoe checks it before it
returns, and detach_amoe checks it after it puts the original layers back; either raises on a mismatch.
"""

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .shared_identity import embedding_space, trunk_hash


@dataclass
class AttachedArms:
    """What attach_amoe put on the trunk."""

    arms: dict  # {name: Arm}
    dispatch: nn.Module  # the Dispatch mixing them; its roster orders the arms
    switch: object  # the ArmSwitch the wrapped layers read
    fingerprint: torch.Tensor  # the bare trunk's embeddings of a fixed probe batch (the toggle law's reference)
    trunk_hash: str  # trunk_hash of the bare trunk
    placement: tuple  # (dtype, device) the fingerprint was taken in


class AmoeMixin:
    _amoe = None  # AttachedArms while arms are attached

    def attach_amoe(self, names=None, path=None, force=False, arms=None, dispatch=None, compiled=False):
        """Attach an AMOE collective: its arms after every block, mixed by its dispatch, every arm enabled.

        From files (the default): path is an amoe/ folder; None = amoe/ in this model's own folder or Hub repo. It
        holds the arms under <path>/arms/, each arm's own one-arm dispatch under <path>/routing/, and at most one
        collective (<path>/<collective>/dispatch.safetensors). names: None takes the collective, its roster and order
        from its dispatch (a folder without a collective raises, naming its solo arms); the collective's roster in
        the same order attaches the collective; one arm's name alone attaches that arm under its solo dispatch.
        force: attach arms trained on another trunk.
        From memory (training): arms = {name: Arm} and their dispatch, used as they are (they keep training).
        compiled: run the arms through torch.compile (amoe.compiled_arm_step: their small ops fused by Inductor's C++
        backend; the first forward pass of each roster compiles for a minute or so; with no C++ compiler it warns and
        runs them eagerly). The trunk's layers stay eager, so with every arm off it is still the bare trunk bit for bit.
        Checks the toggle law (every arm off == the bare trunk) and raises on mismatch.
        """
        from .shared_amoe import ArmSwitch, arm_step, compiled_arm_step, wrap_layers

        if self._amoe is not None:
            raise RuntimeError("arms are attached already; detach_amoe() first")
        identity = trunk_hash(self)
        if (arms is None) != (dispatch is None):
            raise ValueError("arms in memory need their dispatch, and a dispatch its arms: pass both or neither")
        if arms is None:
            arms, dispatch = self._load_arms(self._amoe_folder(path), names, identity, force)
        if names is not None and list(names) != dispatch.roster:
            raise ValueError(f"arms {list(names)} do not match the dispatch's roster {dispatch.roster}: routing keys "
                             "are positional, so the names and their order must be the roster's")
        for module in (*arms.values(), dispatch):  # files hold float32; run in the trunk's dtype and device
            module.to(device=self.device, dtype=self.dtype)
        fingerprint, switch = self._amoe_fingerprint(), ArmSwitch(dispatch.roster)
        wrap_layers(self.encoder.layers, arms, dispatch, switch, (compiled and compiled_arm_step()) or arm_step)
        self._amoe = AttachedArms(arms, dispatch, switch, fingerprint, identity, (self.dtype, self.device))
        with self.amoe_off():
            if not torch.equal(self._amoe_fingerprint(), fingerprint):
                self._unwrap()
                raise RuntimeError("toggle law violated: with every arm off the model differs from the bare trunk")
        return self

    @contextlib.contextmanager
    def amoe_off(self):
        """Every arm off inside the block (the bare trunk, bit for bit), for the calling thread only; other threads
        keep the roster set_amoe chose."""
        with self._attached().switch.pinned(()):
            yield self

    def set_amoe(self, names):
        """Enable exactly these arms of the roster (a list or any iterable of names; [] = none), for every thread;
        a forward already running keeps the roster it started with. The weights keep their roster-wide normaliser."""
        self._attached().switch.set(names)

    def detach_amoe(self):
        """Remove the arms, put the original layer objects back, check the bare trunk; returns {"arms", "dispatch"}.
        After a dtype or device change while attached (model.half(), model.to(...)) the attach-time fingerprint no
        longer applies, so the check compares the model with every arm off, just before, with the bare trunk after,
        both as the model is now."""
        state = self._attached()
        reference = state.fingerprint
        if (self.dtype, self.device) != state.placement:
            with self.amoe_off():
                reference = self._amoe_fingerprint()
        self._unwrap()
        if not torch.equal(self._amoe_fingerprint(), reference):
            raise RuntimeError("toggle law violated: after detaching, the model differs from the bare trunk")
        return {"arms": state.arms, "dispatch": state.dispatch}

    def amoe_roster_pinned(self):
        """A context in which every layer of one forward pass reads the same roster (nothing without arms)."""
        return self._amoe.switch.pinned() if self._amoe else contextlib.nullcontext()

    @property
    def embedding_space(self):
        """The short id of the space this model embeds into (shared_identity.py): a hash of the trunk's weights and
        of the config fields that run them, and with arms enabled of those arms and the dispatch. Store it with an
        index built from these embeddings, and query that index only with a model reporting the same id."""
        state = self._amoe
        if state is None:
            return embedding_space(trunk_hash(self), config=self.config)
        enabled = {name: trunk_hash(state.arms[name]) for name in state.switch.current()}  # none: the bare trunk
        return embedding_space(state.trunk_hash, {**enabled, "dispatch": trunk_hash(state.dispatch)} if enabled
                               else None, config=self.config)

    def save_pretrained(self, *args, **kwargs):
        """transformers' save_pretrained, refused while arms are attached (their wrapped keys are not the trunk's;
        arms are saved as files under amoe/ by the tools)."""
        if self._amoe is not None:
            raise RuntimeError("detach_amoe() before save_pretrained: the trunk is saved without its arms")
        return super().save_pretrained(*args, **kwargs)

    # ---- helpers ----------------------------------------------------------------------------------------------------

    def _attached(self):
        if self._amoe is None:
            raise RuntimeError("no arms attached; call attach_amoe() first")
        return self._amoe

    def _unwrap(self):
        from .shared_amoe import unwrap_layers

        unwrap_layers(self.encoder.layers)
        self._amoe = None

    def _load_arms(self, folder, names, identity, force):
        """(arms, dispatch) from an amoe/ folder, checked against this trunk: its collective, or with `names` one
        arm alone under its solo dispatch."""
        from .shared_amoe import load_arm, load_dispatch

        dispatches = sorted(p for p in folder.glob("*/dispatch.safetensors") if p.parent.name != "arms")
        solo = sorted(p.stem for p in (folder / "routing").glob("*.safetensors"))
        if len(dispatches) > 1:
            raise FileNotFoundError(f"{folder} must hold at most one <collective>/dispatch.safetensors, found "
                                    f"{[str(p.relative_to(folder)) for p in dispatches]}")
        hidden, blocks = self.config.hidden_size, self.config.num_hidden_layers
        collective = load_dispatch(dispatches[0], hidden, blocks, identity, force)[0] if dispatches else None
        names, roster = None if names is None else list(names), None if collective is None else collective.roster
        if names is not None and names != roster and len(names) == 1 and names[0] in solo:
            dispatch, _ = load_dispatch(folder / "routing" / f"{names[0]}.safetensors", hidden, blocks, identity,
                                        force)
        elif collective is not None:
            dispatch = collective
        elif solo:
            raise FileNotFoundError(
                f"{folder} ships no collective: none beat the bare trunk on validation, so attach_amoe() has nothing "
                f"to attach by default. Solo arms available: {', '.join(solo)} (their scores are in "
                f"arms/ARMS.json); attach one alone with attach_amoe([{solo[0]!r}])")
        else:
            raise FileNotFoundError(f"{folder} holds neither a <collective>/dispatch.safetensors nor solo arms")
        arms = {name: load_arm(folder / "arms" / f"{name}.safetensors", hidden, blocks, identity, force, name)[0]
                for name in dispatch.roster}
        return arms, dispatch

    def _amoe_folder(self, path):
        if path is not None:
            folder = Path(path)
        elif Path(self.name_or_path).is_dir():
            folder = Path(self.name_or_path) / "amoe"
        elif self.name_or_path:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(self.name_or_path, allow_patterns=["amoe/*", "amoe/*/*"])) / "amoe"
        else:
            raise ValueError("this model has no folder or repo to find amoe/ in; pass path=")
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} not found: this model folder ships no AMOE arms")
        return folder

    def _amoe_fingerprint(self):
        """Sentence embeddings of a fixed probe batch (seeded ids, one padded row) in eval mode, fp32."""
        generator = torch.Generator().manual_seed(0)
        input_ids = torch.randint(1000, self.config.vocab_size, (2, 16), generator=generator).to(self.device)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, 9:] = 0
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return self(input_ids, attention_mask).pooler_output.float().cpu()
        finally:
            self.train(was_training)
