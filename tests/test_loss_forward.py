"""helpers.loss_forward: the loss pass with the shared prompt prefix computed once, and TRL's fused LM head scoring
only the completions on a CPU, give the plain pass's log-probabilities and gradients.

Real model (the tiny tool-calling Qwen3), real chat template and tool schema, real reasoning_gym questions, TRL's
own fused LM head (the one GRPOTrainer and SFTTrainer patch in). A real GRPOTrainer whose loss passes go
through it: tests/test_generation.py.
"""

from __future__ import annotations

import pytest
import torch

from trl.kernels.chunked_logprob import _use_triton as triton_only

from helpers import loss_forward
from helpers.loss_forward import forward_shared, share_forward_prefix, unshare_forward_prefix


def _scoring_batch(tokenizer, vocab):
    """GRPOTrainer's layout of a micro-batch (the loss benchmark's): left-padded prompts (two questions, two rows
    each), right-padded completions of different lengths, labels only on the completions."""
    from benchmarks.loss_pass import micro_batch

    return micro_batch(tokenizer, vocab)[:3]


def _model():
    """The tiny tool-calling Qwen3 with TRL's fused LM head patched in, as GRPOTrainer does, and its embeddings and
    lowest layer frozen (FREEZE_LAYERS): the loss benchmark's tiny model."""
    from benchmarks.loss_pass import load

    return load("tiny")


def _score(model, ids, mask, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    (-(out.log_probs * (labels[:, 1:] != -100)).sum()).backward()   # log_probs[:, t] scores token t + 1
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.log_probs.detach(), out.entropy.detach(), grads


@pytest.mark.slow
def test_shared_prefix_and_compact_scoring_give_the_plain_passs_logprobs_and_gradients(monkeypatch):
    """fp32: the same log-probabilities, entropies and gradients (every trained parameter) as the plain pass,
    and the shared path really ran: the backbone saw the prefix once, then one short row per rollout."""
    import trl.trainer.utils as trl_utils

    model, tokenizer = _model()
    ids, mask, labels = _scoring_batch(tokenizer, model.config.vocab_size)
    monkeypatch.setattr(trl_utils, "_use_triton", triton_only)   # TRL as shipped (a load_policy earlier swapped it)
    plain = _score(model, ids, mask, labels)

    shapes = []
    backbone_forward = type(model.model).forward
    monkeypatch.setattr(type(model.model), "forward",
                        lambda self, *a, **k: shapes.append(tuple(k["input_ids"].shape)) or backbone_forward(self, *a, **k))
    share_forward_prefix(model)
    shared = _score(model, ids, mask, labels)

    scored = labels[:, 1:] != -100
    assert torch.allclose(plain[0][scored], shared[0][scored], atol=1e-4)
    assert torch.allclose(plain[1][scored], shared[1][scored], atol=1e-4)
    assert plain[2].keys() == shared[2].keys() and "model.layers.0.mlp.up_proj.weight" not in shared[2]
    for name, grad in plain[2].items():
        assert torch.allclose(grad, shared[2][name], rtol=1e-3, atol=1e-5), name
    prefix, rows = shapes
    assert prefix[0] == 1 and prefix[1] > 200       # the system prompt and tool schema, once
    assert rows[0] == ids.shape[0] and rows[1] < ids.shape[1] - prefix[1] + 1

    unshare_forward_prefix(model)
    assert not getattr(model.model.forward, "shares_forward_prefix", False)


@pytest.mark.slow
def test_on_a_cpu_trl_scores_every_position_unless_told_to_score_only_the_completions(monkeypatch):
    """Upstream fact (TRL 1.16): off Triton, the fused LM head projects every position onto the vocabulary, the
    prompt's included; `score_completions_only` leaves only the labelled ones, with the same numbers."""
    import trl.trainer.utils as trl_utils
    from trl.kernels import ChunkedLogProbFunction

    model, tokenizer = _model()
    ids, mask, labels = _scoring_batch(tokenizer, model.config.vocab_size)
    rows = []
    apply = ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: rows.append(hidden.shape[0]) or apply(hidden, *a))
    monkeypatch.setattr(trl_utils, "_use_triton", triton_only)   # TRL as shipped (a load_policy earlier swapped it)
    before = _score(model, ids, mask, labels)
    loss_forward.score_completions_only()
    loss_forward.score_completions_only()                  # idempotent
    after = _score(model, ids, mask, labels)

    assert rows == [ids.shape[0] * (ids.shape[1] - 1), int((labels[:, 1:] != -100).sum())]
    assert torch.allclose(before[0], after[0], atol=1e-5) and torch.allclose(before[1], after[1], atol=1e-5)
    for name, grad in before[2].items():
        assert torch.allclose(grad, after[2][name], rtol=1e-4, atol=1e-6), name


def test_calls_it_is_not_exact_for_run_the_plain_forward():
    """Generation (a cache, use_cache not False), position ids of the caller's, rows whose tokens are not one run,
    fewer than MIN_SHARED shared tokens, one row, hidden states or router logits asked for: the plain forward,
    with the caller's arguments untouched."""
    calls = []

    class Backbone:
        gradient_checkpointing = False

    def plain(**kwargs):
        calls.append(kwargs)
        return "plain"

    shared = torch.arange(100).tolist()
    ids = torch.tensor([shared + [1, 2], shared + [3, 4]])
    ones = torch.ones_like(ids)
    gap = ones.clone()
    gap[0, 50] = 0
    few = torch.tensor([[5, 6, 7], [5, 6, 8]])
    cases = [dict(input_ids=ids, attention_mask=ones),                                  # use_cache not given
             dict(input_ids=ids, attention_mask=ones, use_cache=True),
             dict(input_ids=ids, attention_mask=ones, use_cache=False, position_ids=ids),
             dict(input_ids=ids, attention_mask=gap, use_cache=False),
             dict(input_ids=few, attention_mask=torch.ones_like(few), use_cache=False),
             dict(input_ids=ids[:1], attention_mask=ones[:1], use_cache=False),
             dict(input_ids=ids, attention_mask=ones, use_cache=False, output_hidden_states=True),
             dict(input_ids=ids, attention_mask=ones, use_cache=False, output_router_logits=True)]
    for case in cases:
        assert forward_shared(Backbone(), plain, **case) == "plain"
    assert [c.keys() for c in calls] == [c.keys() for c in cases]
