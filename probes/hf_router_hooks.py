"""The transformers side of recording routing: where each MoE block's router is, what
it chose, and the forward hooks that capture its choices and the next-layer prediction.

Router modules, found per decoder block as `block.mlp.gate` (Qwen2-MoE, Qwen3-MoE,
OLMoE, Mixtral, DeepSeek-V2/V3 in transformers >= 5) or `block.block_sparse_moe.gate`
(Mixtral in transformers 4.x). A router that returns a tuple gives its ids and
weights directly (transformers 5's TopKRouter: logits, weights, ids; DeepSeek's
remote-code MoEGate: ids, weights, aux); one that returns logits (an nn.Linear in
transformers 4.x) is turned into softmax top-k here, renormalised when the config's
`norm_topk_prob` says so (Mixtral always renormalises). Ids are stored in
descending weight order.

`RouterHooks` puts a forward hook on every router (the ids and weights of the token being
decoded) and a forward pre-hook on every MoE block's decoder (the hidden state
entering it); `RouterHooks.predict` feeds that hidden state through the next MoE block's
post-attention norm and router. The decode loop that drives them is
`probes.record_hf`. torch is imported inside the functions: importing this module
costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError


@dataclass
class _Router:
    block: int
    module: object  # the router nn.Module
    norm: object | None  # the norm in front of the MoE in the same block (post_attention_layernorm)
    decoder: object  # the decoder block


def _decoder_blocks(model) -> list:
    """The decoder blocks of a CausalLM (model.model.layers and the like)."""
    for path in ("model.layers", "model.model.layers", "transformer.h", "layers"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return list(obj)
    raise CopeInputError(f"cannot find the decoder blocks of {type(model).__name__}")


def find_routers(model) -> list[_Router]:
    """One entry per MoE block, in block order; dense blocks are skipped."""
    routers = []
    for i, block in enumerate(_decoder_blocks(model)):
        moe = getattr(block, "mlp", None)
        gate = getattr(moe, "gate", None) if moe is not None else None
        if gate is None:
            moe = getattr(block, "block_sparse_moe", None)
            gate = getattr(moe, "gate", None) if moe is not None else None
        if gate is None or not hasattr(moe, "experts"):
            continue  # a dense block (its MLP has gate_proj, not a router)
        norm = getattr(block, "post_attention_layernorm", None)
        routers.append(_Router(block=i, module=gate, norm=norm, decoder=block))
    if not routers:
        raise CopeInputError(f"{type(model).__name__} has no MoE block with a router this recorder knows")
    return routers


def _config_int(config, names: tuple[str, ...], what: str) -> int:
    """The first positive integer among `names` (families spell the same fact differently)."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise CopeInputError(f"model config gives no {what} ({' / '.join(names)})")


def config_top_k(config) -> int:
    return _config_int(config, ("num_experts_per_tok", "moe_top_k", "top_k"), "top-k")


def config_n_experts(config) -> int:
    return _config_int(config, ("num_experts", "num_local_experts", "n_routed_experts"), "expert count")


def norm_topk(config) -> bool:
    value = getattr(config, "norm_topk_prob", None)
    if value is None:
        return getattr(config, "model_type", "") == "mixtral"
    return bool(value)


def _route(output, *, n_experts: int, top_k: int, normalise: bool):
    """(ids int64 [n, k], weights float32 [n, k]) from a router's output, sorted by weight."""
    import torch

    ids = weights = logits = None
    if isinstance(output, (tuple, list)):
        tensors = [o for o in output if isinstance(o, torch.Tensor)]
        ints = [o for o in tensors if not o.is_floating_point() and o.dim() >= 1]
        if ints:
            ids = ints[0]
            same = [o for o in tensors if o.is_floating_point() and o.shape == ids.shape]
            weights = same[0] if same else None
        else:
            floats = [o for o in tensors if o.is_floating_point() and o.shape[-1] == n_experts]
            logits = floats[0] if floats else None
    elif isinstance(output, torch.Tensor):
        logits = output
    if ids is None:
        if logits is None:
            raise RuntimeError("router output holds neither expert ids nor logits")
        probs = torch.softmax(logits.reshape(-1, n_experts).float(), dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        if normalise:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    ids = ids.reshape(-1, ids.shape[-1]).long()
    if weights is not None:
        weights = weights.reshape(ids.shape).float()
        order = torch.argsort(weights, dim=-1, descending=True)
        ids = torch.gather(ids, -1, order)
        weights = torch.gather(weights, -1, order)
    return ids.cpu().numpy(), None if weights is None else weights.detach().cpu().numpy().astype(np.float32)


class RouterHooks:
    """Forward hooks on the routers and pre-hooks on the MoE blocks' decoders."""

    def __init__(self, routers: list[_Router], *, n_experts: int, top_k: int, normalise: bool):
        self.routers = routers
        self.n_experts, self.top_k, self.normalise = n_experts, top_k, normalise
        self.recording = False
        self.predicting = False
        self.ids: dict[int, np.ndarray] = {}
        self.weights: dict[int, np.ndarray | None] = {}
        self.inputs: dict[int, object] = {}
        self.handles: list = []

    def install(self) -> None:
        for li, r in enumerate(self.routers):
            self.handles.append(r.module.register_forward_hook(self._router_hook(li)))
            self.handles.append(r.decoder.register_forward_pre_hook(self._block_hook(li), with_kwargs=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def clear(self) -> None:
        self.ids.clear()
        self.weights.clear()
        self.inputs.clear()

    def _router_hook(self, li: int):
        def hook(module, args, output):
            if self.recording and not self.predicting:
                ids, w = _route(output, n_experts=self.n_experts, top_k=self.top_k, normalise=self.normalise)
                self.ids[li], self.weights[li] = ids, w

        return hook

    def _block_hook(self, li: int):
        def hook(module, args, kwargs):
            if self.recording:
                h = args[0] if args else kwargs.get("hidden_states")
                if h is not None:
                    self.inputs[li] = h.detach()
            return None

        return hook

    def predict(self) -> np.ndarray:
        """Predicted ids [L, k] for the last recorded token (row L-1 is -1)."""
        import torch

        n_layers = len(self.routers)
        out = np.full((n_layers, self.top_k), -1, dtype=np.int64)
        self.predicting = True
        try:
            with torch.no_grad():
                for li in range(n_layers - 1):
                    h = self.inputs.get(li)
                    if h is None:
                        raise RuntimeError(f"no hidden state captured at MoE layer {li}")
                    h = h.reshape(-1, h.shape[-1])[-1:]
                    nxt = self.routers[li + 1]
                    x = nxt.norm(h) if nxt.norm is not None else h
                    ids, _ = _route(nxt.module(x), n_experts=self.n_experts, top_k=self.top_k, normalise=self.normalise)
                    out[li] = ids[-1, : self.top_k]
        finally:
            self.predicting = False
        return out


__all__ = ["find_routers"]
