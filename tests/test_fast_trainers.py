"""helpers.compute.fast_trainers.FastGRPOTrainer against TRL's own GRPOTrainer: the same completions, losses and weights.

The notebooks build `GRPOTrainer if PLAIN_TRL else FastGRPOTrainer`; this is what makes the switch safe. A real
GRPOTrainer and a real FastGRPOTrainer train the tiny tool-calling Qwen3 from one seed on prompts that start with
notebook 01's system prompt and tool schema (so the shared-prefix paths really run), in fp32, for three steps, with
plain SGD so that the weights' updates are the gradients (assert_same_updates says why).
"""

from __future__ import annotations

import pytest
import torch

from helpers.compute import generation, loss_forward

GENERATE_SHARED, FORWARD_SHARED = generation.generate_shared, loss_forward.forward_shared


def _train(tmp_path, trainer_class, monkeypatch):
    """Three steps of `trainer_class` from seed 0; returns (trainer, completions per reward call, weights, the
    timer, how often the shared-prefix paths ran)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, set_seed
    from trl import GRPOConfig

    from helpers.compute.budget import train_timer
    from helpers.models import load_policy
    from helpers.model_folders import resolve_model
    from helpers.prompts import SYSTEM_PROMPT, answer

    ran = {"generate_shared": 0, "forward_shared": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            ran[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(generation, "generate_shared", counted("generate_shared", GENERATE_SHARED))
    monkeypatch.setattr(loss_forward, "forward_shared", counted("forward_shared", FORWARD_SHARED))
    completions = []

    def reward(completion_ids, **kwargs):   # rollouts alternate 0 and 1 (no group without a gradient), plus a bit
        completions.append([list(ids) for ids in completion_ids])   # that depends on the tokens
        return [i % 2 + 0.01 * (sum(ids) % 7) for i, ids in enumerate(completion_ids)]

    set_seed(0)
    questions = ["What is 3 + 4 - 2?", "What is 10 - 7 + 5?"]
    rows = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]
    args = GRPOConfig(output_dir=str(tmp_path / trainer_class.__name__), use_cpu=True, bf16=False, report_to="none",
                      seed=0, save_strategy="no", logging_steps=1, per_device_train_batch_size=4,
                      gradient_accumulation_steps=1, num_generations=4, max_steps=3, max_completion_length=12,
                      learning_rate=1.0, optim="sgd", temperature=2.0, chat_template_kwargs={"enable_thinking": False},
                      activation_checkpointing=False)   # SGD: updates that are the gradient (assert_same_updates)
    timer = train_timer()
    trainer = trainer_class(model=load_policy("tiny-toolcall", device="cpu"),
                            processing_class=AutoTokenizer.from_pretrained(resolve_model("tiny-toolcall")),
                            reward_funcs=reward, train_dataset=Dataset.from_dict({"prompt": rows * 6}),
                            tools=[answer], args=args, callbacks=[timer])
    trainer.train()
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return trainer, completions, weights, timer, ran


@pytest.mark.slow
def test_fast_grpo_trainer_trains_as_trls_own(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    from helpers.compute.fast_trainers import FastGRPOTrainer

    plain, plain_texts, plain_weights, _, plain_ran = _train(tmp_path, GRPOTrainer, monkeypatch)
    fast, fast_texts, fast_weights, timer, fast_ran = _train(tmp_path, FastGRPOTrainer, monkeypatch)

    assert plain_ran == {"generate_shared": 0, "forward_shared": 0}   # TRL's own: none of ours
    assert fast_ran["generate_shared"] >= 3 and fast_ran["forward_shared"] >= 3   # ours really ran, every step
    assert fast_texts == plain_texts and len(fast_texts) == 3   # the same completions, step by step
    plain_loss = [h["loss"] for h in plain.state.log_history if "loss" in h]
    fast_loss = [h["loss"] for h in fast.state.log_history if "loss" in h]
    assert len(plain_loss) == 3 and fast_loss == pytest.approx(plain_loss, rel=1e-4, abs=1e-6)
    before = load_weights()
    assert any(not torch.equal(plain_weights[n], p) for n, p in before.items())   # training moved them
    assert_same_updates(before, plain_weights, fast_weights)
    assert fast.skipped is not None and (fast.skipped.seen, fast.skipped.skipped) == (3, 0)
    assert not hasattr(plain, "skipped")
    assert not getattr(fast.model.generate, "shares_prompt_prefix", False)   # nothing left on the model
    assert timer.seconds > 0 and timer.load_before is not None and timer.load_after is not None


def assert_same_updates(before: dict, plain: dict, fast: dict, tolerance: float = 1e-3) -> float:
    """Each weight moved the same way under both trainers: the two updates differ by less than `tolerance` of the
    tensor's largest update, plus the fp32 rounding of adding an update to the weight (under half a unit in the last
    place a step, so 4 * eps * |weight| covers both runs' 3 steps). Returns the worst difference as a share of that.

    The runs train with plain SGD at a rate that makes updates large against that rounding, so an update is the
    gradient, not Adam's near-sign of it: fp32 rounding differs between the two forward paths and between CPUs, and
    Adam turns a gradient of ~0 that rounds differently into a full step (an AVX-512 Xeon without bf16 failed the
    old weight-by-weight bound of the Adam runs on one element in 4,096). Measured on that Xeon, natively and with
    ATEN_CPU_CAPABILITY=avx2: at most 0.05 of the bound; a prompt prefix detached from the graph (the same first
    loss, no gradient through the prompt) exceeds it 670-1,460 times (docs/measurements.md, "The test suite")."""
    worst = 0.0
    for name, weight in plain.items():
        update, other = weight - before[name], fast[name] - before[name]
        bound = tolerance * update.abs().max() + 4 * torch.finfo(weight.dtype).eps * before[name].abs()
        share = ((update - other).abs() / bound.clamp_min(torch.finfo(weight.dtype).tiny)).max().item()
        assert share <= 1, (name, share)
        worst = max(worst, share)
    return worst


def load_weights():
    from helpers.models import load_policy

    return {n: p.detach() for n, p in load_policy("tiny-toolcall", device="cpu").named_parameters()}


def _sft(tmp_path, trainer_class, rows_scored):
    """Two SFT steps of `trainer_class` on the tiny model from seed 0 (assistant-only loss, as the notebooks);
    returns (trainer, weights)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, set_seed
    from trl import SFTConfig

    from helpers.models import load_policy
    from helpers.model_folders import resolve_model
    from helpers.prompts import SYSTEM_PROMPT

    set_seed(0)
    rows = [{"messages": [{"role": "system", "content": SYSTEM_PROMPT},
                          {"role": "user", "content": f"What is {i} + {i + 3}?"},
                          {"role": "assistant", "content": f"The sum is {2 * i + 3}."}]} for i in range(8)]
    args = SFTConfig(output_dir=str(tmp_path / trainer_class.__name__), use_cpu=True, bf16=False, report_to="none",
                     seed=0, save_strategy="no", logging_steps=1, per_device_train_batch_size=4, max_steps=2,
                     learning_rate=1.0, assistant_only_loss=True, activation_checkpointing=False,
                     optim="sgd")   # updates that are the gradient: assert_same_updates
    trainer = trainer_class(model=load_policy("tiny-toolcall", device="cpu"), args=args,
                            processing_class=AutoTokenizer.from_pretrained(resolve_model("tiny-toolcall")),
                            train_dataset=Dataset.from_list(rows))
    rows_scored.clear()
    trainer.train()
    return trainer, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.slow
def test_fast_sft_trainer_trains_as_trls_own_sharing_the_prompt_and_scoring_only_the_reply(tmp_path, monkeypatch):
    """FastSFTTrainer: the same losses and weights as SFTTrainer (to fp32's rounding), while the rows' shared prompt
    is computed once and TRL's fused LM head projects only the reply's positions onto the vocabulary."""
    import trl.trainer.utils as trl_utils
    from trl import SFTTrainer

    from helpers.compute.fast_trainers import FastSFTTrainer

    ran = {"generate_shared": 0, "forward_shared": 0}
    monkeypatch.setattr(loss_forward, "forward_shared",
                        lambda *a, **k: ran.__setitem__("forward_shared", ran["forward_shared"] + 1) or FORWARD_SHARED(*a, **k))
    rows_scored = []
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: rows_scored.append(hidden.shape[0]) or apply(hidden, *a))
    plain, plain_weights = _sft(tmp_path, SFTTrainer, rows_scored)
    plain_rows = list(rows_scored)
    assert ran["forward_shared"] == 0   # TRL's own: none of ours
    fast, fast_weights = _sft(tmp_path, FastSFTTrainer, rows_scored)

    assert plain_rows and rows_scored and sum(rows_scored) * 5 < sum(plain_rows)   # the reply's positions only
    assert ran["forward_shared"] == 2   # each step's pass: the shared prompt once
    plain_loss = [h["loss"] for h in plain.state.log_history if "loss" in h]
    fast_loss = [h["loss"] for h in fast.state.log_history if "loss" in h]
    assert len(plain_loss) == 2 and fast_loss == pytest.approx(plain_loss, rel=1e-5)
    assert_same_updates(load_weights(), plain_weights, fast_weights)
