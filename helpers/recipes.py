"""Each notebook's recipe, in one place: change a notebook's defaults here.

A `Recipe` holds what a notebook needs to know about itself before it runs:
- `profiles`: its settings for `tiny` (CI, seconds), `cpu` (a laptop, minutes) and `gpu` (the original
  tutorials), the same keys in each; `helpers.profiles.resolve_settings` picks one and applies your knobs;
- `step_tokens(settings, measured_length)`: the tokens one training step holds, (trained in a micro-batch,
  generated at once, logits kept), from which `helpers.hardware` estimates memory;
- `typical_minutes`: a whole measured run per profile, which `make demo` announces;
- `starts_from`: the notebook whose checkpoint it warm-starts from (`helpers.models.warm_start`).

`CARD_RECIPES`: what every gpu profile changes on a 16 or 24 GB card.

Why each value is what it is: the comments above each recipe and docs/measurements.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Recipe:
    profiles: dict[str, dict]
    step_tokens: Callable | None = None
    typical_minutes: dict[str, int] = field(default_factory=dict)
    starts_from: str | None = None


# What the gpu profile changes on each card class (helpers.hardware.card_class: under 20 GiB, under 35, more),
# unless MODEL or LORA are set: a smaller model and/or LoRA so the run fits (docs/gpu.md).
CARD_RECIPES = {
    "16gb": {"model": "Qwen/Qwen3-0.6B", "lora": True},
    "24gb": {"model": "Qwen/Qwen3-1.7B", "lora": True},
    "40gb": {},   # the profile as written: the original tutorials' recipes
}

RECIPES: dict[str, Recipe] = {
    # 01: the original OpenEnv tutorial's end-to-end GRPO walkthrough (environment_factory on reasoning_gym chain_sum) + held-out eval.
    # gpu = the original tutorial's config (Qwen3-1.7B, 150 steps, lr 1e-6, 1 x 4 rollouts, 2 generations, 256 tokens).
    # cpu = SmolLM2-135M warm-started from notebook 02's SFT checkpoint; see the notebook's "CPU recipe" cell.
    # top_entropy_quantile 0.2: the loss uses only the 20 % most uncertain completion tokens (TRL takes one entropy
    # quantile over each micro-batch; tiny does too, so CI runs that code path); 1.0 = every token, TRL's default (cpu,
    # three seeds: +8.6, +6.8, +3.7 against 0.2's +8.1, +3.1, +9.0 on the same seeds; docs/measurements.md#notebook-01).
    # precision "auto": measured at start-up on CPU, the card's native one on CUDA (helpers.precision).
    # preflight_n: training questions helpers.preflight samples num_generations rollouts of before training (0: skip);
    # carry_borrow_share: the share of training questions whose column work carries or borrows (helpers.grpo.question_seeds);
    # None: the natural mix (~half).
    # working_reward: a second reward, this weight x the share of true sums in a reply's working
    # (helpers.grpo.working_reward), so groups whose answers are all wrong still rank their rollouts; 0: off in every
    # profile: at 0.5 (AVX2 EPYC, seed 0, 22 steps) nearly every group had a gradient (zero-std share 0.02 against
    # 0.30) and the policy learned to drop carries, whose column sums are true: -3.9 [-8.6, +0.8] on 450 sums.
    # exact_reward: True pays 1 for the exact answer and 0 otherwise; False (every profile) pays reasoning_gym's score,
    # whose partial credit ("-72" for 72 earns 0.67) a run on the AVX2 EPYC learned to collect. With True (same CPU,
    # seed 0, 22 steps) half the groups lost their gradient (zero-std 0.55) and positive subtractions still collapsed,
    # to digit mistakes instead of sign flips: -2.0 [-4.9, +0.8] on 900 sums (docs/measurements.md#notebook-01).
    # mixed_only: train only on those whose group was mixed (dynamic sampling). cpu: off, since cycling over the ~19
    # mixed questions memorized them (held-out -4.6 points) where fresh questions gained +5.6, +8.9, +1.7, +8.0 (four seeds,
    # 40-42 steps; with the faster loss pass, 58-61 steps: +8.4, +3.5, +12.5; with reused weight casts, 73-76 steps: +8.1,
    # +3.1, +9.0, +7.1; docs/measurements.md#notebook-01). cpu's temperature 0.7: six seeds on the Zen 5 EPYC gained
    # +3.5, +12.9, +9.5, +7.0, +9.4, +7.7 (mean +8.3, 77-80 steps of ~14 s) where 0.9 gained +6.8 on average (four
    # seeds, another checkpoint of the same recipe; seed 0 at 0.9 from the same checkpoint +9.6), and one seed on the
    # AVX2 EPYC +8.9 where 0.9 gained +2.9 (three seeds): gains within seed noise of 0.9's, in shorter steps (cooler
    # groups agree more often, so more loss passes are skipped; 77-80 steps in 20 minutes on the Zen 5). At 1.2 pass@8
    # (38 %) falls below greedy accuracy (53-62 %): too hot (docs/measurements.md#notebook-01).
    # cpu's eval_n 900: with the shared prompt prefix and reused weight casts, 900 questions take ~300 s, what 150
    # took at first; the paired interval's half width is ~3 points (~4.4 at 450, ~7.7 at 150), enough to resolve the
    # +3 points the weakest measured seed gained (docs/measurements.md#notebook-01).
    # cpu's learning_rate 1e-5: 2e-5 gained more on one seed (+6.2 against +3.1) and collapsed another within 10 steps
    # (held-out probe 44 % -> 19 %, half the replies cut at max_completion_length). At 0.7, 80 steps, two seeds on an
    # H200: 1.5e-5 gained less on both (+4.6, +7.8 against 1e-5's +6.1, +9.2) and 2e-5 collapsed both (-2.6, -11.2).
    # TRL's scale_rewards stays "group": "batch" gained +10.9 and +6.1 on the same seeds, inside seed noise
    # (docs/measurements.md#notebook-01).
    # lr_scheduler_type "linear" (TRL's default) in every profile: it decays over max_steps, so a cpu run the cap stops
    # at step ~40 of 80 ends at half the lr. "constant" kept the full lr to the end: seed 0 went -0.7 [-5.5, +4.1]
    # where linear gained +5.6 [+1.2, +10.1] (docs/measurements.md#notebook-01).
    # min_steps: the fewest steps worth training (helpers.budget): a machine whose cap buys fewer trains on to them
    # when that takes at most 1.5x the cap, and otherwise stops after its two-step estimate, saying why. cpu 40: the
    # fewest steps at which several seeds resolved a gain (40-42 steps: +5.6, +8.9, +1.7, +8.0). 22 steps did not:
    # eight runs on an H200 (two checkpoints x four seeds) gained +0.8 on average, one of eight resolved, and the three
    # 22-step runs on the AVX2 EPYC lost 2-4 points; a slow CPU's 14 steps showed -0.9 [-8.6, +6.8]
    # (docs/measurements.md#notebook-01).
    # num_iterations: TRL's, the optimizer steps each batch of rollouts trains (helpers.budget times whole cycles).
    # 1 in every profile: 2 on the AVX2 EPYC (seed 0, 42 minutes) trained 69 steps instead of 48 and gained nothing,
    # -0.7 [-3.6, +2.1], where 1 gained +3.7 [+0.7, +6.7] (docs/measurements.md#notebook-01).
    # checkpoint_steps: a checkpoint (weights, optimizer, step) every N steps, which RESUME=True goes on from after a
    # disconnect (helpers.resume); gpu 25 (Colab), 0 elsewhere: a laptop run is not cut off, and each save costs disk.
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
        typical_minutes={"cpu": 36}, starts_from="02_sft_warmup",   # minutes: `make demo` on the Xeon, idle
    ),
    # 04: GRPO against an ORS environment (calculator_env locally) through one OpenRewardSpec.
    # warm_start True: the local teacher plays teacher_episodes train tasks through ORS, calling `calculate` in a
    # share teacher_calculate_share of them and answering from its own arithmetic otherwise (teacher_mistake_rate);
    # the rewarded episodes SFT the student (sft_*), so GRPO starts from a mixed policy. gpu: the seed's recipe
    # (Qwen3 calls tools zero-shot, no warm start). Measurements: docs/measurements.md#notebook-04.
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
    # 03: echo warm-up, then multi-turn Wordle with a rollout_func, then the environment_factory version.
    # gpu = the original TRL example's wordle.py: Qwen3-1.7B, vLLM colocate, 2 generations, 64 accumulation steps.
    # enable_thinking: False skips Qwen3's <think> block (8 tokens per guess); None = template default.
    # vllm_*: used only with use_vllm (colocate): vLLM's share of the GPU, 0.25 of a 40 GB A100 = 10 GB (weights
    # 3.4 GB + KV cache), leaving ~30 GB for full bf16 training of Qwen3-1.7B with AdamW; 4096 tokens per
    # sequence covers prompt + tool turns (vLLM would otherwise size for Qwen3's 40,960). Not measured on a GPU.
    # activation_checkpointing: TRL's default (on) saves GPU memory; off on CPU, where it only costs time.
    # warm_start: SFT on the local scripted player's won games (helpers.wordle_teacher) before GRPO: the base SmolLM2
    # makes no valid guess, so every group scores alike. gpu keeps the original recipe (no warm start).
    # eval_games: held-out secret words (helpers.wordle_eval.split_words), one greedy game each, before and after.
    # cpu temperature 0.5: at 1.0 the sampled games rarely repeat a guess, so GRPO never saw the greedy player's
    # failure (repeating its second guess until the game ends) and made it worse (docs/measurements.md#notebook-03).
    "03_wordle_rollout_func": Recipe(
        profiles={
            "tiny": {"model": "tiny", "echo_model": "tiny", "echo_steps": 1, "echo_max_completion_length": 16,
                     "max_steps": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                     "num_generations": 2, "max_turns": 3, "max_completion_length": 8, "learning_rate": 1e-5,
                     "temperature": 1.0, "top_k": 10, "factory_steps": 1, "factory_max_completion_length": 32,
                     "warm_start": True, "teacher_model": "wordle-teacher", "teacher_games": 8, "sft_learning_rate": 1e-4,
                     "sft_batch_size": 4, "eval_games": 6,
                     "enable_thinking": None, "use_vllm": False, "vllm_mode": "colocate", "seed": 0,
                     "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "cpu": {"model": "smollm2-135m", "echo_model": "smollm2-135m", "echo_steps": 2,
                    "echo_max_completion_length": 32, "max_steps": 20, "per_device_train_batch_size": 8,
                    "gradient_accumulation_steps": 1, "num_generations": 4, "max_turns": 6,
                    "max_completion_length": 12, "learning_rate": 3e-5, "temperature": 0.5, "top_k": 10,
                    "factory_steps": 2, "factory_max_completion_length": 64, "enable_thinking": None,
                    "warm_start": True, "teacher_model": "wordle-teacher", "teacher_games": 200, "sft_learning_rate": 1e-4,
                    "sft_batch_size": 8, "eval_games": 150,
                    "use_vllm": False, "vllm_mode": "colocate", "seed": 0,
                    "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": False, "report_to": "trackio"},
            "gpu": {"model": "Qwen/Qwen3-1.7B", "echo_model": "Qwen/Qwen2.5-0.5B-Instruct", "echo_steps": 20,
                    "echo_max_completion_length": 256, "max_steps": 90, "per_device_train_batch_size": 1,
                    "gradient_accumulation_steps": 64, "num_generations": 2, "max_turns": 6,
                    "max_completion_length": 8, "learning_rate": 5e-6, "temperature": 0.8, "top_k": 10,
                    "factory_steps": 10, "factory_max_completion_length": 256, "enable_thinking": False,
                    "warm_start": False, "teacher_model": "wordle-teacher", "teacher_games": 200, "sft_learning_rate": 2e-5,
                    "sft_batch_size": 8, "eval_games": 150,
                    "use_vllm": True, "vllm_mode": "colocate", "seed": 0,
                    "vllm_gpu_memory_utilization": 0.25, "vllm_max_model_length": 4096, "precision": "auto", "lora": False, "activation_checkpointing": True, "report_to": "trackio"},
        },
        # a ~300-token prompt, then each turn's guess and the environment's feedback (~60 tokens)
        step_tokens=lambda s, n: (s.per_device_train_batch_size * (300 + s.max_turns * (s.max_completion_length + 60)),
                                  0, s.per_device_train_batch_size * s.max_turns * (s.max_completion_length + 60)),
    ),
    # 02: teacher rollouts with `openenv collect` -> reward filter -> SFT (assistant-only loss) -> eval.
    # teacher "local" = helpers.local_teacher (offline stand-in); "openai" = gpt-5-mini when OPENAI_API_KEY is set.
    # cpu: sums of 2 two-digit numbers (the original tutorial's 2-3 stalled at ~12 % accuracy), the teacher's column-by-column
    # working kept in front of its call (the call alone flattened near 40 %), the lower 12 of 30 layers frozen,
    # lr 1e-4, one epoch over the kept rows: a step budget, not a time budget, so a slower CPU takes longer but
    # trains the same model (the run prints its estimate after two steps). Measurements: docs/measurements.md.
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
        typical_minutes={"cpu": 5},   # 3.7 min with papermill on the AMD EPYC, idle (the loss pass shares the prefix)
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
