"""helpers.compute.loss_forward: the loss pass with the shared prompt prefix computed once, and TRL's fused LM head scoring
only the completions on a CPU, give the plain pass's log-probabilities and gradients.

Real model (the tiny tool-calling Qwen3), real chat template and tool schema, real reasoning_gym questions, TRL's
own fused LM head (the one GRPOTrainer and SFTTrainer patch in). FastGRPOTrainer, whose loss passes go through it,
against TRL's own: tests/test_fast_trainers.py.
"""

from __future__ import annotations

import pytest
import torch

from trl.kernels.chunked_logprob import _use_triton as triton_only

from helpers.compute.loss_forward import completions_only_scored, forward_prefix_shared, forward_shared


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
    with forward_prefix_shared(model):
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

    assert not getattr(model.model.forward, "shares_forward_prefix", False)   # on leaving: the backbone's own again
    assert trl_utils._use_triton is triton_only


@pytest.mark.slow
def test_on_a_cpu_trl_scores_every_position_unless_told_to_score_only_the_completions(monkeypatch):
    """Upstream fact (TRL 1.16): off Triton, the fused LM head projects every position onto the vocabulary, the
    prompt's included; inside `completions_only_scored` only the labelled ones, with the same numbers; on leaving,
    TRL's own decision again."""
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
    with completions_only_scored(), completions_only_scored():   # entered twice: the same
        after = _score(model, ids, mask, labels)
    assert trl_utils._use_triton is triton_only

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


def _grpo_trainer(tmp_path, name, reward, *, callbacks=(), **config):
    """A real FastGRPOTrainer of the tiny model from load_policy: two groups of two rollouts a step, two micro-batches
    of two, three steps; `config` overrides GRPOConfig's arguments."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from helpers.compute.fast_trainers import FastGRPOTrainer

    from helpers.models import load_policy
    from helpers.model_folders import resolve_model
    from helpers.prompts import SYSTEM_PROMPT

    args = dict(output_dir=str(tmp_path / name), use_cpu=True, bf16=False, report_to="none", seed=0,
                save_strategy="no", logging_steps=1, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                num_generations=2, max_steps=3, max_completion_length=8, learning_rate=1e-3, temperature=1.5,
                top_entropy_quantile=0.5, chat_template_kwargs={"enable_thinking": False},
                activation_checkpointing=False)
    questions = [f"What is {a} + {b}?" for a, b in zip(range(10, 22), range(30, 42))]
    rows = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]
    return FastGRPOTrainer(model=load_policy("tiny-toolcall"),
                           processing_class=AutoTokenizer.from_pretrained(resolve_model("tiny-toolcall")),
                           reward_funcs=reward, train_dataset=Dataset.from_dict({"prompt": rows}),
                           args=GRPOConfig(**{**args, **config}), callbacks=list(callbacks))


def _grpo_run(tmp_path, name, *, skip: bool, rewards):
    """Three GRPO steps scored by `rewards(call, n)`; returns the trainer, the trained weights after each step, and
    the skip counts."""
    from transformers import TrainerCallback

    calls = []

    def reward(completions, **kwargs):
        calls.append(1)
        return rewards(len(calls), len(completions))

    snapshots = []

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            snapshots.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})

    trainer = _grpo_trainer(tmp_path, name, reward, callbacks=[Snapshot()])
    if not skip:
        trainer.skipped = None   # FastGRPOTrainer with every loss pass run, as TRL runs them
    trainer.train()
    return trainer, snapshots, trainer.skipped


@pytest.mark.slow
def test_skipping_zero_advantage_passes_trains_bit_for_bit_the_same(tmp_path):
    """A real FastGRPOTrainer whose second step's groups all score their rollouts alike (advantage 0 everywhere): with
    its skipping on, that step's two loss passes are skipped, and every trained weight after every
    step is bit-for-bit what TRL's own passes give. The second step still moves the weights (AdamW's momentum on a
    zero gradient), so a skipped pass must leave zero gradients, not none."""
    def rewards(call, n):   # steps 1 and 3: each group of two has one rollout right; step 2: all right
        return [1.0] * n if call == 2 else [float(i % 2) for i in range(n)]

    plain, plain_weights, _ = _grpo_run(tmp_path, "plain", skip=False, rewards=rewards)
    skipping, skip_weights, counts = _grpo_run(tmp_path, "skip", skip=True, rewards=rewards)

    assert (counts.seen, counts.skipped) == (6, 2)
    assert "2 of 6" in str(counts)
    assert len(plain_weights) == len(skip_weights) == 3
    for step, (a, b) in enumerate(zip(plain_weights, skip_weights), start=1):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[n], b[n]) for n in a), f"step {step}: the weights differ"
    assert any(not torch.equal(plain_weights[0][n], plain_weights[1][n]) for n in plain_weights[0]), \
        "step 2 (no gradient) should still move the weights by AdamW's momentum"
    logged = [[h.get("reward"), h.get("frac_reward_zero_std")] for h in plain.state.log_history if "reward" in h]
    assert logged == [[h.get("reward"), h.get("frac_reward_zero_std")]
                      for h in skipping.state.log_history if "reward" in h]
    assert [row[1] for row in logged] == [0.0, 1.0, 0.0]
    step_two = [h for h in skipping.state.log_history if h.get("step") == 2 and "reward" in h]
    assert "entropy" not in step_two[0]   # no pass scored: no entropy to log for that step


@pytest.mark.slow
def test_skipping_is_refused_where_zero_advantages_still_have_a_gradient(tmp_path, capsys):
    """With a KL term (beta > 0) every rollout is pulled towards the reference model, advantage or not: nothing
    is skipped (FastGRPOTrainer counts nothing), and the reason is printed."""
    trainer = _grpo_trainer(tmp_path, "kl", lambda completions, **kw: [1.0] * len(completions), beta=0.04)
    assert trainer.skipped is None
    assert "beta=0.04" in capsys.readouterr().out
