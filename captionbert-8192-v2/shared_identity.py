# Generated from shared_modeling/identity.py by `make vendor`. Do not edit: edit the source and regenerate.
"""Identities of weights. `content_hash` names a set of tensors exactly; `trunk_hash` names a module's weights in
whatever float precision it runs; `config_hash` names the hyper-parameters that run them; `embedding_space` is the
short id every model of the bundle exposes.

Two training runs of the same code give unrelated embedding spaces, and switching AMOE arms on changes the space
too; an index built in one space and queried from another returns nonsense without any error. So a model reports
its space, an index stores it, and a query checks it.
"""

import hashlib
import json

import torch


def content_hash(tensors):
    """sha256 over a {name: tensor} dict: sorted names, dtypes, shapes and bytes. Used for files and trunks alike."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def trunk_hash(module):
    """content_hash of a module's state dict with floating tensors rounded to bfloat16, so one set of weights has one
    identity whether it runs in float32 or bfloat16, while any trained change of them still changes it. AMOE arms
    record their trunk's."""
    return content_hash({name: tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
                         for name, tensor in module.state_dict().items()})


def config_hash(config):
    """sha256 of the fields a model's config class declares itself (widths, heads, epsilon, trained length, the
    vocabulary hash...), not transformers' generic ones (names, versions, dtype). An edit that keeps every tensor's
    shape (8 heads made 16, another layer_norm_eps) runs the same weights into another space, so it changes this."""
    fields = vars(type(config))["__annotations__"]
    return hashlib.sha256(json.dumps({name: getattr(config, name) for name in fields}, sort_keys=True,
                                     default=str).encode()).hexdigest()


def embedding_space(weights_hash, arm_hashes=None, config=None):
    """The short id of an embedding space: the first 12 hex digits of the model's weights hash, or given its config,
    of a hash of both (config_hash); with arms on, followed by `+amoe(<enabled arms, in roster order>):<8 hex
    digits>` naming the enabled arms' and the dispatch's weights (arm_hashes: {name: hash}, the dispatch's under
    "dispatch")."""
    space = (hashlib.sha256(f"{weights_hash}|{config_hash(config)}".encode()).hexdigest() if config is not None
             else weights_hash)[:12]
    if arm_hashes:
        names = [name for name in arm_hashes if name != "dispatch"]
        digest = hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(arm_hashes.items())).encode()).hexdigest()
        space += f"+amoe({','.join(names)}):{digest[:8]}"
    return space
