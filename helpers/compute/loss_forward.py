"""The loss's forward pass on CPU, without the work nothing reads: a GRPO step's scoring pass made 2.6x faster.

GRPO scores each micro-batch of rollouts with one forward and one backward pass over prompt + completion, and
two things there cost more on a CPU than they need to (notebook 01's micro-batch, SmolLM2-135M, 4 rows of ~400
tokens, bf16: 4.8 s -> 1.9 s forward + backward; docs/measurements.md#the-grpo-loss-pass-on-cpu):

- **The LM head over every position.** TRL 1.16's fused LM head projects onto the 49k-word vocabulary only the
  positions whose label counts (the completion's) where Triton runs it, but every position elsewhere, CPU
  included, to keep tile shapes fixed for compilers. On a CPU nothing compiles, and the ~350 prompt positions
  of each row cost five times the completion's. `completions_only_scored()` makes the CPU take the compact path.
- **The shared prompt prefix once per row.** Every row starts with the same system prompt and tool schema, and a
  group's rollouts share their whole prompt. `forward_prefix_shared(model)` makes the backbone compute the
  tokens all rows start with once (batch 1), then run each row's own tokens on top of the prefix's keys and
  values. Every row's gradient flows back into the one prefix pass through those keys and values, so the loss
  and its gradients are the plain pass's (tested, fp32).

    with forward_prefix_shared(model):   # both; helpers.compute.fast_trainers.FastGRPOTrainer scores inside it
        ...

And a third thing that costs a whole pass: **a micro-batch whose rollouts all have advantage 0** (every group
in it scored its rollouts alike: `frac_reward_zero_std`) contributes nothing to the gradient, yet TRL scores it
forward and backward. FastGRPOTrainer skips those passes and gives the trained weights the zero gradients the pass
would have given (`zero_gradient_loss`), so training is bit-for-bit the same (tested).

`forward_shared` takes over only the calls it is exact for: TRL's scoring pass on a CPU (`use_cache=False`, a
2-D attention mask in which each row's tokens are contiguous, no position ids, cache or embeddings of the
caller's, no activation checkpointing, no hidden states, attentions or router logits asked for) with at least
`MIN_SHARED` shared tokens; everything else, generation and every GPU run included (not yet measured on a card),
runs the plain forward. Padding positions come back as zeros: nothing reads them (their labels are -100).
"""

from __future__ import annotations

import contextlib
import functools

from helpers.compute.generation import CACHE_KWARGS, cache_kwarg, row_spans, shared_prefix_length

MIN_SHARED = 32       # below this the split costs more than it saves


def _plain_cache(backbone):
    """An empty DynamicCache whose layers are all plain full-attention layers; None for any other model."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=backbone.config)
    return cache if all(type(layer) is DynamicLayer for layer in cache.layers) else None


def forward_shared(backbone, forward, input_ids=None, attention_mask=None, **kwargs):
    """`forward(input_ids=..., attention_mask=..., **kwargs)` (the backbone's plain forward) with the tokens all
    rows start with computed once. Returns the same kind of output: the last hidden state of every position in
    the caller's layout (padding positions zero), no cache."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPast

    def plain():
        return forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    if (kwargs.get("use_cache") is not False or input_ids is None or attention_mask is None
            or attention_mask.dim() != 2 or input_ids.shape[0] < 2
            or any(kwargs.get(k) is not None for k in (*CACHE_KWARGS, "inputs_embeds", "position_ids"))
            or any(kwargs.get(k) for k in ("output_hidden_states", "output_attentions", "output_router_logits"))
            or input_ids.device.type != "cpu" or getattr(backbone, "gradient_checkpointing", False)):
        return plain()
    spans = row_spans(attention_mask)
    if spans is None:
        return plain()
    ids = input_ids.tolist()
    rows = [ids[b][first:end] for b, (first, end) in enumerate(spans)]
    shared = shared_prefix_length(rows)
    cache = _plain_cache(backbone) if shared >= MIN_SHARED else None
    if cache is None:
        return plain()

    device, batch = input_ids.device, input_ids.shape[0]
    rest = {k: v for k, v in kwargs.items() if k not in CACHE_KWARGS} | {"use_cache": True, cache_kwarg(): cache}
    prefix = forward(input_ids=torch.tensor([rows[0][:shared]], device=device),
                     attention_mask=torch.ones(1, shared, dtype=attention_mask.dtype, device=device),
                     **rest)
    for layer in cache.layers:   # one copy of the prefix's keys and values, seen by every row
        layer.keys = layer.keys.expand(batch, -1, -1, -1)
        layer.values = layer.values.expand(batch, -1, -1, -1)
    width = max(len(r) for r in rows) - shared
    tails = [r[shared:] + [0] * (width - (len(r) - shared)) for r in rows]   # right-padded: positions follow on
    tail_mask = [[1] * (len(r) - shared) + [0] * (width - (len(r) - shared)) for r in rows]
    mask = torch.cat([torch.ones(batch, shared, dtype=attention_mask.dtype, device=device),
                      torch.tensor(tail_mask, dtype=attention_mask.dtype, device=device)], dim=1)
    out = forward(input_ids=torch.tensor(tails, device=device), attention_mask=mask, **rest)

    hidden = torch.cat([prefix.last_hidden_state.expand(batch, -1, -1), out.last_hidden_state], dim=1)
    length = input_ids.shape[1]
    index = torch.zeros(batch, length, dtype=torch.long, device=device)
    keep = torch.zeros(batch, length, 1, dtype=hidden.dtype, device=device)
    for b, (first, end) in enumerate(spans):   # row b's k-th token sits at first + k in the caller's layout
        index[b, first:end] = torch.arange(end - first, device=device)
        keep[b, first:end] = 1
    laid = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])) * keep
    return BaseModelOutputWithPast(last_hidden_state=laid)


def _backbone(model):
    """The module TRL's fused LM head runs before the head: `base_model` of the (PEFT-unwrapped) model."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(inner, "base_model", inner)


@contextlib.contextmanager
def completions_only_scored():
    """Inside, TRL's fused LM head scores only the positions whose label counts on a CPU too, as it does on a GPU.
    Same numbers per position; the prompt's positions are no longer projected.

    TRL 1.16 (`trl.trainer.utils`, `add_fused_lm_head`) decides at each forward with `compact = _use_triton(device)`,
    its one use of that name there; the kernel itself keeps its own `_use_triton`, so the CPU still folds tiles in
    torch. A private name of TRL's: listed in docs/upstream-compatibility.md and checked by `python -m tools.drift`."""
    import trl.trainer.utils as trl_utils

    triton_only = trl_utils._use_triton
    if getattr(triton_only, "compact_on_cpu", False):
        yield
        return

    def compact(device) -> bool:
        return device.type == "cpu" or triton_only(device)

    compact.compact_on_cpu = True
    trl_utils._use_triton = compact
    try:
        yield
    finally:
        trl_utils._use_triton = triton_only


@contextlib.contextmanager
def forward_prefix_shared(model):
    """Inside, the backbone's loss passes compute their rows' shared prompt prefix once (`forward_shared`), and the
    LM head scores only the completions (`completions_only_scored`); on leaving, the backbone's own forward again
    (a graph built inside keeps what it computed). Entered by `helpers.compute.fast_trainers.FastGRPOTrainer` around
    its scoring passes, nowhere else."""
    backbone = _backbone(model)
    with completions_only_scored():
        if getattr(backbone.forward, "shares_forward_prefix", False):
            yield model
            return
        plain = backbone.forward
        wrapped = functools.wraps(plain)(functools.partial(forward_shared, backbone, plain))
        wrapped.shares_forward_prefix = True
        backbone.forward = wrapped
        try:
            yield model
        finally:
            del backbone.forward


# Loss types whose every term is a multiple of the advantage (TRL 1.16's `_compute_loss`): with all advantages 0
# the loss and its gradient are exactly 0, unless a KL term (beta), an entropy bonus or a router aux loss is added.
ADVANTAGE_WEIGHTED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo")


class SkippedPasses:
    """Loss passes (micro-batches) a FastGRPOTrainer saw and skipped because every advantage in them was 0."""

    def __init__(self):
        self.seen = 0
        self.skipped = 0

    def __str__(self) -> str:
        share = self.skipped / self.seen if self.seen else 0.0
        return (f"loss passes skipped: {self.skipped} of {self.seen} ({share:.0%}), every rollout in them had "
                "advantage 0 (no gradient)")


def why_not_exact(trainer) -> str | None:
    """Why a micro-batch of zero advantages would still have a gradient in `trainer`'s loss; None when it has none."""
    if getattr(trainer, "beta", 0.0) != 0.0:
        return f"beta={trainer.beta}: the KL term pulls every rollout towards the reference model"
    if getattr(trainer, "_entropy_bonus_enabled", False):
        return "an entropy bonus is on"
    if getattr(trainer, "aux_loss_enabled", False):
        return "the model's router aux loss is on"
    if getattr(trainer, "loss_type", None) not in ADVANTAGE_WEIGHTED_LOSSES:
        return f"loss_type={getattr(trainer, 'loss_type', None)!r} is not one known to scale with the advantage"
    return None


def zero_gradient_loss(model):
    """A loss of 0 whose backward pass gives every trained weight a gradient of zeros: what scoring a micro-batch
    of zero advantages gives it. (Not None: AdamW skips a weight without a gradient, while a zero gradient still
    moves it by its momentum, as the plain pass would.)"""
    import torch

    trained = [p for p in model.parameters() if p.requires_grad]
    if not trained:
        return torch.zeros((), requires_grad=True)
    return torch.stack([(p.reshape(-1)[:1] * 0).sum() for p in trained]).sum()
