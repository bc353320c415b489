"""Each notebook's recipe, in one place: change a notebook's defaults here.

A `Recipe` holds what a notebook needs to know about itself before it runs:
- `profiles`: its settings for `tiny` (CI, seconds), `cpu` (a laptop, minutes) and `gpu` (the original
  tutorials), the same keys in each; `helpers.profiles.resolve_settings` picks one and applies your knobs;
- `step_tokens(settings, measured_length)`: the tokens one training step holds, (trained in a micro-batch,
  generated at once, logits kept), from which `helpers.compute.hardware` estimates memory;
- `starts_from`: the notebook whose checkpoint it warm-starts from (`helpers.models.warm_start`);
- `slow_cpu`: what the cpu profile changes on a CPU without native bf16 (an AVX2 laptop, most Colab CPUs), where
  every pass runs in fp32 at a third of the speed (`helpers.profiles.resolve_settings`; knobs you set still win).
- `derived(settings, given)`: settings that follow from others once your knobs are on (`given`: the names you set),
  as (changes, why); notebook 01's dataset_config follows its dataset_name (`dataset_config_for_its_dataset`).

`CARD_RECIPES`: what every gpu profile changes on a 16 or 24 GB card.

Each recipe's comment says in a line why a value is what it is; the evidence is in docs/measurements.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Recipe:
    profiles: dict[str, dict]
    step_tokens: Callable | None = None
    starts_from: str | None = None
    slow_cpu: dict = field(default_factory=dict)
    derived: Callable | None = None


def dataset_config_for_its_dataset(settings: dict, given) -> tuple[dict, str]:
    """Notebook 01's rule: the profiles' dataset_config is chain_sum's difficulty, so another DATASET_NAME starts from
    reasoning_gym's defaults ({}) unless DATASET_CONFIG is set. With chain_sum, DATASET_CONFIG None keeps the profile's
    and {} asks for reasoning_gym's defaults like any other value set."""
    if settings["dataset_name"] == "chain_sum" or "dataset_config" in given:
        return {}, ""
    return {"dataset_config": {}}, (f"dataset_name {settings['dataset_name']!r} is not chain_sum, whose difficulty the "
                                    "profile's dataset_config sets, so it starts from reasoning_gym's defaults")


# What the gpu profile changes on each card class (helpers.compute.hardware.card_class: under 20 GiB, under 35, more),
# unless MODEL or LORA are set: a smaller model and/or LoRA so the run fits (docs/gpu.md).
CARD_RECIPES = {
    "16gb": {"model": "Qwen/Qwen3-0.6B", "lora": True},
    "24gb": {"model": "Qwen/Qwen3-1.7B", "lora": True},
    "40gb": {},   # the profile as written: the original tutorials' recipes
}

RECIPES: dict[str, Recipe] = {
    # 01: GRPO with environment_factory on reasoning_gym chain_sum, held-out evaluation before and after.
    # gpu: the original tutorial's config. cpu: SmolLM2-135M from notebook 02's checkpoint; each value's evidence is in
    # docs/measurements.md#notebook-01 (what the alternatives measured) and docs/guide.md#notebook-01-in-depth (why).
    # temperature 0.7: gains as much as 0.9 in shorter steps; at 1.2 pass@8 falls below greedy accuracy.
    # top_entropy_quantile 0.2: the loss uses the 20 % most uncertain tokens (1.0, TRL's default, gained no more).
    # learning_rate 1e-5: 1.5e-5 gained less and 2e-5 collapsed runs; lr_scheduler_type "linear": "constant" lost.
    # eval_n 900: a paired interval of about +-3 points, enough to resolve the smallest measured gain.
    # min_steps 40: the fewest steps at which measured runs resolved a gain (helpers.compute.budget trains on to them or stops).
    # mixed_only, working_reward, exact_reward, num_iterations 2: each measured worse; off in every profile.
    # carry_borrow_share None: the natural mix of sums; preflight_n: questions sampled before training (0: skip).
    # checkpoint_steps: a checkpoint every N steps for RESUME (gpu 25, for Colab disconnects; 0 elsewhere).
    # precision "auto": measured at start-up on CPU, the card's native one on CUDA (helpers.compute.precision).
    "01_grpo_walkthrough": Recipe(
        profiles={
            "tiny": {"model": "tiny-toolcall", "warm_start": False, "dataset_name": "chain_sum",
                     "dataset_config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                     "max_steps": 2, "learning_rate": 1e-5, "per_device_train_batch_size": 4,
                     "gradient_accumulation_steps": 1, "num_generations": 4, "max_completion_length": 48, "freeze_layers": 0,
                     "max_tool_calling_iterations": 1, "temperature": 1.2, "top_entropy_quantile": 0.2, "num_iterations": 1, "warmup_steps": 0, "lr_scheduler_type": "linear",
                     "activation_checkpointing": False, "precision": "auto", "lora": False, "logging_steps": 1, "log_completions": False,
                     "eval_n": 8, "eval_max_new_tokens": 40, "train_minutes": None, "report_to": "trackio",
                     "preflight_n": 3, "mixed_only": False, "carry_borrow_share": None, "working_reward": 0.0, "exact_reward": False, "checkpoint_steps": 0, "min_steps": 0},
            "cpu": {"model": "smollm2-135m", "warm_start": True, "dataset_name": "chain_sum",
                    "dataset_config": {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2},
                    "max_steps": 80, "learning_rate": 1e-5, "per_device_train_batch_size": 4,
                    "gradient_accumulation_steps": 4, "num_generations": 8, "max_completion_length": 104, "freeze_layers": 12,
                    "max_tool_calling_iterations": 1, "temperature": 0.7, "top_entropy_quantile": 0.2, "num_iterations": 1, "warmup_steps": 0, "lr_scheduler_type": "linear",
                    "activation_checkpointing": False, "precision": "auto", "lora": False, "logging_steps": 1, "log_completions": False,
                    "eval_n": 900, "eval_max_new_tokens": 128, "train_minutes": 20, "report_to": "trackio",
                    "preflight_n": 32, "mixed_only": False, "carry_borrow_share": None, "working_reward": 0.0, "exact_reward": False, "checkpoint_steps": 0, "min_steps": 40},
            "gpu": {"model": "Qwen/Qwen3-1.7B", "warm_start": False, "dataset_name": "chain_sum",
                    "dataset_config": {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
                    "max_steps": 150, "learning_rate": 1e-6, "per_device_train_batch_size": 1,
                    "gradient_accumulation_steps": 4, "num_generations": 2, "max_completion_length": 256, "freeze_layers": 0,
                    "max_tool_calling_iterations": None, "temperature": 1.0, "top_entropy_quantile": 1.0, "num_iterations": 1, "warmup_steps": 10, "lr_scheduler_type": "linear",
                    "activation_checkpointing": True, "precision": "auto", "lora": False, "logging_steps": 10, "log_completions": True,
                    "eval_n": 100, "eval_max_new_tokens": 256, "train_minutes": None, "report_to": "trackio",
                    "preflight_n": 32, "mixed_only": False, "carry_borrow_share": None, "working_reward": 0.0, "exact_reward": False, "checkpoint_steps": 25, "min_steps": 0},
        },
        # Tokens of one training step (micro-batch trained, batch generated at once, logits kept), for the memory
        # estimate: the prompt (system prompt + tool schema + question) measures ~350 tokens.
        step_tokens=lambda s, n: (s.per_device_train_batch_size * (350 + s.max_completion_length),
                                  s.per_device_train_batch_size * s.gradient_accumulation_steps
                                  * (350 + s.max_completion_length),
                                  s.per_device_train_batch_size * s.max_completion_length),
        starts_from="02_sft_warmup",
        # No native bf16: one group per micro-batch (the shared prompt computed half as often), backward through the
        # top 12 layers, 400 held-out sums and 16 preflight questions, so 40+ steps fit (docs/measurements.md#notebook-01).
        slow_cpu={"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "freeze_layers": 18,
                  "eval_n": 400, "preflight_n": 16, "train_minutes": 22},
        derived=dataset_config_for_its_dataset,
    ),
    # 04: GRPO against an ORS environment (calculator_env locally) through one OpenRewardSpec.
    # warm_start: the local teacher's rewarded ORS episodes (calculate in teacher_calculate_share of them) SFT the
    # student first, so GRPO starts from a mixed policy; gpu: the seed's recipe, no warm start (docs/measurements.md#notebook-04).
    "04_openreward_spec": Recipe(
        profiles={
            "tiny": {"model": "tiny-toolcall", "warm_start": True, "teacher_episodes": 24,
                     "teacher_calculate_share": 0.5, "teacher_mistake_rate": 0.1, "sft_learning_rate": 1e-4,
                     "sft_batch_size": 4, "freeze_layers": 0, "num_tasks": 16, "max_steps": 2, "train_minutes": None,
                     "batch_size": 4, "num_generations": 2, "max_completion_length": 48, "temperature": 1.0,
                     "max_tool_calling_iterations": 2, "learning_rate": 1e-5, "eval_tasks": 6, "preflight_n": 2,
                     "eval_max_new_tokens": 48, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "cpu": {"model": "smollm2-135m", "warm_start": True, "teacher_episodes": 240,
                    "teacher_calculate_share": 0.3, "teacher_mistake_rate": 0.1, "sft_learning_rate": 1e-4,
                    "sft_batch_size": 8, "freeze_layers": 12, "num_tasks": 512, "max_steps": 15, "train_minutes": 25,
                    "batch_size": 16, "num_generations": 8, "max_completion_length": 160, "temperature": 1.0,
                    "max_tool_calling_iterations": 2, "learning_rate": 2e-5, "eval_tasks": 90, "preflight_n": 8,
                    "eval_max_new_tokens": 64, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "gpu": {"model": "Qwen/Qwen3-1.7B", "warm_start": False, "teacher_episodes": 240,
                    "teacher_calculate_share": 0.3, "teacher_mistake_rate": 0.1, "sft_learning_rate": 2e-5,
                    "sft_batch_size": 8, "freeze_layers": 0, "num_tasks": 512, "max_steps": 200, "train_minutes": None,
                    "batch_size": 8, "num_generations": 8, "max_completion_length": 512, "temperature": 1.0,
                    "max_tool_calling_iterations": 6, "learning_rate": 1e-6, "eval_tasks": 99, "preflight_n": 16,
                    "eval_max_new_tokens": 256, "precision": "auto", "lora": False, "activation_checkpointing": True, "report_to": "trackio"},
        },
        # a ~400-token prompt (system prompt, the two tools' schemas, the task)
        step_tokens=lambda s, n: (s.batch_size * (400 + s.max_completion_length),
                                  s.batch_size * (400 + s.max_completion_length), s.batch_size * s.max_completion_length),
    ),
    # 03: echo warm-up, multi-turn Wordle with a rollout_func, then the environment_factory version.
    # gpu: the original TRL example's wordle.py (Qwen3-1.7B, vLLM colocate); vllm_* sizes vLLM's share of a 40 GB card.
    # cpu warm_start: SFT on the scripted player's won games first, since base SmolLM2 makes no valid guess.
    # cpu temperature 0.3: samples close enough to the greedy player to correct its repeats (docs/measurements.md#notebook-03).
    # factory_warm_games: the teacher's games as `guess` calls before environment_factory, which the base model never calls.
    # enable_thinking False skips Qwen3's <think> block; activation_checkpointing only pays on a GPU.
    "03_wordle_rollout_func": Recipe(
        profiles={
            "tiny": {"model": "tiny", "echo_model": "tiny", "echo_steps": 1, "echo_max_completion_length": 16,
                     "max_steps": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                     "num_generations": 2, "max_turns": 3, "max_completion_length": 8, "learning_rate": 1e-5,
                     "temperature": 1.0, "top_k": 10, "factory_steps": 1, "factory_max_completion_length": 32, "factory_warm_games": 4,
                     "warm_start": True, "teacher_model": "wordle-teacher", "teacher_games": 8, "sft_learning_rate": 1e-4,
                     "sft_batch_size": 4, "eval_games": 6,
                     "enable_thinking": None, "use_vllm": False, "vllm_mode": "colocate", "seed": 0,
                     "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "cpu": {"model": "smollm2-135m", "echo_model": "smollm2-135m", "echo_steps": 2,
                    "echo_max_completion_length": 32, "max_steps": 20, "per_device_train_batch_size": 8,
                    "gradient_accumulation_steps": 1, "num_generations": 4, "max_turns": 6,
                    "max_completion_length": 12, "learning_rate": 3e-5, "temperature": 0.3, "top_k": 10,
                    "factory_steps": 2, "factory_max_completion_length": 256, "factory_warm_games": 32, "enable_thinking": None,
                    "warm_start": True, "teacher_model": "wordle-teacher", "teacher_games": 200, "sft_learning_rate": 1e-4,
                    "sft_batch_size": 8, "eval_games": 150,
                    "use_vllm": False, "vllm_mode": "colocate", "seed": 0,
                    "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "gpu": {"model": "Qwen/Qwen3-1.7B", "echo_model": "Qwen/Qwen2.5-0.5B-Instruct", "echo_steps": 20,
                    "echo_max_completion_length": 256, "max_steps": 90, "per_device_train_batch_size": 1,
                    "gradient_accumulation_steps": 64, "num_generations": 2, "max_turns": 6,
                    "max_completion_length": 8, "learning_rate": 5e-6, "temperature": 0.8, "top_k": 10,
                    "factory_steps": 10, "factory_max_completion_length": 256, "factory_warm_games": 0, "enable_thinking": False,
                    "warm_start": False, "teacher_model": "wordle-teacher", "teacher_games": 200, "sft_learning_rate": 2e-5,
                    "sft_batch_size": 8, "eval_games": 150,
                    "use_vllm": True, "vllm_mode": "colocate", "seed": 0,
                    "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": True, "report_to": "trackio"},
        },
        # a ~300-token prompt, then each turn's guess and the environment's feedback (~60 tokens)
        step_tokens=lambda s, n: (s.per_device_train_batch_size * (300 + s.max_turns * (s.max_completion_length + 60)),
                                  0, s.per_device_train_batch_size * s.max_turns * (s.max_completion_length + 60)),
    ),
    # 02: teacher rollouts with `openenv collect` -> reward filter -> SFT -> held-out evaluation.
    # teacher "local": helpers.chain_sum.local_teacher (offline stand-in); "openai": gpt-5-mini when OPENAI_API_KEY is set.
    # cpu: sums of two two-digit numbers, the teacher's working kept before its call, 12 of 30 layers frozen, one epoch
    # at lr 1e-4: a step budget, so a slower CPU trains the same model, only later (docs/measurements.md#notebook-02).
    "02_sft_warmup": Recipe(
        profiles={
            "tiny": {"model": "tiny", "dataset_config": {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
                     "n_episodes": 12, "teacher": "local", "teacher_model": "chain-sum-teacher",
                     "teacher_mistake_rate": 0.2, "teacher_no_tool_rate": 0.05, "teacher_shows_work": True,
                     "num_train_epochs": 1,
                     "batch_size": 4, "gradient_accumulation_steps": 1, "learning_rate": 1e-4, "warmup_steps": 0,
                     "precision": "auto", "lora": False, "activation_checkpointing": False, "freeze_layers": 1, "train_minutes": None,
                     "eval_n": 8, "eval_max_new_tokens": 32, "logging_steps": 1, "report_to": "trackio"},
            "cpu": {"model": "smollm2-135m", "dataset_config": {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2},
                    "n_episodes": 320, "teacher": "local", "teacher_model": "chain-sum-teacher",
                    "teacher_mistake_rate": 0.1, "teacher_no_tool_rate": 0.0, "teacher_shows_work": True,
                    "num_train_epochs": 1,
                    "batch_size": 8, "gradient_accumulation_steps": 1, "learning_rate": 1e-4, "warmup_steps": 2,
                    "precision": "auto", "lora": False, "activation_checkpointing": False, "freeze_layers": 12, "train_minutes": None,
                    "eval_n": 100, "eval_max_new_tokens": 128, "logging_steps": 2, "report_to": "trackio"},
            "gpu": {"model": "Qwen/Qwen3-1.7B", "dataset_config": {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
                    "n_episodes": 300, "teacher": "openai", "teacher_model": "gpt-5-mini",
                    "teacher_mistake_rate": 0.1, "teacher_no_tool_rate": 0.0, "teacher_shows_work": False,
                    "num_train_epochs": 3,
                    "batch_size": 4, "gradient_accumulation_steps": 2, "learning_rate": 2e-5, "warmup_steps": 10,
                    "precision": "auto", "lora": False, "activation_checkpointing": True, "freeze_layers": 0, "train_minutes": None,
                    "eval_n": 50, "eval_max_new_tokens": 64, "logging_steps": 5, "report_to": "trackio"},
        },
        # SFT computes logits for every token; `n` is the notebook's measured row length (~420 tokens without it).
        step_tokens=lambda s, n: (s.batch_size * (n or 420), 0, s.batch_size * (n or 420)),
    ),
    # 00: OpenEnv quick start: connect, build, serve and attack an environment, wire it for environment_factory.
    # It trains nothing (training starts in 01): only how long a sandboxed submission may run.
    "00_openenv_quickstart": Recipe(
        profiles={
            "tiny": {"sandbox_wall_timeout_s": 2.0},
            "cpu": {"sandbox_wall_timeout_s": 5.0},
            "gpu": {"sandbox_wall_timeout_s": 5.0},
        },
    ),
    # The harness smoke test (tests/test_harness_smoke.py), not a notebook.
    "harness_smoke": Recipe(
        profiles={
            "tiny": {"dataset_name": "chain_sum", "episodes": 3},
            "cpu": {"dataset_name": "chain_sum", "episodes": 10},
            "gpu": {"dataset_name": "chain_sum", "episodes": 10},
        },
    ),
}
