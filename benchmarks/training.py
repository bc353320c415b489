"""Training: seconds per GRPO step, and the share of it spent in the environment.

    python -m benchmarks.training [--size tiny|full]

A real GRPOTrainer with `environment_factory` trains against a local reasoning_gym server through
notebook 01's own `ReasoningGymTrainEnv` (its "env-class" cell, loaded with tools.notebooks.load_cells),
with a stopwatch around each call its client makes. "Environment time" is wall time inside those
calls: the WebSocket round trips plus the server's work. Step time comes from trainer callbacks; the
first step (compilation, pool start-up) is reported but left out of the averages.

Profiles: `tiny` (the `tiny-toolcall` model: tool calls, random answers) and `cpu` (SmolLM2-135M,
the laptop profile; only at --size full: about 47 s a step on an idle 2-core Zen 4, since this is
GRPOTrainer as TRL ships it, in fp32, without the notebooks' speed paths; docs/measurements.md, the stack).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import figures
from helpers.model_folders import resolve_model
from helpers.prompts import CHAIN_SUM_CONFIG, SYSTEM_PROMPT
from helpers.servers import LocalServer

# `tiny-toolcall` learned the tool-call format on 1-digit sums: give it those, so it calls the tool.
ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
PROFILES = {
    "tiny": {"model": "tiny-toolcall", "batch_size": 4, "num_generations": 2, "max_completion_length": 48,
             "dataset_config": ONE_DIGIT},
    "cpu": {"model": "smollm2-135m", "batch_size": 8, "num_generations": 4, "max_completion_length": 96,
            "dataset_config": CHAIN_SUM_CONFIG},
}
SIZES = {"tiny": {"tiny": 2}, "full": {"tiny": 12, "cpu": 4}}  # profile -> GRPO steps


class EnvClock:
    """Seconds spent inside environment calls, shared by every environment instance."""

    seconds = 0.0
    resets = 0
    tool_calls = 0


def make_env_class(base_url: str, dataset_config: dict, profile: str = "tiny"):
    """Notebook 01's environment class (its globals as the notebook's `profile` run sets them, `dataset_config`
    for the difficulty), its client timed: every `reset` and `step` adds to EnvClock."""
    from helpers.profiles import resolve_settings
    from tools.notebooks import NOTEBOOKS_DIR, load_cells

    notebook = "01_grpo_walkthrough"
    cell = load_cells(NOTEBOOKS_DIR / f"{notebook}.ipynb", "env-class", namespace={
        "dataset_name": "chain_sum", "dataset_config": dataset_config, "env_url": base_url,
        "settings": resolve_settings(notebook, profile, quiet=True)})

    class TimedClient:
        """The environment's client, with a stopwatch around `reset` (an episode starts) and `step` (a tool call)."""

        def __init__(self, client):
            self._client = client

        def reset(self, **kwargs):
            began = time.perf_counter()
            result = self._client.reset(**kwargs)
            EnvClock.seconds += time.perf_counter() - began
            EnvClock.resets += 1
            return result

        def step(self, action):
            began = time.perf_counter()
            result = self._client.step(action)
            EnvClock.seconds += time.perf_counter() - began
            EnvClock.tool_calls += 1
            return result

        def __getattr__(self, name):
            return getattr(self._client, name)

    class ReasoningGymTrainEnv(cell["ReasoningGymTrainEnv"]):
        """The notebook's class, unchanged but for its timed client."""

        def __init__(self):
            super().__init__()
            self.client = TimedClient(self.client)

    return ReasoningGymTrainEnv


def load_model(name: str):
    """The model object for GRPOTrainer.

    The cached smollm2-135m folder (converted from GGUF) still carries the GGUF
    `quantization_config` in its config.json, which makes transformers refuse to fine-tune it
    ("purely quantized models"); the weights are plain fp32, so the entry is dropped here.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model(name)
    config = AutoConfig.from_pretrained(path)
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config
    return AutoModelForCausalLM.from_pretrained(path, config=config)


def bench_profile(profile: str, steps: int, base_url: str, output_dir: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    knobs = PROFILES[profile]
    step_times, env_times = [], []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.began, self.env_began = time.perf_counter(), EnvClock.seconds

        def on_step_end(self, args, state, control, **kwargs):
            step_times.append(time.perf_counter() - self.began)
            env_times.append(EnvClock.seconds - self.env_began)

    EnvClock.seconds, EnvClock.resets, EnvClock.tool_calls = 0.0, 0, 0
    dataset = Dataset.from_dict({"prompt": [[{"role": "system", "content": SYSTEM_PROMPT},
                                             {"role": "user", "content": ""}]] * 512})
    config = GRPOConfig(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=knobs["batch_size"],
        num_generations=knobs["num_generations"], max_completion_length=knobs["max_completion_length"],
        learning_rate=1e-5, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
        bf16=False, disable_tqdm=True, chat_template_kwargs={"enable_thinking": False},
        max_tool_calling_iterations=2, seed=0,
    )
    began = time.perf_counter()
    trainer = GRPOTrainer(model=load_model(knobs["model"]), train_dataset=dataset, args=config,   # reward: get_reward()
                          environment_factory=make_env_class(base_url, knobs["dataset_config"], profile),
                          callbacks=[StepClock()])
    setup_s = time.perf_counter() - began
    trainer.train()
    measured = slice(1, None) if len(step_times) > 1 else slice(None)
    s_per_step = statistics.mean(step_times[measured])
    env_per_step = statistics.mean(env_times[measured])
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {
        "profile": profile,
        "model": knobs["model"],
        "rollouts_per_step": knobs["batch_size"],
        "max_completion_length": knobs["max_completion_length"],
        "steps": len(step_times),
        "setup_s": round(setup_s, 2),
        "first_step_s": round(step_times[0], 3),
        "s_per_step": round(s_per_step, 4),
        "env_s_per_step": round(env_per_step, 5),
        "env_share_pct": round(100 * sum(env_times[measured]) / sum(step_times[measured]), 3),
        "resets": EnvClock.resets,
        "tool_calls": EnvClock.tool_calls,
        "env_ms_per_call": round(1000 * EnvClock.seconds / max(1, EnvClock.resets + EnvClock.tool_calls), 3),
        "mean_reward": round(statistics.mean(rewards), 4) if rewards else None,
    }


def run(size: str = "full", log_dir: Path | None = None, out=print) -> dict:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    work = Path(log_dir or tempfile.mkdtemp(prefix="bench-training-"))
    results = {}
    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "64"},
                     name="reasoning_gym", log_dir=work) as server:
        for profile, steps in SIZES[size].items():
            result = bench_profile(profile, steps, server.base_url, work / profile)
            results[profile] = result
            out(f"GRPO {profile:5s} ({result['model']}): {result['s_per_step']:.3f} s/step, "
                f"environment {result['env_s_per_step'] * 1000:.1f} ms/step = "
                f"{result['env_share_pct']:.2f} % ({result['resets']} resets, {result['tool_calls']} tool calls)")
    return {"size": size, "profiles": results}


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    profiles = list(result["profiles"].values())
    names = [f"{p['profile']}\n({p['model']})" for p in profiles]
    env = [p["env_s_per_step"] for p in profiles]
    rest = [p["s_per_step"] - p["env_s_per_step"] for p in profiles]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(names, rest, label="model (generate + update)")
    ax.bar(names, env, bottom=rest, label="environment (reset + tools)")
    for i, p in enumerate(profiles):
        ax.text(i, p["s_per_step"], f"env {p['env_share_pct']:.2f} %", ha="center", va="bottom")
    ax.set(ylabel="seconds per GRPO step", yscale="log", title="Where a GRPO step goes (CPU)")
    ax.legend(fontsize=8)
    return figures.save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    args = parser.parse_args()
    print(json.dumps(run(args.size), indent=2))


if __name__ == "__main__":
    main()
