"""Notebook 01's steps that are not the lesson, one named line each in the notebook: checks that fail early, the
environment server, the looks at one episode and one group before training, the preflight.

    check_task(dataset_name, dataset_config, ENV_BASE_URL)         # a bad name or an unreachable server, now
    describe_start(NOTEBOOK, start_checkpoint, ...)                 # what notebook 02 measured of its checkpoint
    env_url, server = environment_server(ENV_BASE_URL, sessions, log_dir=out_dir / "logs")
    check_tool_schema(probe.answer)                                 # the class's tool is the one the data shows
    one_group_by_hand(model, tokenizer, ReasoningGymTrainEnv, ...)  # what GRPO does with one group
    preflight_result, mixed_questions, dataset = run_preflight(...)   # is there a gradient to follow?
"""

from __future__ import annotations

import json
import random

from helpers.chain_sum.evaluation import EVAL_SEED, parse_answer_call
from helpers.chain_sum.grpo import check_dataset_name, group_advantages, sample_group
from helpers.chain_sum.preflight import Preflight, preflight, reasoning_gym_sampler
from helpers.compute.processes import on_main, one_server, process_count
from helpers.models import warm_start_record
from helpers.prompts import answer as shared_answer_tool
from helpers.reporting.resume import kept
from helpers.reporting.show import compact, show_rollout
from helpers.rollouts import describe_rollout
from helpers.servers import check_reachable, check_sessions, server_or_url


def check_task(dataset_name: str, dataset_config: dict, env_base_url: str | None = None) -> None:
    """Fail now, not after the model loads: an unknown reasoning_gym name (the error lists the valid ones), a hosted
    server that does not answer (a ServerError naming the URL). Prints the task."""
    check_dataset_name(dataset_name)
    if env_base_url:
        check_reachable(env_base_url)
    print(f"dataset: {dataset_name} {dataset_config or '(reasoning_gym defaults)'}")


def describe_start(notebook: str, start_checkpoint: str, dataset_name: str, dataset_config: dict,
                   max_completion_length: int) -> dict:
    """Print what the policy starts from and, for notebook 02's checkpoint, what notebook 02 measured of it (and
    where this run differs from what it saw). Returns notebook 02's record ({} for another start)."""
    print("start:", start_checkpoint)
    sft = warm_start_record(notebook) if start_checkpoint.startswith("notebook 02") else {}
    if sft:
        print(f"  fine-tuned on chain_sum {sft.get('dataset_config')}: held-out accuracy "
              f"{sft.get('accuracy_after', 0):.0%}, format {sft.get('format_after', 0):.0%}")
        if (dataset_name, dataset_config) != ("chain_sum", sft.get("dataset_config")):
            print(f"  note: this run trains on {dataset_name} {dataset_config}, not what the checkpoint saw")
        if sft.get("teacher_shows_work"):
            print("  it writes its working before the call (notebook 02's TEACHER_SHOWS_WORK): "
                  f"max_completion_length={max_completion_length} must leave room for it")
    return sft


def environment_server(env_base_url: str | None, sessions: int, *, log_dir):
    """(url, server): a local reasoning_gym server on 127.0.0.1 that holds `sessions` sessions at once, or, with
    `env_base_url`, that server after checking it accepts as many (a clear error now, not a refused session midway
    through training). `server` is None for a given URL; stop a local one with `server.stop()`. Several processes
    (`accelerate launch`): `sessions` is what one process opens; the main process starts one server for all of them
    (or checks the given one) and the others get its URL, with `server` None."""
    return one_server(_environment_server, env_base_url, sessions * process_count(), log_dir=log_dir)


def _environment_server(env_base_url: str | None, sessions: int, *, log_dir):
    env_url, server = server_or_url(env_base_url, "reasoning_gym_env.server.app:app",
                                    env={"MAX_CONCURRENT_ENVS": str(sessions)}, name="reasoning_gym", log_dir=log_dir)
    if server:
        print(f"local reasoning_gym server at {env_url}, MAX_CONCURRENT_ENVS={sessions} (log: {server.log_path})")
    else:
        check_sessions(env_url, sessions)
        print(f"using the server at {env_url}; it accepts the {sessions} sessions this run opens at once")
    return env_url, server


def check_tool_schema(method) -> None:
    """Raise unless `method` (the environment class's `answer`) shows the model the JSON schema of
    `helpers.prompts.answer`, the tool the SFT data and the evaluation show it; print that schema. TRL builds the
    schema from the method's name, signature and docstring, so an edited docstring changes what the model sees."""
    from transformers.utils import get_json_schema

    ours, shared = get_json_schema(method), get_json_schema(shared_answer_tool)
    if ours != shared:
        raise ValueError(f"The environment's tool schema differs from helpers.prompts.answer, which the SFT data and "
                         f"the evaluation use:\n{json.dumps(ours, indent=1)}\nvs\n{json.dumps(shared, indent=1)}\n"
                         "Keep the method's name, arguments and docstring as they were (or change both).")
    print(json.dumps(ours, indent=1))


def one_group_by_hand(model, tokenizer, env_class, question_seed: int | None, config, *, system_prompt: str,
                      max_new_tokens: int, precision: str, seed: int) -> list[float]:
    """Sample `config.num_generations` replies to one training question at `config.temperature` (a GRPOConfig's),
    let a fresh episode of `env_class` score each, and print one rollout, the group, the advantages GRPO gives it
    (as TRL computes them) and one rollout as the trainer's tokens. Returns the group's rewards (several processes:
    the main one plays the group, every process gets its rewards)."""
    return on_main(_one_group_by_hand, model, tokenizer, env_class, question_seed, config, system_prompt=system_prompt,
                   max_new_tokens=max_new_tokens, precision=precision, seed=seed)


def _one_group_by_hand(model, tokenizer, env_class, question_seed, config, *, system_prompt, max_new_tokens,
                       precision, seed):
    n, temperature = config.num_generations, config.temperature
    question_seed = question_seed or EVAL_SEED + 1
    env = env_class()
    question = env.reset(question_seed=question_seed)
    group = sample_group(model, tokenizer, [{"role": "system", "content": system_prompt},
                                            {"role": "user", "content": question}],
                         n=n, tools=[shared_answer_tool], temperature=temperature, max_new_tokens=max_new_tokens,
                         precision=precision, seed=seed)
    rewards, env_replies = [], []
    for reply in group["replies"]:
        env.reset(question_seed=question_seed)   # a fresh episode on the same question
        answer = parse_answer_call(reply)
        # the environment scores a tool call; no tool call scores 0
        env_replies.append([{"role": "tool", "content": env.answer(answer)}] if answer is not None else [])
        rewards.append(env.get_reward())
    env.client.close()
    k = next((i for i, tool_reply in enumerate(env_replies) if tool_reply), 0)   # one that called the tool, if any
    print(f"Rollout {k}, what the reward scores:")
    show_rollout([{"role": "user", "content": question}, {"role": "assistant", "content": group["replies"][k]}]
                 + env_replies[k], rewards[k])
    print("\nThe whole group:")
    for i, reply in enumerate(group["replies"]):
        print(f"  rollout {i}: {compact(reply, 100)}")
    print(group_advantages(rewards))
    print("\nOne rollout as the trainer sees it (the prompt, with the tool schema, is not trained; the reply is):")
    completion = group["completion_ids"][0]
    print(describe_rollout(tokenizer, group["prompt_ids"], completion, [1] * len(completion)))
    return rewards


def run_preflight(notebook: str, model, tokenizer, env_url: str, dataset, config, *, n: int, dataset_name: str,
                  dataset_config: dict, system_prompt: str, max_new_tokens: int, precision: str, seed: int,
                  resume: bool = False, mixed_only: bool = False, start_checkpoint: str = ""):
    """Sample a group of `config.num_generations` at `config.temperature` (a GRPOConfig's) for each of the first `n`
    training questions (`helpers.chain_sum.preflight`) and print its verdict; kept on disk, so a resumed run trains on the questions this preflight chose. With `mixed_only`,
    the training rows cycle over the questions whose group was mixed. Returns (the preflight or None when `n` is 0,
    the mixed questions or None, the dataset to train on). Several processes (`accelerate launch`): the main
    process runs it, every process gets the same three."""
    return on_main(_run_preflight, notebook, model, tokenizer, env_url, dataset, config, n=n, dataset_name=dataset_name,
                   dataset_config=dataset_config, system_prompt=system_prompt, max_new_tokens=max_new_tokens,
                   precision=precision, seed=seed, resume=resume, mixed_only=mixed_only,
                   start_checkpoint=start_checkpoint)


def _run_preflight(notebook, model, tokenizer, env_url, dataset, config, *, n, dataset_name, dataset_config,
                   system_prompt, max_new_tokens, precision, seed, resume, mixed_only, start_checkpoint):
    from datasets import Dataset

    result, mixed = None, None
    k, temperature = config.num_generations, config.temperature
    if n:
        # the training rows' own questions (their question_seed), or seeds drawn the same way without that column
        draw = random.Random(seed)
        seeds = (dataset["question_seed"] if "question_seed" in dataset.column_names else
                 [draw.randint(EVAL_SEED + 1, 2**31 - 1) for _ in range(n)])[:n]
        sample = reasoning_gym_sampler(model, tokenizer, env_url, dataset_name=dataset_name,
                                       dataset_config=dataset_config, system_prompt=system_prompt,
                                       max_new_tokens=max_new_tokens, precision=precision,
                                       progress=True)   # printed lines: greedy, then k rollouts a question
        result = kept(notebook, "preflight", lambda: preflight(sample, seeds, k=k, temperature=temperature),
                      resume=resume, load=Preflight.from_dict, same={"questions": seeds})
        print(result)
    if mixed_only:
        if result is None or "question_seed" not in dataset.column_names:
            raise ValueError("MIXED_ONLY needs the preflight (PREFLIGHT_N > 0) and SAME_QUESTION_PER_GROUP=True")
        mixed = result.mixed_or_why_not(start_checkpoint)   # none mixed: an error saying why
        dataset = Dataset.from_dict({"prompt": dataset["prompt"],
                                     "question_seed": [mixed[i % len(mixed)] for i in range(len(dataset))]})
        print(f"MIXED_ONLY: training cycles over the {len(mixed)} of {result.n} questions whose group was mixed")
    return result, mixed, dataset
