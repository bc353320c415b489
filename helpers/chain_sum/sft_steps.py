"""Notebook 02's plumbing, one named line each, so its cells read like the tutorial they follow.

The lesson (the `openenv collect` command, the episode-to-row conversion, the reward filter, the SFTConfig) stays in
the notebook's tagged cells. What a hosted tutorial gets for free, or what only guards the run, is here:

    check_publishing(PUSH_TO_HUB, HUB_DATASET_ID, HUB_MODEL_ID, TRACKIO_SPACE_ID, settings.report_to)   # first
    env_url, env_server = start_environment(ENV_BASE_URL)          # the reasoning_gym server (or a URL, checked)
    teacher, teacher_server = start_teacher(settings, system_prompt=SYSTEM_PROMPT, ...)   # chosen, then probed once
    show_episode(records[0])                                         # one line of results.jsonl, then as a rollout
    n_wrong, n_missing = report_kept(records, examples, kept, collect_summary)   # what the filter did; stop if none
    model, precision = load_student(NOTEBOOK, settings, model_path, seq_len=MAX_LENGTH, seed=SEED)
"""

from __future__ import annotations

import json

from helpers.chain_sum.sft_data import Teacher, check_teacher, choose_teacher, filter_report, require_examples
from helpers.compute.hardware import check_memory
from helpers.compute.processes import one_server
from helpers.compute.precision import choose_precision
from helpers.models import load_policy
from helpers.reporting.publish import check_can_publish
from helpers.reporting.show import show_rollout
from helpers.reporting.tracking import check_trackio_space
from helpers.secrets import secret_to_env
from helpers.servers import server_or_url

# The probe's question: the shape of the environment's questions, so a teacher that cannot answer them shows here.
PROBE_QUESTION = "State the final answer to the following arithmetic problem: 12 + 34 - 5 ="


def check_publishing(push: bool, hub_dataset_id: str | None, hub_model_id: str | None,
                     trackio_space_id: str | None, report_to) -> None:
    """Before anything slow: raise now if an opt-in Hub part (the rollouts' and the checkpoint's push, a trackio
    Space) cannot work, instead of after collecting and training. With `push`, a Colab secret HF_TOKEN is copied
    into the environment, the only way it reaches the `openenv collect` subprocess that uploads the rollouts."""
    if push and not hub_dataset_id:
        raise ValueError("PUSH_TO_HUB=True needs HUB_DATASET_ID (e.g. 'your-name/chain-sum-rollouts').")
    check_can_publish(push, hub_model_id)
    check_trackio_space(trackio_space_id, report_to)
    if push:
        secret_to_env("HF_TOKEN")


def start_environment(base_url: str | None = None, *, max_concurrent_envs: int = 8):
    """The reasoning_gym environment `openenv collect` and the evaluation talk to: `base_url` (a Space or your own
    deployment, checked now) or, when None, a local server on a free port of 127.0.0.1. Prints which; returns
    (url, server), server None for a given URL. Several processes (`accelerate launch`): the main one starts it for
    all (only the main process collects and evaluates), the others get its URL and server None."""
    return one_server(_start_environment, base_url, max_concurrent_envs=max_concurrent_envs)


def _start_environment(base_url: str | None, *, max_concurrent_envs: int):
    if max_concurrent_envs < 1:
        raise ValueError(f"max_concurrent_envs must be at least 1, not {max_concurrent_envs}")
    url, server = server_or_url(base_url, "reasoning_gym_env.server.app:app",
                                env={"MAX_CONCURRENT_ENVS": str(max_concurrent_envs)}, name="reasoning_gym")
    print("environment:", url, "(local server)" if server else "(given URL)")
    return url, server


def start_teacher(settings, *, system_prompt: str, max_tokens: int = 1024, llm_endpoint: str | None = None,
                  llm_port: int | None = None, seed: int = 0, question: str = PROBE_QUESTION):
    """The teacher `openenv collect` will ask, chosen and then sent one real request as the CLI will send it.

    Which: LLM_ENDPOINT wins; "openai" needs OPENAI_API_KEY (environment or Colab secret), else the local stand-in
    (helpers.chain_sum.local_teacher, started here with the TEACHER_* settings); the choice is printed with its
    reason. The probe makes a wrong URL, a server that is down, a bad key or an unknown model stop here, before
    collecting, with the URL in the error (`TeacherError`). Returns (teacher, server), server None unless the stand-in
    was started; `teacher.kind` says which ("local" | "openai" | "endpoint"). Several processes: the main one
    chooses and starts it, the others get the same teacher and server None."""
    return one_server(_start_teacher, settings, system_prompt=system_prompt, max_tokens=max_tokens,
                      llm_endpoint=llm_endpoint, llm_port=llm_port, seed=seed, question=question)


def _start_teacher(settings, *, system_prompt, max_tokens, llm_endpoint, llm_port, seed, question):
    kind = choose_teacher(settings.teacher, llm_endpoint=llm_endpoint, model=settings.teacher_model)
    server = None
    if kind == "local":
        teacher, server = Teacher.start_local(
            "chain-sum-teacher", mistake_rate=settings.teacher_mistake_rate, no_tool_rate=settings.teacher_no_tool_rate,
            seed=seed, show_work=settings.teacher_shows_work)
    elif kind == "endpoint":
        if not llm_endpoint:
            raise ValueError('TEACHER="endpoint" needs LLM_ENDPOINT (an OpenAI-compatible base URL).')
        teacher = Teacher.endpoint(llm_endpoint, settings.teacher_model, port=llm_port)
    elif kind == "openai":
        teacher = Teacher.openai(settings.teacher_model)
    else:
        raise ValueError(f'Unknown TEACHER {kind!r}: use "local", "openai" or "endpoint".')
    probe = check_teacher(teacher, system_prompt=system_prompt, max_tokens=max_tokens, question=question)
    print("teacher:", teacher.describe(), "(local stand-in)" if server else "")
    print("one real request ->", probe)
    if not probe["tool_calls"]:
        print("WARNING: the teacher answered without a tool call; such episodes fail and are not collected.")
    return teacher, server


def show_episode(record: dict) -> None:
    """Print one episode of results.jsonl as stored (episode_id, messages, reward), then as a rollout: the question,
    the teacher's tool call, the environment's reply, the reward."""
    missing = [key for key in ("episode_id", "messages", "reward") if key not in record]
    if missing:
        raise ValueError(f"Not an episode of results.jsonl (no {', '.join(missing)}): {str(record)[:200]}")
    print(json.dumps({k: record[k] for k in ("episode_id", "messages", "reward")}, indent=1))
    print("\nThe same episode as a rollout: the question, the teacher's tool call, the environment's reply, the reward")
    show_rollout(record["messages"], record["reward"])


def report_kept(records: list[dict], examples: list[dict], kept: list[dict], summary) -> tuple[int, int]:
    """Print what the reward filter did (`filter_report`: requested / collected / kept / filtered out / failed, with the
    CLI's reasons from `summary`, the `CollectSummary` of `run_collect`, and one filtered-out episode), then stop with
    advice (`NoExamplesError`) when nothing is left to train on. Returns (wrong, failed) for metrics.json."""
    if not hasattr(summary, "requested") or not hasattr(summary, "output"):
        raise TypeError(f"summary must be the CollectSummary run_collect returned, not {type(summary).__name__}")
    n_wrong, n_missing = filter_report(records, examples, kept, requested=summary.requested,
                                       collect_output=summary.output)
    require_examples(kept, collected=len(records), failed=n_missing)
    return n_wrong, n_missing


def load_student(notebook: str, settings, model_path: str, *, seq_len: int, seed: int = 0):
    """The student, ready to evaluate and train: the memory estimate first (`check_memory`, which stops here if the run
    will not fit), then the weights (fp32, or LoRA adapters with settings.lora; on the GPU if any, seeded by `seed`)
    and the precision the trainer will use (`choose_precision`: "auto" is timed here on CPU, the card's own on
    CUDA). Prints the size and the precision; returns (model, precision)."""
    if not seq_len or seq_len < 1:
        raise ValueError(f"seq_len must be a positive number of tokens (the measured max_length), not {seq_len!r}")
    check_memory(notebook, settings, model=model_path, seq_len=seq_len)
    model = load_policy(model_path, lora=settings.lora, seed=seed)
    precision = choose_precision(model, settings.precision)
    print(f"student: {settings.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)")
    print(precision)
    return model, precision
