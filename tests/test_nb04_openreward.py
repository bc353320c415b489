"""Notebook 04 and TRL's real OpenRewardSpec against the local calculator_env ORS server."""

from __future__ import annotations

import os
import re

import pytest

from tools.notebooks import NOTEBOOKS_DIR, cell_outputs_text, load_cells
from helpers.openreward.evaluation import close_episode, environment_tools
from helpers.openreward.local import LocalORSServer

from eval_checks import assert_precision_recorded

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def ors(tmp_path_factory):
    with LocalORSServer("calculator_env.server:app", log_dir=tmp_path_factory.mktemp("ors-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def spec(ors):
    from trl.experimental.openreward import OpenRewardSpec

    return OpenRewardSpec(ors.url, num_tasks=12)


def test_spec_dataset_has_the_task_columns_and_no_answer(spec):
    from calculator_env import make_task

    ds = spec.train_dataset
    assert len(ds) == 12
    assert set(ds.column_names) == {"prompt", "task_index", "id", "difficulty", "expression"}
    assert ds["task_index"] == list(range(12))
    assert ds[0]["prompt"] == [{"role": "user", "content": ""}]  # TRL appends the env's prompt at reset
    assert ds[5]["expression"] == make_task("train", 5)["expression"]  # served by the env, in order


def test_spec_adapter_binds_the_tools_and_reads_the_env_reward(spec):
    from calculator_env import true_answer

    env = spec.environment_factory()
    assert sorted(t.__name__ for t in environment_tools(env)) == ["answer", "calculate"]
    row = spec.train_dataset[2]
    prompt = env.reset(**row)
    assert row["expression"] in prompt
    assert env.calculate(expression=row["expression"]) == str(true_answer(row))
    assert env.reward is None and not env.finished  # the helper tool grants no reward
    assert env.answer(answer=str(true_answer(row))) == "Correct."
    assert env.reward == 1.0 and env.finished

    wrong = spec.environment_factory()
    wrong.reset(**spec.train_dataset[3])
    wrong.answer(answer=str(true_answer(spec.train_dataset[3]) + 1))
    silent = spec.environment_factory()
    silent.reset(**spec.train_dataset[4])  # never calls a tool: unscored, not zero
    assert spec.reward_funcs(environments=[env, wrong, silent]) == [1.0, 0.0, None]
    for e in (env, wrong, silent):
        close_episode(e)


def test_the_answer_never_appears_in_the_prompt_the_model_sees(spec):
    from calculator_env import true_answer
    from helpers.model_folders import qwen3_tokenizer

    tokenizer = qwen3_tokenizer()
    env = spec.environment_factory()
    for row in spec.train_dataset:
        messages = [dict(m) for m in row["prompt"]]
        messages[-1]["content"] += env.reset(**row)  # exactly what GRPOTrainer does
        seen = tokenizer.apply_chat_template(messages, tools=environment_tools(env), tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
        assert row["expression"] in seen
        assert str(true_answer(row)) not in re.findall(r"-?\d+", seen), (row, seen)
    close_episode(env)


def test_the_notebooks_reward_wrapper_scores_unscored_rollouts_zero_and_logs_calculator_use(spec):
    """The reward function a learner edits (the cell tagged "reward-funcs"), on real ORS episodes: the spec's
    reward where the environment gave one, 0.0 where it gave none, and the calculator-call rates logged."""
    from calculator_env import true_answer

    cell = load_cells(NOTEBOOKS_DIR / "04_openreward_spec.ipynb", "reward-funcs", namespace={"spec": spec})
    rows = [spec.train_dataset[i] for i in range(3)]
    right, wrong, silent = (spec.environment_factory() for _ in rows)
    for env, row in zip((right, wrong, silent), rows):
        env.reset(**row)
    right.calculate(expression=rows[0]["expression"])
    right.answer(answer=str(true_answer(rows[0])))
    wrong.answer(answer=str(true_answer(rows[1]) + 1))

    def call(name):
        return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": {}}}]}

    completions = [[call("calculate"), call("answer")], [call("answer")], [{"role": "assistant", "content": "hm"}]]
    logged = {}
    rewards = cell["ors_reward_or_zero"](environments=[right, wrong, silent], completions=completions,
                                         log_metric=logged.__setitem__, difficulty=["hard", "hard", "easy"])
    assert rewards == [1.0, 0.0, 0.0]                 # the silent rollout is scored zero, not None
    assert cell["unscored_share"] == [pytest.approx(1 / 3)]
    assert logged == {"tools/calculate_rate": pytest.approx(1 / 3), "tools/calculate_rate_hard": 0.5}
    assert cell["called"](completions[0], "calculate") and not cell["called"](completions[1], "calculate")
    for env in (right, wrong, silent):
        close_episode(env)


@pytest.mark.notebook
def test_notebook_04_tiny_run_records_sane_metrics(notebook_runner, monkeypatch):
    # The kernel inherits this process's environment; the module's `ors` fixture may have pointed
    # the SDK variables at its own server. A learner's fresh kernel has none of them.
    for var in ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL", "OPENREWARD_API_KEY",
                "OPENREWARD_DISABLE_UPDATE_CHECK"):
        monkeypatch.delenv(var, raising=False)
    metrics, executed = notebook_runner("04_openreward_spec")
    assert metrics["profile"] == "tiny"
    assert metrics["ors_target"] == "local"
    assert metrics["num_tasks"] == 16
    assert metrics["tools"] == ["answer", "calculate"]
    assert metrics["activation_checkpointing"] is False  # CPU: TRL's default would only cost time
    # the warm start: the local teacher played 24 train tasks through ORS, a mix with and without `calculate`
    teacher = metrics["teacher"]
    assert metrics["warm_started"] is True and teacher["episodes"] == 24 and teacher["errors"] == 0
    assert 0 < teacher["rewarded_with_calculate"] < teacher["rewarded"] == metrics["sft_examples"]
    assert sum(teacher["rewarded_by_difficulty"].values()) == teacher["rewarded"]
    assert metrics["sft_seconds"] > 0
    # GRPO: one reward and one calculate-call rate per step, read from the rollouts' own tool calls
    assert len(metrics["reward_curve"]) == metrics["steps"] == 2
    assert len(metrics["calculate_rate_curve"]) == 2
    # one loss pass a step; skipped only where every group of the step scored alike (no gradient)
    zero_std = metrics["frac_reward_zero_std_curve"]
    assert metrics["loss_passes"] == 2 and 0 <= metrics["loss_passes_skipped"] <= sum(z == 1.0 for z in zero_std)
    assert all(0.0 <= r <= 1.0 for r in metrics["reward_curve"] + metrics["calculate_rate_curve"])
    for key in ("reward_first", "reward_last", "test_accuracy_before", "test_accuracy_after",
                "test_answered_before", "test_answered_after", "unscored_first", "unscored_last"):
        assert 0.0 <= metrics[key] <= 1.0, key
    # the evaluation: the same 6 test tasks before and after, two of each difficulty, paired
    assert metrics["eval_tasks"] == 6 and metrics["eval_split"] == "test"
    assert set(metrics["test_by_difficulty_before"]) == {"easy", "medium", "hard"}
    lo, hi = metrics["accuracy_change_ci"]
    assert lo <= metrics["accuracy_change"] <= hi
    assert metrics["accuracy_change"] == pytest.approx(metrics["test_accuracy_after"] - metrics["test_accuracy_before"])
    text = cell_outputs_text(executed)
    assert_precision_recorded(metrics, text)
    assert "answer    -> 'Correct.'  reward=1.0  finished=True" in text  # the hand-walked episode
    assert "-> calculate(" in text and "[tool] '" in text  # a teacher episode that used the calculator, shown
    assert "on the same 6 questions" in text  # the paired change was printed
    assert metrics["preflight_n"] == 2 and metrics["preflight_k"] == 2  # two tasks, a group of two each
    assert 0.0 <= metrics["preflight_mixed_share"] <= 1.0
    assert metrics["preflight_verdict"] in ("format-bound", "too hot", "no headroom", "headroom")
    assert "OPENREWARD_API_URL after stop: None" in text  # the SDK variables were restored
    # the watch: the probe (9 held-out tasks) at the start and each step, alarms printed as raised
    watch = metrics["watch"]
    assert [step for step, _ in watch["probe"]] == [0, 1, 2] and all(0 <= v <= 1 for _, v in watch["probe"])
    assert all(f"[watch] ALARM {kind}" in text for kind in watch["alarms"])
    assert 0.0 <= watch["no_tool_share"] <= 1.0
    assert watch["gallery"] == []   # the judge finds no rewarded wrong answer: the ORS reward pays right answers only
    # the trainer's sessions went through helpers.openreward.resilient: every rollout counted, none lost
    episodes = metrics["env_episodes"]
    assert episodes["rollouts"] == metrics["steps"] * metrics["generation_batch_size"] and episodes["failed"] == 0
    assert episodes["scored"] <= episodes["rollouts"]


# --- the helpers notebook 04 calls in one named line each (helpers/openreward/) ------------------------------------

@pytest.fixture(scope="module")
def tiny_settings():
    from helpers.profiles import resolve_settings

    return resolve_settings("04_openreward_spec", "tiny", quiet=True, precision="fp32", report_to="none")


@pytest.fixture(scope="module")
def student(tiny_settings):
    """The notebook's model cell: load_student on the tiny profile (tiny-toolcall, fp32)."""
    from helpers.openreward.policy import load_student

    return load_student("04_openreward_spec", tiny_settings)


def test_describe_target_prints_the_target_its_log_and_the_sdk_variables(ors, capsys):
    from helpers.openreward.local import describe_target

    describe_target(ors.url, ors)
    out = capsys.readouterr().out
    assert out.startswith(f"ORS target: {ors.url} (local calculator_env server; its log: ")
    for var in ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL"):
        assert f"  {var} = {ors.url}" in out
    describe_target("Org/Env", None)   # the catalog: nothing started, no log named
    assert capsys.readouterr().out.startswith("ORS target: Org/Env \n")


def test_check_splits_passes_train_and_test_and_names_the_knob_for_a_missing_split(ors):
    from helpers.openreward.local import check_splits

    check_splits(ors.url, "test")     # calculator_env has train and test: no error
    check_splits(ors.url, "train")
    with pytest.raises(ValueError, match=r"EVAL_SPLIT='validation' must be one of them\. Set EVAL_SPLIT"):
        check_splits(ors.url, "validation")


def test_load_student_gives_model_tokenizer_and_precision_and_prints_them(student, tiny_settings):
    from helpers.openreward.policy import load_student
    from helpers.profiles import Settings

    model, tokenizer, precision = student
    assert precision.precision == "fp32" and tokenizer.chat_template
    assert sum(p.numel() for p in model.parameters()) > 0
    with pytest.raises(ValueError, match="no model to load"):
        load_student("04_openreward_spec", Settings({**tiny_settings, "model": None}))


def test_show_model_prompt_renders_the_tools_and_the_task_and_checks_the_answer_is_absent(spec, student, capsys):
    from calculator_env import true_answer
    from helpers.openreward.evaluation import show_model_prompt

    _, tokenizer, _ = student
    env = spec.environment_factory()
    row = spec.train_dataset[1]
    seen = show_model_prompt(tokenizer, env, env.reset(**row), row=row)
    close_episode(env)
    out = capsys.readouterr().out
    assert row["expression"] in seen and '"name": "calculate"' in seen and seen in out
    assert f"answer {true_answer(row)} is not in the prompt" in out
    with pytest.raises(AssertionError, match="leaked"):
        show_model_prompt(tokenizer, env, f"What is {row['expression']}? It is {true_answer(row)}.", row=row)


def test_play_teacher_and_sft_warm_start_train_on_the_rewarded_episodes(ors, spec, student, tiny_settings, capsys,
                                                                       monkeypatch, tmp_path):
    """The warm start as the notebook calls it: the local teacher plays 24 train tasks through ORS, the rewarded
    ones (some with `calculate`, some without) are kept and printed; one SFT epoch on them changes the weights."""
    import torch
    from helpers.openreward.warm_start import WarmStartData, play_teacher, sft_warm_start
    from trl import SFTConfig, SFTTrainer

    from helpers.compute.fast_trainers import FastSFTTrainer

    from helpers.reporting.tracking import trainer_io

    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))   # the SFT trainer's output folder
    model, tokenizer, precision = student
    warm = play_teacher(ors.url, tiny_settings, seed=0)
    try:
        out = capsys.readouterr().out
        assert warm.stats["episodes"] == 24 and warm.stats["errors"] == 0 and warm.teacher_server is not None
        assert warm.kept == [e for e in warm.episodes if e.reward == 1.0]
        assert 0 < warm.stats["rewarded_with_calculate"] < len(warm.kept)
        assert "-> calculate(" in out and "[tool] '" in out   # the kept episode with the calculator, shown
        weights = [p.detach().clone() for p in model.parameters() if p.requires_grad]
        env = spec.environment_factory()
        config = SFTConfig(**trainer_io("nb04-test", "sft", tiny_settings, precision, seed=0, report_to="none"),
                           num_train_epochs=1, per_device_train_batch_size=2, max_length=1024, assistant_only_loss=True,
                           activation_checkpointing=False)
        # the notebook's default trainer (PLAIN_TRL=False); tests/test_fast_trainers.py: it trains as SFTTrainer does
        seconds = sft_warm_start(FastSFTTrainer, config, model, tokenizer, warm, environment_tools(env),
                                 settings=tiny_settings)
        assert seconds > 0 and f"SFT: {len(warm.kept)} episodes" in capsys.readouterr().out
        assert any(not torch.equal(a, b) for a, b in zip(weights, (p for p in model.parameters() if p.requires_grad)))
        with pytest.raises(TypeError, match="SFTTrainer or a subclass"):
            sft_warm_start(object, config, model, tokenizer, warm, [], settings=tiny_settings)
        with pytest.raises(ValueError, match="no kept teacher episodes"):
            sft_warm_start(SFTTrainer, config, model, tokenizer, WarmStartData(), [], settings=tiny_settings)
    finally:
        warm.stop()
    assert warm.teacher_server is None


def test_play_teacher_refuses_a_catalog_target_and_skips_without_a_warm_start(tiny_settings, capsys):
    from helpers.openreward.warm_start import play_teacher, sft_warm_start

    with pytest.raises(ValueError, match="set WARM_START=False"):
        play_teacher("Eigent/SETA", tiny_settings)
    from helpers.profiles import Settings

    off = Settings({**tiny_settings, "warm_start": False})
    warm = play_teacher("Eigent/SETA", off)
    assert warm.kept == [] and warm.stats == {} and warm.teacher_server is None
    assert "WARM_START=False: training starts from tiny-toolcall as it is" in capsys.readouterr().out
    assert sft_warm_start(None, None, None, None, warm, [], settings=off) == 0.0
    warm.stop()   # nothing to stop: no error


def test_split_evaluator_scores_the_held_out_split_and_probes_another_model(ors, spec, student, tiny_settings):
    from helpers.openreward.evaluation import split_evaluator, watch_training

    model, tokenizer, precision = student
    evaluate = split_evaluator(model, tokenizer, ors.url, split="test", settings=tiny_settings, precision=precision)
    result = evaluate(progress=False)
    assert result.split == "test" and result.n == tiny_settings.eval_tasks == 6
    assert set(result.by_difficulty) == {"easy", "medium", "hard"} and 0.0 <= result.accuracy <= 1.0
    probe = evaluate(model, n=3, progress=False)   # the watch's probe: another model, fewer tasks
    assert probe.n == 3
    watch = watch_training(evaluate, tiny_settings)
    assert watch.probe_every == max(1, tiny_settings.max_steps // 3)
    assert 0.0 <= watch.probe(model) <= 1.0   # 9 held-out tasks, greedy: an accuracy
    with pytest.raises(ValueError, match="EVAL_SPLIT"):
        split_evaluator(model, tokenizer, ors.url, split="", settings=tiny_settings, precision=precision)


def test_ors_preflight_samples_groups_and_skips_or_refuses_by_preflight_n(spec, student, tiny_settings, capsys):
    from helpers.openreward.evaluation import ors_preflight
    from helpers.profiles import Settings

    model, tokenizer, precision = student
    result = ors_preflight(model, tokenizer, spec, tiny_settings, precision)
    assert result.as_metrics()["preflight_n"] == 2 and result.as_metrics()["preflight_k"] == 2
    assert str(result) in capsys.readouterr().out
    assert ors_preflight(model, tokenizer, spec, Settings({**tiny_settings, "preflight_n": 0}), precision) is None
    with pytest.raises(ValueError, match="PREFLIGHT_N=99 is more than the 12 training tasks"):
        ors_preflight(model, tokenizer, spec, Settings({**tiny_settings, "preflight_n": 99}), precision)
