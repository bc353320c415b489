"""Every notebook's `gpu` settings, run on CPU for one step: the GPU code path without CUDA.

Each run is PROFILE="gpu" on a faked T4 (AGENT_RL_FAKE_GPU=T4: helpers.compute.hardware.detect_gpu reports the card,
there is no CUDA behind it), so the card recipe applies as on a Colab T4: LoRA, the memory check against 15 GiB.
What changes from a real gpu run: the model (a tiny one instead of Qwen3, which needs a download) and the
knobs that only say how much to do, set to the least that still runs every stage once: steps, episodes,
evaluation size, tokens per completion, 02's micro-batch, 03's accumulation steps and turns, 00's sandbox time
limit. Every other knob is the gpu profile's: learning rate, sampling, group size, activation checkpointing,
logging, vLLM wanted, the OpenAI teacher wanted. What CPU cannot give falls back with its message, and the test
reads it: vLLM (no CUDA), the OpenAI teacher (no key); the card's fp16 becomes CPU's measured fp32-or-bf16.
The LoRA runs of 00-03 also save the merged model (SAVE_MERGED), and both folders load back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.notebooks import cell_outputs_text
from helpers.profiles import LORA_LR_MULTIPLIER, resolve_settings

from eval_checks import assert_precision_recorded

# notebook -> what differs from its gpu profile: the model, and how much to run
RUNS = {
    "01_grpo_walkthrough": dict(MODEL="tiny-toolcall", MAX_STEPS=1, MAX_COMPLETION_LENGTH=48, EVAL_N=2,
                                EVAL_MAX_NEW_TOKENS=32, SAVE_MERGED=True),
    "02_sft_warmup": dict(MODEL="tiny", N_EPISODES=6, NUM_TRAIN_EPOCHS=1, BATCH_SIZE=2, EVAL_N=2,
                          EVAL_MAX_NEW_TOKENS=32, SAVE_MERGED=True),
    "03_wordle_rollout_func": dict(MODEL="tiny", ECHO_MODEL="tiny", ECHO_STEPS=1, ECHO_MAX_COMPLETION_LENGTH=16,
                                   MAX_STEPS=1, GRADIENT_ACCUMULATION_STEPS=2, MAX_TURNS=2, FACTORY_STEPS=1,
                                   FACTORY_MAX_COMPLETION_LENGTH=32, EVAL_GAMES=4, SAVE_MERGED=True),
    "04_openreward_spec": dict(MODEL="tiny-toolcall", NUM_TASKS=16, MAX_STEPS=1, MAX_COMPLETION_LENGTH=48,
                               EVAL_TASKS=2, EVAL_MAX_NEW_TOKENS=32, SAVE_MERGED=True),
}


@pytest.mark.parametrize("notebook", list(RUNS))
def test_gpu_settings_run_on_cpu_with_a_tiny_model(notebook, notebook_runner, monkeypatch):
    monkeypatch.setenv("AGENT_RL_FAKE_GPU", "T4")
    for var in ("OPENAI_API_KEY", "OPENREWARD_API_URL", "OPENREWARD_SESSION_URL", "OPENREWARD_API_KEY"):
        monkeypatch.delenv(var, raising=False)   # a learner's fresh kernel: no teacher key, no ORS server set
    parameters = RUNS[notebook]
    metrics, executed = notebook_runner(notebook, PROFILE="gpu", **parameters)
    text = cell_outputs_text(executed)
    gpu = resolve_settings(notebook, "gpu", quiet=True, gpu=None)   # the profile as written, before the card

    # the gpu profile ran, planned for a T4: its LoRA, its memory check; the model is the one swapped in
    assert metrics["profile"] == "gpu" and metrics["model"] == parameters["MODEL"]
    assert "(16gb class) sets: lora=True" in text and "card class 16gb" in text
    assert metrics["lora"] is True
    # no CUDA: precision "auto" measured fp32 against bf16 on the CPU instead of taking the T4's fp16
    assert_precision_recorded(metrics, text)
    # the trainer got the gpu profile's knobs
    assert metrics["activation_checkpointing"] is gpu.get("activation_checkpointing", False)
    assert "learning_rate" in metrics or notebook == "03_wordle_rollout_func"   # 03 records no trainer of its own
    for knob in ("learning_rate", "num_generations", "temperature", "top_entropy_quantile"):
        if knob in gpu and knob in metrics:
            # the T4 turns LoRA on, and LoRA multiplies the profile's rates (measured: docs/gpu.md)
            expected = gpu[knob] * LORA_LR_MULTIPLIER if knob == "learning_rate" else gpu[knob]
            assert metrics[knob] == pytest.approx(expected), knob
    assert f"LoRA: learning_rate {gpu.learning_rate:g} -> {gpu.learning_rate * LORA_LR_MULTIPLIER:g}" in text

    if gpu.get("use_vllm"):   # 03: the profile wants vLLM; without CUDA it says why and generates with transformers
        assert "vLLM not used: there is no CUDA GPU" in text and "use_vllm=False" in text
    if notebook == "03_wordle_rollout_func":
        assert metrics["generation_mode"] == "transformers generate (no vLLM)"
        assert metrics["factory_steps"] == 1 and metrics["echo_steps"] == 1
        assert metrics["warm_start"] is False and metrics["held_out"]["after"]["n"] == 4   # the original recipe: no SFT
    if notebook == "02_sft_warmup":   # the profile wants OpenAI's gpt-5-mini; without a key the local teacher teaches
        assert metrics["teacher_kind"] == "local" and "OPENAI_API_KEY is neither in the environment" in text
        assert metrics["sft_steps"] >= 1 and metrics["eval_n"] == 2
    if notebook == "01_grpo_walkthrough":
        assert metrics["steps"] == 1 and metrics["eval_n"] == 2 and metrics["top_entropy_quantile"] == 1.0
        # LoRA as the LORA knob gives it on CPU too: adapters only trained, the evaluation after on the adapted model
        assert "LoRA parameters" in text and metrics["accuracy_after"] is not None
    if notebook == "04_openreward_spec":
        assert metrics["steps"] == 1

    if parameters.get("SAVE_MERGED"):
        assert_adapter_and_merged_load_back(metrics)


def assert_adapter_and_merged_load_back(metrics: dict) -> None:
    """The adapter folder loads back onto its base (peft); the merged folder is a plain transformers model."""
    import torch
    from transformers import AutoModelForCausalLM

    from helpers.models import load_policy

    saved = Path(metrics.get("saved_to") or metrics["checkpoint"])
    merged = Path(metrics["merged_to"])
    assert merged == saved.with_name(saved.name + "-merged")
    assert (saved / "adapter_config.json").exists() and not (saved / "model.safetensors").exists()
    adapted = load_policy(str(saved), device="cpu")
    assert any("lora_" in name for name, _ in adapted.named_parameters())
    assert next(adapted.parameters()).dtype == torch.float32
    assert not (merged / "adapter_config.json").exists() and (merged / "model.safetensors").exists()
    plain = AutoModelForCausalLM.from_pretrained(merged)
    assert not hasattr(plain, "peft_config") and not any("lora_" in n for n, _ in plain.named_parameters())
    assert (merged / "tokenizer_config.json").exists()
