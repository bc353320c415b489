"""helpers.compute.generation: the shared prompt prefix computed once gives the same tokens as plain `model.generate`.

Real models (the tiny tool-calling Qwen3 and SmolLM2-135M), real chat template and tool schema, real
reasoning_gym questions; a real GRPOTrainer whose rollouts go through it.
"""

from __future__ import annotations

import functools

import pytest
import torch

from helpers.compute import generation
from helpers.compute.generation import generate_shared, prompt_prefix_shared, shared_prefix_length
from helpers.prompts import SYSTEM_PROMPT, answer_tool


def test_shared_prefix_leaves_every_row_a_token():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2      # identical rows: the last token is generated from
    assert shared_prefix_length([[7, 1], [8, 1]]) == 0
    assert shared_prefix_length([]) == 0


def _model(name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.model_folders import resolve_model

    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), tokenizer


def _questions(n, seed=5):
    import reasoning_gym

    return [d["question"] for d in reasoning_gym.create_dataset("chain_sum", min_terms=2, max_terms=3, min_digits=1,
                                                                max_digits=3, seed=seed, size=n)]


def _batch(tokenizer, questions, pad_to_multiple_of=None):
    texts = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}],
                                           tools=[answer_tool], add_generation_prompt=True, tokenize=False,
                                           enable_thinking=False) for q in questions]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False,
                     pad_to_multiple_of=pad_to_multiple_of)


@functools.lru_cache(maxsize=None)
def _plain_generate(name, precision=None):
    """Plain `model.generate` on the evaluation batch the greedy and one-read tests compare with (12 questions,
    left-padded to a multiple of 64, 24 greedy tokens and their scores), computed once per model and precision. It
    runs on nn.Linear's and sdpa's own products: neither of our paths is entered while it runs."""
    from helpers.compute.precision import autocast

    model, tokenizer = _model(name)
    inputs = _batch(tokenizer, _questions(12), pad_to_multiple_of=64)
    entered = []
    own_columns, streamed_rows = generation._own_columns, generation._streamed_rows
    generation._own_columns = lambda *a: entered.append("one read") or own_columns(*a)
    generation._streamed_rows = lambda *a: entered.append("streamed") or streamed_rows(*a)
    try:
        with torch.no_grad(), autocast(precision, "cpu"):
            plain = model.generate(**inputs, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                   return_dict_in_generate=True, output_scores=True)
    finally:
        generation._own_columns, generation._streamed_rows = own_columns, streamed_rows
    assert not entered, entered
    return plain


@pytest.mark.slow
@pytest.mark.parametrize("name,precision", [("tiny-toolcall", None), ("smollm2-135m", None), ("tiny-toolcall", "bf16")])
def test_greedy_replies_are_identical_to_plain_generate(name, precision, monkeypatch):
    """An evaluation batch (different questions, left-padded, extra padding as TRL's pad_to_multiple_of adds):
    the same tokens as plain `generate`, in fp32 and under the bf16 autocast a notebook may train in, and the
    shared path really ran (a prefix was prefilled once)."""
    from helpers.compute.precision import autocast

    model, tokenizer = _model(name)
    inputs = _batch(tokenizer, _questions(12), pad_to_multiple_of=64)
    kwargs = {"max_new_tokens": 24, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    plain = _plain_generate(name, precision).sequences
    prefilled = []
    real = generation._prefilled_cache
    monkeypatch.setattr(generation, "_prefilled_cache", lambda *a, **k: prefilled.append(a[1]) or real(*a, **k))
    with torch.no_grad(), autocast(precision, "cpu"):
        shared = generate_shared(model, inputs["input_ids"], inputs["attention_mask"], **kwargs)
    assert len(prefilled) == 1 and len(prefilled[0]) > 200          # the system prompt + tool schema, once
    assert shared.shape == plain.shape
    assert torch.equal(shared, plain)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-toolcall", "smollm2-135m"])
def test_streamed_products_change_no_token_and_only_no_gradient_fp32_passes(name, monkeypatch):
    """`weights_streamed_once` computes a decode step's products as (W @ x.T).T: in fp32 an evaluation batch gets
    the same tokens as plain generate (which multiplies nn.Linear's way) while the streamed product really ran on
    every decode step; passes that build a graph, run under autocast or hold many rows keep nn.Linear's product;
    and the layers are back to their class's forward afterwards."""
    from helpers.compute.precision import autocast

    model, tokenizer = _model(name)
    inputs = _batch(tokenizer, _questions(12))
    streamed = []
    real = generation._streamed_rows
    monkeypatch.setattr(generation, "_streamed_rows", lambda w, x: streamed.append(real(w, x)) or streamed[-1])
    kwargs = {"max_new_tokens": 16, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        plain = model.generate(**inputs, **kwargs)
        assert not streamed                                           # plain generate: nn.Linear's own product
        shared = generate_shared(model, inputs["input_ids"], inputs["attention_mask"], **kwargs)
    assert torch.equal(shared, plain)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert streamed.count(12) >= 15 * linears                         # 12 rows at each of 15 decode steps
    assert all("forward" not in m.__dict__ for m in model.modules())

    layer = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    x = torch.randn(5, layer.in_features, generator=torch.Generator().manual_seed(0))
    with generation.weights_streamed_once(model):
        with torch.no_grad():   # another order of the same sums: equal to the bit at some row counts, not all;
            # within fp32's rounding of a sum of `in_features` products (1.4e-5 seen on an output of 2.4)
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias),
                                       rtol=1e-5, atol=1e-4)
        streamed.clear()
        assert layer(x).requires_grad and not any(streamed)           # a graph: nn.Linear's product
        with torch.no_grad(), autocast("bf16", "cpu"):
            layer(x)
        with torch.no_grad():
            layer(torch.randn(generation.STREAMED_MAX_ROWS + 1, layer.in_features))
        assert not any(streamed)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-toolcall", "smollm2-135m"])
def test_the_prefix_is_read_once_per_step_and_gives_sdpas_tokens(name, monkeypatch):
    """`prefix_read_once`: an evaluation batch (different questions, left-padded, padding to a multiple of 64) took
    the one-read attention in every layer at every decode step, gave the same greedy tokens as plain generate and
    scores within fp32 rounding of its own, and the model is back on sdpa afterwards."""
    model, tokenizer = _model(name)
    inputs = _batch(tokenizer, _questions(12), pad_to_multiple_of=64)
    plain = _plain_generate(name)   # 24 greedy tokens: the first 16 are what 16 would have been
    one_read = []
    real = generation._own_columns
    monkeypatch.setattr(generation, "_own_columns", lambda *a: one_read.append(a[1]) or real(*a))
    kwargs = {"max_new_tokens": 16, "do_sample": False, "pad_token_id": tokenizer.pad_token_id,
              "return_dict_in_generate": True, "output_scores": True}
    with torch.no_grad():
        shared = generate_shared(model, inputs["input_ids"], inputs["attention_mask"], **kwargs)
    assert torch.equal(shared.sequences, plain.sequences[:, :inputs["input_ids"].shape[1] + 16])
    assert len(shared.scores) == 16
    for mine, theirs in zip(shared.scores, plain.scores):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    layers = model.config.num_hidden_layers
    assert len(one_read) >= 16 * layers and min(one_read) > 200        # the system prompt + tool schema: read once
    assert model.config._attn_implementation == "sdpa"


class _Attention(torch.nn.Module):
    num_key_value_groups = 3
    layer_idx = 0


@pytest.mark.parametrize("length", [1, 5])
def test_prefix_attention_is_sdpa_split_in_two(length, monkeypatch):
    """The two-part softmax against transformers' sdpa on a static cache's layout: 6 rows whose first 40 columns
    are one prefix, then each row's own padding and tokens, then unwritten columns; a decode step (1 query) and a
    prefill of 5 causal queries; in fp32, and in bf16 (bf16 tensors, or fp32 ones under bf16 autocast) within bf16's
    rounding. With gradients on, in fp16 or outside a shared batch it is sdpa itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = torch.Generator().manual_seed(1)
    rows, kv_heads, dim, shared, written, columns = 6, 2, 16, 40, 55, 70
    key = torch.randn(rows, kv_heads, columns, dim, generator=g)
    value = torch.randn(rows, kv_heads, columns, dim, generator=g)
    key[:, :, :shared], value[:, :, :shared] = key[:1, :, :shared], value[:1, :, :shared]
    query = torch.randn(rows, kv_heads * 3, length, dim, generator=g)
    mask = torch.zeros(rows, 1, length, columns, dtype=torch.bool)
    mask[..., :shared] = True
    for r in range(rows):
        for i in range(length):       # each row's padding hidden, its own tokens up to the query's position
            mask[r, 0, i, shared + r:written - length + i + 1] = True
    module = _Attention().eval()
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    one_read = []
    columns = generation._own_columns
    monkeypatch.setattr(generation, "_own_columns", lambda *a: one_read.append(a[1]) or columns(*a))
    token = generation._prefix_length.set(shared)
    try:
        with torch.no_grad():
            got, _ = generation._prefix_attention(module, query, key, value, mask, scaling=0.25)
        assert one_read == [shared]
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        with torch.no_grad():   # bf16 tensors, and fp32 ones under bf16 autocast (RoPE hands attention fp32 queries
            half = [t.bfloat16() for t in (query, key, value)]          # and keys): computed in bf16, as sdpa does
            got = generation._prefix_attention(module, *half, mask, scaling=0.25)[0]
            assert got.dtype == torch.bfloat16 and one_read == [shared, shared]
            torch.testing.assert_close(got.float(), expected, rtol=0.02, atol=0.02)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = generation._prefix_attention(module, query, key, value, mask, scaling=0.25)[0]
                theirs = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)[0]
            assert got.dtype == theirs.dtype == torch.bfloat16 and len(one_read) == 3
            torch.testing.assert_close(got.float(), theirs.float(), rtol=0.02, atol=0.02)
        monkeypatch.setattr(generation, "_own_columns", lambda *a: pytest.fail("should be sdpa's"))
        generation._prefix_attention(module, query, key, value, mask, scaling=0.25)     # a graph may be built
        with torch.no_grad():
            half = [t.half() for t in (query, key, value)]
            assert torch.equal(generation._prefix_attention(module, *half, mask, scaling=0.25)[0],
                               sdpa_attention_forward(module, *half, mask, scaling=0.25)[0])
    finally:
        generation._prefix_length.reset(token)
    with torch.no_grad():
        assert torch.equal(generation._prefix_attention(module, query, key, value, mask, scaling=0.25)[0], expected)


@pytest.mark.slow
@pytest.mark.parametrize("name,temperature", [("tiny-toolcall", 4.0), ("smollm2-135m", 0.9)])
def test_a_sampled_group_is_identical_for_the_same_seed(name, temperature):
    """A GRPO group (one prompt repeated) sampled as GRPOTrainer samples (temperature, no top-k/top-p): the same
    tokens for the same seed, so the sampling distribution is the plain path's, not an approximation of it. (The tiny
    model is near-certain of its reply: a high temperature makes its rows differ.)"""
    model, tokenizer = _model(name)
    inputs = _batch(tokenizer, _questions(1) * 6)
    kwargs = {"max_new_tokens": 20, "do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0,
              "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        torch.manual_seed(3)
        plain = model.generate(**inputs, **kwargs)
        torch.manual_seed(3)
        shared = generate_shared(model, inputs["input_ids"], inputs["attention_mask"], **kwargs)
    assert torch.equal(shared, plain)
    assert len({tuple(r) for r in plain[:, inputs["input_ids"].shape[1]:].tolist()}) > 1   # really sampled


@pytest.mark.slow
def test_scores_and_fallbacks_behave_like_generate(monkeypatch):
    """What helpers.rollouts asks for (return_dict_in_generate + output_scores) comes back with the caller's prompt;
    calls it does not handle (several sequences per prompt, too short a shared prefix) go to plain generate."""
    model, tokenizer = _model("tiny-toolcall")
    inputs = _batch(tokenizer, _questions(3))
    with torch.no_grad():
        out = generate_shared(model, inputs["input_ids"], inputs["attention_mask"], max_new_tokens=6, do_sample=False,
                              return_dict_in_generate=True, output_scores=True, pad_token_id=tokenizer.pad_token_id)
        plain = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert torch.equal(out.sequences, plain) and len(out.scores) == plain.shape[1] - inputs["input_ids"].shape[1]

    monkeypatch.setattr(generation, "_prefilled_cache", lambda *a, **k: pytest.fail("should fall back"))
    with torch.no_grad():
        several = generate_shared(model, inputs["input_ids"][:1], inputs["attention_mask"][:1], max_new_tokens=4,
                                  num_return_sequences=2, do_sample=True, pad_token_id=tokenizer.pad_token_id)
        short = torch.tensor([[5, 6, 7], [5, 6, 8]])
        unshared = generate_shared(model, short, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert several.shape[0] == 2 and unshared.shape == (2, 6)


@pytest.mark.slow
def test_prompt_prefix_shared_wraps_generate_only_inside_and_keeps_lora_models_working():
    from peft import LoraConfig, get_peft_model

    model, tokenizer = _model("tiny-toolcall")
    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    inputs = _batch(tokenizer, _questions(4))
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        plain = lora.generate(**inputs, **kwargs)
        with prompt_prefix_shared(lora) as inside, prompt_prefix_shared(lora):
            assert inside is lora and lora.generate.shares_prompt_prefix
            shared = lora.generate(**inputs, **kwargs)
        assert not getattr(lora.generate, "shares_prompt_prefix", False) and "generate" not in lora.__dict__
    assert torch.equal(shared, plain)


@pytest.mark.slow
def test_a_lora_model_on_a_16_bit_base_generates_under_the_trainers_mixed_precision_wrapper(monkeypatch):
    """What GRPOTrainer does on a GPU with LoRA: the base weights in 16 bits, the model's forward wrapped by
    accelerate for mixed precision (autocast, outputs cast to fp32), while generate runs the inner model unwrapped.
    The prefix is then computed in fp32 and the replies in bf16; attention must still get one dtype (an H200
    running the T4 recipe failed here: "Expected query, key, and value to have the same dtype")."""
    from accelerate.utils import convert_outputs_to_fp32
    from peft import LoraConfig, get_peft_model

    model, tokenizer = _model("tiny-toolcall")
    lora = get_peft_model(model.to(torch.bfloat16), LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora.forward = convert_outputs_to_fp32(torch.autocast("cpu", dtype=torch.float16)(lora.forward))
    inputs = _batch(tokenizer, _questions(4))
    prefilled = []
    real = generation._prefilled_cache
    monkeypatch.setattr(generation, "_prefilled_cache", lambda *a, **k: prefilled.append(a[1]) or real(*a, **k))
    with torch.no_grad():
        shared = generate_shared(lora, inputs["input_ids"], inputs["attention_mask"], max_new_tokens=8,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert len(prefilled) == 1
    assert shared.shape[0] == 4 and inputs["input_ids"].shape[1] < shared.shape[1] <= inputs["input_ids"].shape[1] + 8
    assert torch.equal(shared[:, :inputs["input_ids"].shape[1]], inputs["input_ids"])


@pytest.mark.slow
def test_fast_grpo_trainer_generates_shared_in_a_real_run_against_a_real_environment(tmp_path, rg_server, monkeypatch):
    """FastGRPOTrainer (TRL 1.16's GRPOTrainer, no vLLM, with an environment_factory on a real reasoning_gym server):
    each generation batch prefills the shared prompt once and its decode steps read it once, each loss pass computes
    it once too (helpers/compute/loss_forward.py), training runs and logs a loss, and the model is left plain."""
    import random

    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from helpers.compute.fast_trainers import FastGRPOTrainer
    from helpers.models import load_policy
    from helpers.model_folders import resolve_model
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    prefilled = []
    real = generation._prefilled_cache
    monkeypatch.setattr(generation, "_prefilled_cache", lambda *a, **k: prefilled.append(a[2]) or real(*a, **k))
    from helpers.compute import loss_forward

    loss_passes = []
    cache = loss_forward._plain_cache
    monkeypatch.setattr(loss_forward, "_plain_cache", lambda *a: loss_passes.append(1) or cache(*a))
    one_read = []
    columns = generation._own_columns
    monkeypatch.setattr(generation, "_own_columns", lambda *a: one_read.append(a[1]) or columns(*a))

    class Env:
        def __init__(self):
            self.client = ReasoningGymEnv(base_url=rg_server.base_url).sync()
            self.reward = 0.0

        def reset(self, **kwargs) -> str:
            self.reward = 0.0
            return self.client.reset(dataset_name="chain_sum", seed=random.randint(0, 10**6), size=1).observation.question

        def answer(self, answer: str) -> str:
            """Submit the final answer for the current question.

            Args:
                answer: The agent's answer.
            """
            step = self.client.step(ReasoningGymAction(answer=str(answer)))
            self.reward = float(step.observation.score or 0.0)
            return f"score={self.reward}"

    config = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                        save_strategy="no", logging_steps=1, per_device_train_batch_size=4, num_generations=4,
                        max_steps=2, max_completion_length=16, max_tool_calling_iterations=1, learning_rate=1e-5,
                        chat_template_kwargs={"enable_thinking": False},
                        activation_checkpointing=False)   # as the notebooks' CPU profiles (TRL's default is on)
    rows = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}]] * 8
    model = load_policy("tiny-toolcall")
    assert not getattr(model.generate, "shares_prompt_prefix", False)   # a plain model: the trainer brings the paths
    trainer = FastGRPOTrainer(model=model, processing_class=AutoTokenizer.from_pretrained(resolve_model("tiny-toolcall")),
                              reward_funcs=lambda environments, **kw: [e.reward for e in environments],
                              train_dataset=Dataset.from_dict({"prompt": rows}), args=config, environment_factory=Env)
    trainer.skipped = None   # every loss pass runs: the tiny model's rollouts often all score 0 (nothing to learn)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any("loss" in h for h in trainer.state.log_history)
    assert prefilled.count(4) >= 2   # each step's 4 rollouts: the shared prompt prefilled once for all four
    assert one_read                  # and read once a decode step (the trainer generates in train mode, no grad)
    assert len(loss_passes) >= 2     # each step's loss pass over the 4 rollouts: the prompt computed once
    assert "generate" not in model.__dict__ and "forward" not in model.model.__dict__   # nothing left on the model


@pytest.mark.slow
def test_a_lora_model_generates_with_its_adapters_merged_and_gets_its_base_back_bit_for_bit(monkeypatch):
    """On a card (here the CPU stands in: MERGE_DEVICES) a LoRA model generates through its base weights alone,
    with the adapters merged in: the same scores as the adapters beside the base, no adapter product run, and
    afterwards the 16-bit base weights exactly as before (merging and unmerging alone would round them)."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = _model("tiny-toolcall")
    torch.manual_seed(0)
    lora = get_peft_model(model.to(torch.bfloat16), LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM",
                                                               init_lora_weights=False))   # B != 0: adapters matter
    inputs = _batch(tokenizer, _questions(4))
    adapter_calls = []
    for name, module in lora.named_modules():
        if name.endswith("lora_A.default"):
            module.register_forward_hook(lambda *a: adapter_calls.append(1))
    base = {n: p.detach().clone() for n, p in lora.named_parameters() if "base_layer.weight" in n}
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": tokenizer.pad_token_id,
              "return_dict_in_generate": True, "output_scores": True}

    with torch.no_grad():
        beside = generate_shared(lora, inputs["input_ids"], inputs["attention_mask"], **kwargs)   # CPU: not merged
        assert adapter_calls, "on the CPU the adapters run beside the base"
        adapter_calls.clear()
        monkeypatch.setattr(generation, "MERGE_DEVICES", {"cpu"})
        merged = generate_shared(lora, inputs["input_ids"], inputs["attention_mask"], **kwargs)
    assert not adapter_calls, "merged: no adapter product during generation"
    # the first token's scores, from the same prompt: bf16 products rounded differently, so close, not equal (a
    # near-tie can then pick another token, after which the rows need not agree)
    assert torch.allclose(merged.scores[0].float(), beside.scores[0].float(), atol=0.15, rtol=0.02)
    assert merged.sequences.shape[0] == beside.sequences.shape[0]
    assert all(torch.equal(p, base[n]) for n, p in lora.named_parameters() if n in base)
    assert not any(getattr(m, "merged", False) for m in lora.modules())

    lora.merge_adapter()
    lora.unmerge_adapter()
    assert any(not torch.equal(p, base[n]) for n, p in lora.named_parameters() if n in base), \
        "peft's own merge and unmerge round a 16-bit base: why adapters_merged keeps a copy"


@pytest.mark.slow
@pytest.mark.parametrize("precision", [None, "bf16"])
def test_finished_rows_leave_the_batch_and_the_replies_stay_generates(precision, monkeypatch):
    """`generate_in_batches`' greedy path drops rows that reached EOS from the batch and its cache: the same rows as
    with every row kept to the end (prompt cut off, finished rows padded after EOS to the batch's width), in fp32
    and under bf16 autocast, and in fp32 the same as plain `generate` on the same batches (under bf16 the shared
    prefix itself may round otherwise: `generate_shared`). SmolLM2 on chain_sum questions ("The answer is 26." ends a step before
    "The answer is 241."), so the rows end at different steps and the batch really shrinks (its row counts are
    recorded)."""
    from helpers.compute.generation import generate_in_batches, left_pad
    from helpers.compute.precision import autocast

    model, tokenizer = _model("smollm2-135m")
    prompts = _batch(tokenizer, _questions(10, seed=8))
    prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompts["input_ids"], prompts["attention_mask"])]
    kwargs = {"max_new_tokens": 40, "do_sample": False, "eos_token_id": tokenizer.eos_token_id}
    batch_rows = []
    real = generation._keep_rows
    monkeypatch.setattr(generation, "_keep_rows", lambda cache, keep: batch_rows.append(len(keep)) or real(cache, keep))
    with torch.no_grad(), autocast(precision, "cpu"):
        dropping = generate_in_batches(model, prompts, batch_size=5, pad_token_id=tokenizer.pad_token_id, **kwargs)
        assert batch_rows and min(batch_rows) < 5                     # rows left the batch
        kept = generate_in_batches(model, prompts, batch_size=5, pad_token_id=tokenizer.pad_token_id,
                                   drop_finished=False, **kwargs)
        plain = []
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), 5) if precision is None else ():   # the reference in fp32 only
            ids, mask = left_pad([prompts[i] for i in order[start:start + 5]], tokenizer.pad_token_id)
            out = model.generate(input_ids=ids, attention_mask=mask, pad_token_id=tokenizer.pad_token_id, **kwargs)
            plain += out[:, ids.shape[1]:].tolist()
    assert dropping == kept                                           # today's path, rows kept to the end
    if precision is None:                                             # in fp32 also plain generate's
        assert [dropping[i] for i in order] == plain
    lengths = {row.index(tokenizer.eos_token_id) for row in kept if tokenizer.eos_token_id in row}
    assert len(lengths) > 1                                           # the replies ended at different steps


def test_evaluation_batches_are_sized_to_their_kv_cache():
    """`default_batch_size` on SmolLM2's real config: as many rows as a 3 GiB cache holds for notebook 01's ~445
    positions (256, the most, under bf16, where the cache is kept in bf16; ~157 in fp32), fewer for longer prompts, never
    fewer than 8; 8 on a card."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from helpers.chain_sum.evaluation import EVAL_CACHE_GIB, default_batch_size
    from helpers.model_folders import resolve_model

    config = AutoConfig.from_pretrained(resolve_model("smollm2-135m"))
    cpu = SimpleNamespace(device=torch.device("cpu"), config=config)
    per_position = config.num_hidden_layers * 2 * config.num_key_value_heads * 64
    budget = EVAL_CACHE_GIB * 2**30
    assert default_batch_size(cpu, 445, "bf16") == 256 and 256 * 445 * per_position * 2 <= budget
    for positions in (445, 2000):   # fp32: the most rows whose cache fits
        rows = default_batch_size(cpu, positions, None)
        assert rows * positions * per_position * 4 <= budget < (rows + 1) * positions * per_position * 4
    assert default_batch_size(cpu, 445, None) > 128 > default_batch_size(cpu, 2000, None)
    assert default_batch_size(cpu, 10**6, "bf16") == 8
    assert default_batch_size(SimpleNamespace(device=torch.device("meta"), config=config), 445) == 8


def test_only_plain_greedy_calls_drop_finished_rows():
    """The calls `generate_in_batches` may run through `greedy_dropping_finished`: greedy, no logits processor, no
    scores asked for; its EOS ids from the call or the model's generation config."""
    model, _ = _model("tiny-toolcall")
    eos = model.generation_config.eos_token_id
    assert generation._greedy_eos(model, {"do_sample": False, "max_new_tokens": 8}) == ([eos] if isinstance(eos, int)
                                                                                       else list(eos))
    assert generation._greedy_eos(model, {"max_new_tokens": 8, "eos_token_id": [5, 6]}) == [5, 6]
    for refused in ({"do_sample": True, "temperature": 0.7}, {"repetition_penalty": 1.2}, {"output_scores": True},
                    {"min_new_tokens": 4}, {"num_beams": 2}):
        assert generation._greedy_eos(model, {"max_new_tokens": 8, **refused}) is None, refused
