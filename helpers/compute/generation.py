"""Generation that does not pay the shared prompt again for every row.

Every rollout of a GRPO group and every question of an evaluation starts with the same ~290 tokens (the
system prompt and the tool schema); a group's 16 rollouts share their whole prompt. `model.generate` on a
left-padded batch computes those tokens' keys and values once per row. `generate_shared` computes them once,
copies them into a preallocated (static) KV cache for every row, and lets `model.generate` go on from there:

    out = generate_shared(model, input_ids, attention_mask, do_sample=True, temperature=0.9, max_new_tokens=100)

The evaluations call it directly; GRPOTrainer's rollouts get it through `helpers.compute.fast_trainers.FastGRPOTrainer`
(`prompt_prefix_shared`), and a notebook's own `rollout_func` through `helpers.rollouts`.

While it generates, each decode step reads that prefix's keys and values once for all rows rather than once per
row (`prefix_read_once`: on a CPU, in fp32 or bf16). An evaluation's greedy batches also drop each row that has
finished (`greedy_dropping_finished`, through `generate_in_batches`).

Same contract as `model.generate` on a left-padded batch: the same output tensor (the caller's prompt, then the
new tokens), the same sampling (the caller's generation config and logits processors run unchanged) and, in
fp32, the same tokens for the same seed (tested; its sums run in another order, so scores agree to fp32's
rounding, ~1e-4 on SmolLM2's logits, and a near-tie could in principle go the other way). Under bf16 autocast a
product's rounding depends on its shape, so a few greedy replies can differ, as they differ between precisions
(docs/measurements.md#notebook-01).
Measured in `benchmarks/rollouts.py`. Falls back to plain `model.generate` when fewer than `MIN_SHARED` tokens are
shared or the call is one it does not handle (beams, several sequences per prompt, a cache of the caller's).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import weakref

from helpers.compute.precision import weight_casts_reused
from helpers.progress import ProgressLines

MIN_SHARED = 16       # below this the one extra forward pass costs more than it saves
# What a caller may hand a model its own KV cache by: transformers 5.24 renamed `past_key_values` to `cache`
# (the old name still works there, with a FutureWarning; forward drops it in 5.40, generate in 6.0).
CACHE_KWARGS = ("past_key_values", "cache")


@functools.cache
def cache_kwarg() -> str:
    """The name the installed transformers takes a KV cache by: `cache` from 5.24, `past_key_values` before
    (where a model's forward silently ignores `cache=` and generate refuses it)."""
    import transformers
    from packaging.version import Version

    return "cache" if Version(transformers.__version__).release >= (5, 24) else "past_key_values"


# Where a LoRA model generates with its adapters merged into the base (`adapters_merged`): a card's decode step is
# bound by kernel launches, and an adapter adds several to each layer
# (docs/gpu.md#generation-on-an-h100-and-lora-merged-for-it-third-device-session-2026-11-26).
MERGE_DEVICES = {"cuda"}
# Inputs of at most this many rows take `weights_streamed_once`'s product: a decode step has one row per sequence
# (16 in a GRPO group, 64 in an evaluation batch); a prompt's prefill has hundreds and stays a plain product.
STREAMED_MAX_ROWS = 256


@contextlib.contextmanager
def adapters_merged(model):
    """Inside, a LoRA model's adapters are merged into its base weights, so each adapted layer runs one product
    instead of three; afterwards the base weights are put back bit for bit (merging and unmerging in 16 bits
    would round them a little more at every rollout). Does nothing for other models, a 4-bit base (QLoRA), or a
    device not in `MERGE_DEVICES`. Costs a copy of the adapted base weights while it lasts (counted in the
    memory plan: helpers.compute.hardware.estimate_memory). For no-gradient passes only: generation."""
    import torch

    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        LoraLayer = None
    layers = []
    if LoraLayer is not None and next(model.parameters()).device.type in MERGE_DEVICES:
        layers = [m for m in model.modules() if isinstance(m, LoraLayer) and not m.merged
                  and m.get_base_layer().weight.dtype in (torch.float16, torch.bfloat16, torch.float32)]
    if not layers:
        yield model
        return
    kept = [(layer, layer.get_base_layer().weight.detach().clone()) for layer in layers]
    try:
        with torch.no_grad():
            for layer in layers:
                layer.merge()
        yield model
    finally:
        with torch.no_grad():
            for layer, weight in kept:
                layer.unmerge()   # peft's bookkeeping; the weights themselves come back from the copy
                layer.get_base_layer().weight.copy_(weight)


def _streamed_rows(weight, x) -> int:
    """The rows of `x` when its product with `weight` takes `weights_streamed_once`'s way, else 0."""
    import torch

    rows = x.numel() // max(x.shape[-1], 1) if x.dim() else 0
    if (not 0 < rows <= STREAMED_MAX_ROWS or torch.is_grad_enabled() or weight.device.type != "cpu"
            or weight.dtype != torch.float32 or x.dtype != torch.float32 or torch.is_autocast_enabled("cpu")):
        return 0
    return rows


def _streamed_linear(self, x):
    """nn.Linear's product as `(W @ x.T).T` where `weights_streamed_once` applies, else nn.Linear's own."""
    import torch
    import torch.nn.functional as F

    weight = self.weight
    rows = _streamed_rows(weight, x)
    if not rows:
        return F.linear(x, weight, self.bias)
    flat = x.reshape(rows, x.shape[-1]).t()
    out = weight @ flat if self.bias is None else torch.addmm(self.bias.unsqueeze(1), weight, flat)
    out = out.t()
    if not getattr(self, "_streamed_logits", False):
        out = out.contiguous()   # as nn.Linear's: attention takes a slower path for a transposed query (measured)
    return out.view(*x.shape[:-1], weight.shape[0])


@contextlib.contextmanager
def weights_streamed_once(model):
    """Inside, the model's fp32 linear layers compute a few rows' product on a CPU as `(W @ x.T).T` instead of
    `x @ W.T`. Why: a decode step multiplies one row per sequence by every weight, and MKL's product for a few rows
    against a transposed weight reads each weight from memory several times; with the weight as the left operand
    it streams each weight once: about a quarter off a 16-row decode step's products on an AVX2 CPU
    (docs/measurements.md#rollout-generation-on-cpu). The same
    sums in another order: equal to the bit at most row counts (16, 64) and within ~1e-6 at others; the tested
    generations gave the same tokens (tests/test_generation.py). Applies only to no-gradient passes in fp32
    without autocast, on at most `STREAMED_MAX_ROWS` rows (generation); anything else takes nn.Linear's own."""
    from torch import nn

    on_cpu = next(model.parameters()).device.type == "cpu"   # on a card each linear call stays as it was
    layers = [m for m in model.modules() if on_cpu and type(m) is nn.Linear and "forward" not in m.__dict__]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for layer in layers:
        layer.forward = _streamed_linear.__get__(layer)
        # the logits stay a transposed view: generate copies the last position's anyway (a 16 x 49,152 copy saved)
        layer._streamed_logits = layer is head
    try:
        yield model
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
            layer.__dict__.pop("_streamed_logits", None)


# The attention implementation `prefix_read_once` switches a model to while `generate_shared` runs (transformers'
# AttentionInterface name; its masks are sdpa's).
PREFIX_ATTENTION = "sdpa_prefix_read_once"
PREFIX_DTYPES = ("torch.float32", "torch.bfloat16")   # the dtypes its queries, keys and values may have
_prefix_length = contextvars.ContextVar("prefix_length", default=0)


_columns_seen: list = [None]    # (the last mask `_own_columns` read, what it gave), replaced whole


def _own_columns(attention_mask, shared: int, group: int):
    """For a (batch, 1, length, columns) boolean mask: the end of the columns any query may attend to (a static
    cache is allocated for the longest reply, and its unwritten columns need not be read), and an additive mask
    (0 or -inf) over the columns from `shared` to there for each (query head in its group, position) row,
    (batch, 1, group * length, own). Every layer of a forward pass gets the same mask: computed once per pass."""
    import torch

    seen = _columns_seen[0]
    if seen is not None and seen[0]() is attention_mask:
        return seen[1]
    own = attention_mask[:, 0, :, shared:]
    end = shared + int(own.any(dim=0).any(dim=0).nonzero().max()) + 1
    batch, length = own.shape[0], own.shape[1]
    own = own[..., :end - shared]
    hidden = torch.zeros(own.shape).masked_fill_(~own, float("-inf"))
    result = end, hidden[:, None, None].expand(batch, 1, group, length, end - shared).reshape(
        batch, 1, group * length, end - shared)
    _columns_seen[0] = (weakref.ref(attention_mask), result)
    return result


def _prefix_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """SDPA for a `generate_shared` batch on a CPU, in fp32 or bf16: the first `_prefix_length` cache positions hold the
    same keys and values in every row (the shared prompt prefix, which every query sees whole), so they are read
    once for all rows, and each row reads only its own positions after them. Two calls of torch's CPU flash
    kernel (every row's queries against the one prefix; each row's queries against its own keys, masked), merged
    by their log-sum-exps: the same softmax over all columns. Anything else goes to transformers' own sdpa."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    shared = _prefix_length.get()
    # under autocast, sdpa computes in autocast's dtype whatever it is given (RoPE hands it fp32 queries and keys)
    autocasting = torch.is_autocast_enabled("cpu")
    dtype = torch.get_autocast_dtype("cpu") if autocasting else query.dtype
    if (not shared or dropout or torch.is_grad_enabled() or attention_mask is None
            or attention_mask.dtype != torch.bool or not (autocasting or query.dtype == key.dtype == value.dtype)
            or str(dtype) not in PREFIX_DTYPES or query.device.type != "cpu" or key.shape[2] <= shared
            or any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "sliding_window", "s_aux"))):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads              # query head h reads key/value head h // group (transformers' repeat_kv)
    rows = group * length
    scale = dim ** -0.5 if scaling is None else scaling
    end, hidden = _own_columns(attention_mask, shared, group)
    q = query.to(dtype).reshape(batch, kv_heads, rows, dim)         # rows: (head in its group, query position)
    every_row = q.transpose(0, 1).reshape(1, kv_heads, batch * rows, dim)
    prefix_out, prefix_lse = flash(every_row, key[:1, :, :shared].to(dtype), value[:1, :, :shared].to(dtype),
                                   scale=scale)
    own_out, own_lse = flash(q, key[:, :, shared:end].to(dtype), value[:, :, shared:end].to(dtype),
                             attn_mask=hidden.to(dtype), scale=scale)
    prefix_lse = prefix_lse.view(kv_heads, batch, rows).transpose(0, 1)
    prefix_out = prefix_out.view(kv_heads, batch, rows, dim).transpose(0, 1)
    top = torch.maximum(prefix_lse, own_lse)
    prefix_w, own_w = torch.exp(prefix_lse - top), torch.exp(own_lse - top)
    out = (prefix_out * prefix_w[..., None] + own_out * own_w[..., None]) / (prefix_w + own_w)[..., None]
    return out.to(dtype).reshape(batch, heads, length, dim).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def prefix_read_once(model, shared: int):
    """Inside, `model`'s attention reads the first `shared` cache positions once for all rows (`_prefix_attention`)
    where it would read them once per row: what a batch from `generate_shared` holds there. Why: in a decode step
    every row's query reads every key and value of its row, and the prompt prefix (~290 tokens) is most of them,
    so a 64-row batch read the same prefix 64 times; with it, the same tokens in about a fifth less time
    (docs/measurements.md#rollout-generation-on-cpu). Under bf16 autocast it also spares sdpa's copies (each
    layer's whole static cache cast to bf16 and its key/value heads repeated for every query head,
    docs/measurements.md#held-out-evaluation-on-cpu); there its sums differ from sdpa's by bf16's rounding, so a
    few greedy replies do too. Only for an fp32 (or bf16) model on a CPU using
    transformers' sdpa; anything else is left as it is."""
    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if (config is None or getattr(config, "_attn_implementation", None) != "sdpa" or shared <= 0
            or next(model.parameters()).device.type != "cpu" or str(next(model.parameters()).dtype) not in PREFIX_DTYPES):
        yield model
        return
    AttentionInterface.register(PREFIX_ATTENTION, _prefix_attention)
    AttentionMaskInterface.register(PREFIX_ATTENTION, sdpa_mask)
    token = _prefix_length.set(shared)
    config._attn_implementation = PREFIX_ATTENTION
    try:
        yield model
    finally:
        config._attn_implementation = "sdpa"
        _prefix_length.reset(token)


def shared_prefix_length(rows: list[list[int]]) -> int:
    """Tokens every row starts with, leaving each row at least one token to feed `generate` (it needs one)."""
    if not rows:
        return 0
    limit = min(len(r) for r in rows) - 1
    first = rows[0]
    n = 0
    while n < limit and all(r[n] == first[n] for r in rows):
        n += 1
    return n


def row_spans(attention_mask) -> list[tuple[int, int]] | None:
    """(first, end) of each row's tokens in a 2-D attention mask; None when a row has no token or its tokens are
    not one contiguous run. Shared with the loss pass (helpers/compute/loss_forward.py)."""
    spans = []
    for row in attention_mask.tolist():
        if 1 not in row:
            return None
        first = row.index(1)
        end = len(row) - row[::-1].index(1)
        if not all(row[first:end]):
            return None
        spans.append((first, end))
    return spans


def _real_rows(input_ids, attention_mask) -> list[list[int]] | None:
    """Each row's tokens without its left padding; None when a row's padding is not all on the left."""
    spans = row_spans(attention_mask)
    if spans is None or any(end != attention_mask.shape[1] for _, end in spans):
        return None
    ids = input_ids.tolist()
    return [ids[b][first:] for b, (first, _) in enumerate(spans)]


def _setting(kwargs: dict, config, key: str, default=None):
    """A generation setting as generate sees it: the call's, else the generation config's, else `default`."""
    return kwargs.get(key, getattr(config, key, default) if config is not None else default)


def _unsupported(kwargs: dict, config) -> bool:
    """A call `generate_shared` leaves to plain generate: its own cache or embeddings, beams, several sequences per
    prompt, a cache implementation asked for, or no `max_new_tokens` to size the cache with."""
    def get(key, default=None):
        return _setting(kwargs, config, key, default)

    return (any(k in kwargs for k in (*CACHE_KWARGS, "inputs_embeds", "position_ids"))
            or (get("num_beams", 1) or 1) > 1 or (get("num_return_sequences", 1) or 1) > 1
            or get("cache_implementation") is not None or get("max_new_tokens") is None)


def _prefilled_cache(model, prefix: list[int], rows: int, max_len: int):
    """A static KV cache for `rows` rows whose first len(prefix) positions hold the prefix's keys and values,
    computed once (one forward pass of batch 1) and copied to every row; None for a model whose cache is not
    one plain static layer per decoder layer (sliding-window or linear-attention layers)."""
    import torch
    from transformers import DynamicCache, StaticCache
    from transformers.cache_utils import StaticLayer

    class PrefilledLayer(StaticLayer):
        """A static layer that takes the dtype of the keys and values generate computes, so attention sees one
        dtype. The prefix may have been computed in another: on a GPU with LoRA, the trainer's wrapped forward
        (autocast, outputs cast to fp32) fills it in fp32 while generate runs the 16-bit base without autocast,
        and SDPA refuses a bf16 query against fp32 keys (found on an H200 running the T4 recipe, docs/gpu.md)."""

        def update(self, key_states, value_states, *args, **kwargs):
            if key_states.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
                # kept in autocast's dtype, which attention reads them in anyway (RoPE hands over fp32 keys): half
                # the cache to write, copy and read
                dtype = torch.get_autocast_dtype("cpu")
                key_states, value_states = key_states.to(dtype), value_states.to(dtype)
            if self.keys.dtype != key_states.dtype:
                self.keys = self.keys.to(key_states.dtype)
            if self.values.dtype != value_states.dtype:
                self.values = self.values.to(value_states.dtype)
            return super().update(key_states, value_states, *args, **kwargs)

    cache = StaticCache(config=model.config, max_cache_len=max_len)
    if any(type(layer) is not StaticLayer for layer in cache.layers):
        return None
    once = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([prefix], device=model.device), use_cache=True, logits_to_keep=1,
              **{cache_kwarg(): once})
    cache.layers = [PrefilledLayer(max_cache_len=max_len) for _ in once.layers]
    for layer, done in zip(cache.layers, once.layers):
        layer.lazy_initialization(done.keys.expand(rows, -1, -1, -1), done.values.expand(rows, -1, -1, -1))
        layer.values = layer.values.to(done.values.dtype)   # lazy_initialization gives both the keys' dtype
        layer.keys[:, :, :len(prefix)] = done.keys
        layer.values[:, :, :len(prefix)] = done.values
        layer.cumulative_length.fill_(len(prefix))
    return cache


def generate_shared(model, input_ids, attention_mask=None, *, generate=None, **kwargs):
    """`model.generate(input_ids, attention_mask, **kwargs)` on a left-padded batch, with the prompt tokens all
    rows share computed once. Returns what `generate` returns: the caller's `input_ids` followed by the new tokens
    (or a generate output whose `sequences` are that). `generate`: the plain generate to call (default
    `model.generate`; `prompt_prefix_shared` passes the one it replaced). Every product takes the faster ways
    `fast_products` enters."""
    with fast_products(model):
        return _generate_shared(model, input_ids, attention_mask, generate=generate, **kwargs)


@contextlib.contextmanager
def fast_products(model):
    """The ways a no-gradient pass multiplies faster, same numbers: a LoRA model on a card with its adapters merged
    (`adapters_merged`), an fp32 model on a CPU with each weight streamed once a step (`weights_streamed_once`),
    and under bf16 autocast on a CPU each weight cast once (`helpers.compute.precision.weight_casts_reused`)."""
    with adapters_merged(model), weights_streamed_once(model), weight_casts_reused(model):
        yield model


def _shared_layout(model, input_ids, attention_mask, kwargs: dict):
    """How `generate_shared` lays out a left-padded batch: (ids, mask, cache, shared), the ids and mask as
    [shared prefix][padding][each row's own tail] and a static cache already holding the prefix; None when the call
    is left to plain generate (`_unsupported`, fewer than `MIN_SHARED` shared tokens, a cache it cannot prefill)."""
    import torch

    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    rows = None if _unsupported(kwargs, config) else _real_rows(input_ids, attention_mask)
    shared = shared_prefix_length(rows) if rows else 0
    if shared < MIN_SHARED:
        return None
    max_new = kwargs.get("max_new_tokens") or config.max_new_tokens
    tail = max(len(r) for r in rows) - shared
    pad = input_ids[0, 0].item() if attention_mask[0, 0] == 0 else 0   # any id: padded positions are masked
    # positions come from the mask, so the tail's are unchanged
    laid = [r[:shared] + [pad] * (tail - (len(r) - shared)) + r[shared:] for r in rows]
    mask = [[1] * shared + [0] * (tail - (len(r) - shared)) + [1] * (len(r) - shared) for r in rows]
    cache = _prefilled_cache(model, rows[0][:shared], len(rows), shared + tail + max_new)
    if cache is None:
        return None
    device = input_ids.device
    return torch.tensor(laid, device=device), torch.tensor(mask, device=device), cache, shared


def _generate_shared(model, input_ids, attention_mask=None, *, generate=None, **kwargs):
    import torch

    generate = generate or model.generate
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    layout = _shared_layout(model, input_ids, attention_mask, kwargs)
    if layout is None:
        return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    ids, mask, cache, shared = layout
    kwargs.setdefault("disable_compile", True)   # a static cache would make generate compile on a GPU
    with prefix_read_once(model, shared):
        out = generate(input_ids=ids, attention_mask=mask, **{cache_kwarg(): cache}, **kwargs)
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    joined = torch.cat([input_ids, sequences[:, ids.shape[1]:]], dim=1)
    if isinstance(out, torch.Tensor):
        return joined
    out.sequences = joined
    return out


# Generation settings that make generate change the logits or stop otherwise than at EOS and `max_new_tokens`: a
# batch asking for any of them is left to generate (`greedy_dropping_finished`).
PROCESSED = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "bad_words_ids": None, "min_length": 0,
             "min_new_tokens": None, "suppress_tokens": None, "begin_suppress_tokens": None,
             "forced_bos_token_id": None, "forced_eos_token_id": None, "sequence_bias": None,
             "encoder_repetition_penalty": 1.0, "exponential_decay_length_penalty": None, "stop_strings": None,
             "max_time": None, "logits_processor": None, "stopping_criteria": None, "output_scores": False,
             "return_dict_in_generate": False, "streamer": None, "prefill_chunk_size": None}
# Finished rows are dropped from a batch once they are at least this share of its rows: each drop copies the KV
# cache's remaining rows (1/16 and 1/4 measured no different: docs/measurements.md#held-out-evaluation-on-cpu).
DROP_SHARE = 0.125


def _greedy_eos(model, kwargs: dict) -> list[int] | None:
    """The EOS ids of a greedy call `greedy_dropping_finished` can run exactly as generate would; None otherwise."""
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)

    def get(key, default=None):
        return _setting(kwargs, config, key, default)

    if get("do_sample", False) or any(get(k, v) not in (None, v) for k, v in PROCESSED.items()):
        return None
    if any(k not in ("do_sample", "max_new_tokens", "eos_token_id", "pad_token_id", "generation_config")
           for k in kwargs):
        return None
    eos = get("eos_token_id")
    return [eos] if isinstance(eos, int) else list(eos or []) or None


def greedy_dropping_finished(model, input_ids, attention_mask, *, max_new_tokens: int, eos_token_id: list[int],
                             pad_token_id: int, drop_share: float | None = None):
    """Greedy `generate_shared` for a left-padded batch where a row that has reached EOS leaves the batch.

    Why: `model.generate` computes every row of a batch until its longest reply ends (or reaches `max_new_tokens`),
    so a batch's early finishers kept costing a row each step. Here the finished rows are taken out of the batch and
    its KV cache (in one copy, once they are `drop_share` of the rows: default `DROP_SHARE`), and each step computes
    only the rows still writing.

    Returns what generate returns: the caller's `input_ids` followed by the new tokens, a finished row padded with
    `pad_token_id` after its EOS to the batch's longest reply. The same forward passes as generate's for the rows
    still in the batch, so the same greedy tokens, with one caveat: a product over fewer rows may add its terms in
    another order (fp32: within ~1e-6; bf16: a rounding step), so a near-tie could go the other way (tested on
    notebook 01's 900 held-out sums: docs/measurements.md#held-out-evaluation-on-cpu). None when the batch
    shares too little prompt to lay out (`_shared_layout`): call generate then."""
    import torch

    layout = _shared_layout(model, input_ids, attention_mask, {"max_new_tokens": max_new_tokens})
    if layout is None:
        return None
    ids, mask, cache, shared = layout
    rows = ids.shape[0]
    eos = torch.tensor(eos_token_id, device=ids.device)
    new = torch.full((rows, max_new_tokens), pad_token_id, dtype=ids.dtype, device=ids.device)
    ends = torch.full((rows,), max_new_tokens, dtype=torch.long)     # each row's reply length
    live = torch.arange(rows, device=ids.device)                       # original row of each row in the batch
    finished = torch.zeros(rows, dtype=torch.bool, device=ids.device)  # of the rows in the batch
    step_ids = ids[:, shared:]
    step_position = ((mask.cumsum(-1) - 1).masked_fill(mask == 0, 0))[:, shared:]
    with prefix_read_once(model, shared):
        for step in range(max_new_tokens):
            # generate's own preparation of each pass (the 4-D mask it builds for a static cache, the inputs' layout)
            inputs = model.prepare_inputs_for_generation(step_ids, attention_mask=mask, position_ids=step_position,
                                                         use_cache=True, logits_to_keep=1, is_first_iteration=not step,
                                                         **{cache_kwarg(): cache})
            out = model(**inputs, return_dict=True)
            token = out.logits[:, -1].to(dtype=torch.float32).argmax(-1)
            token = token.masked_fill(finished, pad_token_id)
            new[live, step] = token
            done = torch.isin(token, eos) & ~finished
            if done.any():
                ends[live[done].cpu()] = step + 1
                finished |= done
            if bool(finished.all()) or step + 1 == max_new_tokens:
                break
            if int(finished.sum()) >= max(1, (DROP_SHARE if drop_share is None else drop_share) * len(live)):
                keep = (~finished).nonzero().squeeze(1)
                _keep_rows(cache, keep)
                live, mask, step_position, token = live[keep], mask[keep], step_position[keep], token[keep]
                finished = finished[keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
            step_position = step_position[:, -1:] + 1
            step_ids = token[:, None]
    width = int(ends.max())
    return torch.cat([input_ids, new[:, :width]], dim=1)


def _keep_rows(cache, keep) -> None:
    """Only the rows `keep` of a static KV cache (its tensors copied once)."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, keep)
        layer.values = layer.values.index_select(0, keep)
        layer.batch_size = len(keep)


def left_pad(prompts: list[list[int]], pad_token_id: int, device=None):
    """`input_ids` and `attention_mask` for token lists of different lengths, padded on the left as generate wants."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return ids, mask


def generate_in_batches(model, prompts: list[list[int]], *, batch_size: int, pad_token_id: int,
                        progress: bool | str = False, drop_finished: bool = True, **kwargs) -> list[list[int]]:
    """The new tokens `generate_shared` gives each prompt (token lists), in the prompts' order: the prompts are
    batched by length (similar lengths share a batch: less padding), in batches of equal size of at most
    `batch_size` rows. Each row keeps the batch's width (padding after its end included): the caller cuts it at its
    own stop token. A greedy call without logits processors (an evaluation's) drops each finished row from its
    batch (`greedy_dropping_finished`; `drop_finished=False`: every row computed until the batch's last ends).
    `progress`: True or a label ("evaluation") prints lines with an estimate (helpers.progress)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    eos = _greedy_eos(model, kwargs) if kwargs.get("max_new_tokens") else None
    new_tokens: list[list[int]] = [[] for _ in prompts]
    lines = ProgressLines(progress if isinstance(progress, str) else "generating", len(prompts),
                          unit="replies") if progress else None
    # batches of equal size: 900 prompts in batches of at most 128 are 8 of 112-113 rows, not 7 of 128 and one of 4
    # (whose steps would cost nearly as much as a full batch's)
    size = -(-len(order) // -(-len(order) // batch_size)) if order else batch_size
    for start in range(0, len(order), size):
        batch = order[start:start + size]
        ids, mask = left_pad([prompts[i] for i in batch], pad_token_id, model.device)
        out = None
        if eos is not None and drop_finished:
            with fast_products(model):
                out = greedy_dropping_finished(model, ids, mask, max_new_tokens=kwargs["max_new_tokens"],
                                               eos_token_id=eos, pad_token_id=pad_token_id)
        if out is None:
            out = generate_shared(model, ids, mask, pad_token_id=pad_token_id, **kwargs)
        for i, row in zip(batch, out[:, ids.shape[1]:].tolist()):
            new_tokens[i] = row
        if lines:
            lines.advance(len(batch))
    return new_tokens


@contextlib.contextmanager
def prompt_prefix_shared(model):
    """Inside, `model.generate` is `generate_shared` over the model's own generate, for a caller that cannot be
    handed another function: TRL 1.16 without vLLM generates each rollout turn with
    `unwrapped_model.generate(input_ids, attention_mask, generation_config)`. On leaving, the model's own again.
    Entered by `helpers.compute.fast_trainers.FastGRPOTrainer` around its generation, nowhere else."""
    if getattr(model.generate, "shares_prompt_prefix", False):
        yield model
        return
    had = model.__dict__.get("generate")   # a generate set on the instance (transformers' custom_generate) stays
    plain = model.generate
    wrapped = functools.wraps(plain)(functools.partial(generate_shared, model, generate=plain))
    wrapped.shares_prompt_prefix = True
    model.generate = wrapped
    try:
        yield model
    finally:
        if had is None:
            del model.generate
        else:
            model.generate = had
