"""Notebook 03's plumbing, each function as the notebook calls it: the option checks, the model loading, the fields the
trainers share, the environment servers, the echo warm-up's report, the held-out games, the teacher's games, the
warm start's SFT and the alarms (helpers/wordle/plumbing.py, helpers/wordle/evaluation.py, helpers/wordle/teacher.py).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from helpers.compute.precision import PrecisionChoice
from helpers.profiles import resolve_settings
from helpers.servers import LocalServer
from helpers.wordle import plumbing

NOTEBOOK = "03_wordle_rollout_func"
FP32 = PrecisionChoice("fp32", "cpu", "test")


def tiny(**knobs):
    return resolve_settings(NOTEBOOK, "tiny", quiet=True, **knobs)


@functools.cache
def wordle_rollout():
    from tools.notebooks import NOTEBOOKS_DIR, load_cells

    return load_cells(NOTEBOOKS_DIR / f"{NOTEBOOK}.ipynb", "rollout-func")["WordleRollout"]


@pytest.fixture(scope="module")
def wordle_url(tmp_path_factory):
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "16"}, name="textarena",
                     log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server.base_url


# ---------------------------------------------------------------------- before anything slow
def test_check_options_prints_the_generation_mode_and_returns_the_vllm_decision(capsys):
    settings = tiny()
    assert plumbing.check_options(settings, None, False, None, None) is False
    assert "generation: transformers generate (no vLLM)" in capsys.readouterr().out
    assert plumbing.generation_mode(settings) == "transformers generate (no vLLM)"
    settings.use_vllm, settings.vllm_mode = True, "server"
    assert plumbing.generation_mode(settings) == "vLLM server"


def test_check_options_stops_what_cannot_work_with_what_to_set(monkeypatch):
    from helpers.reporting.publish import PublishError

    with pytest.raises(PublishError, match="PUSH_TO_HUB=True needs HUB_MODEL_ID"):
        plumbing.check_options(tiny(), push_to_hub=True, hub_model_id=None)
    bad = tiny()
    bad.vllm_mode = "remote"
    with pytest.raises(ValueError, match="VLLM_MODE must be 'colocate' or 'server', not 'remote'"):
        plumbing.check_options(bad)
    monkeypatch.setattr(plumbing, "decide_use_vllm", lambda wanted, **kw: True)   # as on a GPU with vLLM
    server = tiny()
    server.vllm_mode = "server"
    with pytest.raises(ValueError, match="VLLM_MODE='server' needs VLLM_SERVER_URL"):
        plumbing.check_options(server)
    assert plumbing.check_options(server, "http://localhost:8000") is True


# ---------------------------------------------------------------------- the model and the trainers' shared fields
@pytest.mark.slow
def test_load_models_checks_memory_loads_and_prints_each_decision(capsys):
    settings = tiny(precision="fp32")
    model, tokenizer, precision, model_path, echo_model_path = plumbing.load_models(NOTEBOOK, settings)
    out = capsys.readouterr().out
    assert f"model: {model_path} | echo model: {echo_model_path}" in out
    assert precision.precision == "fp32" and str(precision) in out
    assert tokenizer.name_or_path == model_path and next(model.parameters()).dtype.is_floating_point


def test_trainer_args_give_each_trainer_its_folder_logging_and_template(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    settings = tiny(enable_thinking=False)
    args = plumbing.TrainerArgs(NOTEBOOK, settings, FP32, None)
    assert args.chat_template_kwargs == {"enable_thinking": False}
    assert args.io("sft")["output_dir"].endswith(f"{NOTEBOOK}/sft") and args.io("sft")["seed"] == settings.seed
    assert plumbing.TrainerArgs(NOTEBOOK, tiny(), FP32).chat_template_kwargs == (
        {} if tiny().enable_thinking is None else {"enable_thinking": tiny().enable_thinking})
    bad = tiny()
    bad.vllm_mode = "remote"
    with pytest.raises(ValueError, match="VLLM_MODE must be"):
        plumbing.TrainerArgs(NOTEBOOK, bad, FP32)


# ---------------------------------------------------------------------- servers and the echo warm-up's report
def test_start_textarena_uses_a_given_server_and_refuses_an_empty_batch(wordle_url, capsys):
    assert plumbing.start_textarena(wordle_url, tiny()) == (wordle_url, None)
    assert f"TextArena environment at {wordle_url} (given)" in capsys.readouterr().out
    empty = tiny()
    empty.per_device_train_batch_size = 0
    with pytest.raises(ValueError, match="at least 1, not 0"):
        plumbing.start_textarena(None, empty)


def test_start_echo_starts_a_server_here(capsys):
    url, server = plumbing.start_echo(None)
    try:
        assert server is not None and url == server.base_url
        assert f"echo environment at {url} (started here)" in capsys.readouterr().out
    finally:
        server.stop()


def test_finish_echo_prints_the_rewards_and_closes_the_client(capsys):
    closed = []
    client = SimpleNamespace(close=lambda: closed.append(True))
    trainer = SimpleNamespace(state=SimpleNamespace(log_history=[
        {"rewards/reward_from_env/mean": 0.12345, "step": 1}, {"loss": 0.0}, {"rewards/reward_from_env/mean": 0.5}]))
    assert plumbing.finish_echo(trainer, [1.0, 2.0, 3.0], client) == [0.12345, 0.5]
    out = capsys.readouterr().out
    assert "mean env_reward per step: [0.123, 0.5]" in out and "the reward function received: 3" in out
    assert closed == [True]
    with pytest.raises(ValueError, match="logged no 'rewards/reward_from_env/mean'"):
        plumbing.finish_echo(SimpleNamespace(state=SimpleNamespace(log_history=[{"loss": 1.0}])), [], client)


# ---------------------------------------------------------------------- held-out games, the teacher, the warm start
def test_held_out_games_split_check_and_keep_the_evaluation_settings(wordle_url, capsys):
    args = plumbing.TrainerArgs(NOTEBOOK, tiny(eval_games=5), FP32)
    train_words, held_out = plumbing.held_out_games(wordle_url, wordle_rollout(), args)
    assert len(held_out.words) == 5 and len(train_words) == 1384 - 5 and not set(train_words) & set(held_out.words)
    assert f"{len(train_words)} training words, 5 held-out words, e.g. {held_out.words[0]}" in capsys.readouterr().out
    assert held_out.player is wordle_rollout() and held_out.settings["precision"] == "fp32"
    assert held_out.settings["max_turns"] == args.settings.max_turns
    from helpers.wordle.evaluation import HeldOut

    with pytest.raises(ValueError, match="at least one word"):
        HeldOut(wordle_url, [], player=wordle_rollout())


def test_run_watch_probes_the_first_held_out_games(capsys):
    calls = []

    def held_out(model, tokenizer, words=None):
        calls.append((model, tokenizer, words))
        return SimpleNamespace(summary=lambda: {"valid": 0.25})

    held_out.words = ["crane", "slate", "brave"]
    watch = plumbing.run_watch(held_out, "tok", max_steps=10, probe_games=2)
    assert watch.probe_every == 5 and watch.probe("model") == 0.25
    assert calls == [("model", "tok", ["crane", "slate"])]
    assert plumbing.run_watch(held_out, "tok", max_steps=1).probe_every == 1
    with pytest.raises(ValueError, match="probe_games must be at least 1"):
        plumbing.run_watch(held_out, "tok", max_steps=4, probe_games=0)


def test_warm_start_games_off_plays_nothing(capsys):
    from helpers.wordle.teacher import warm_start_games

    assert warm_start_games(tiny(warm_start=False), None, "http://unused", ["crane"]) == ([], [], None)
    assert "WARM_START is off" in capsys.readouterr().out
    base = object()
    args = plumbing.TrainerArgs(NOTEBOOK, tiny(warm_start=False), FP32)
    assert plumbing.warm_start_sft(None, None, None, None, [], args, None, base) == (0.0, base)
    with pytest.raises(ValueError, match="kept games"):
        plumbing.warm_start_sft(None, None, None, None, [], plumbing.TrainerArgs(NOTEBOOK, tiny(warm_start=True), FP32),
                                None, base)


@pytest.mark.slow
def test_warm_start_games_and_sft_as_the_notebook_runs_them(wordle_url, tmp_path, monkeypatch, capsys):
    """The local teacher plays, its won games are kept and printed; one epoch of SFT on them, then the held-out
    games again, compared game by game with the base model's."""
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from helpers.models import load_policy
    from helpers.model_folders import resolve_model
    from helpers.wordle.evaluation import HeldOut
    from helpers.wordle.teacher import warm_start_games

    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    settings = tiny(warm_start=True, teacher_games=3, precision="fp32", report_to="none")
    games, kept, server = warm_start_games(settings, None, wordle_url, ["crane", "slate", "brave", "shake"])
    try:
        assert server is not None and len(games) == 3 and 1 <= len(kept) <= 3
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert "played 3 games: won" in out and "one game (secret" in out and "guess: [" in out

    path = resolve_model("tiny")
    model, tokenizer = load_policy(path), AutoTokenizer.from_pretrained(path)
    args = plumbing.TrainerArgs(NOTEBOOK, settings, FP32)
    held_out = HeldOut(wordle_url, ["crane", "slate"], player=wordle_rollout(), max_turns=2, max_new_tokens=6,
                       chat_template_kwargs=args.chat_template_kwargs, precision="fp32")
    base = held_out(model, tokenizer, show=True)
    assert "2 held-out games, greedy:" in capsys.readouterr().out
    config = SFTConfig(**args.io("sft"), num_train_epochs=1, per_device_train_batch_size=2, max_length=None,
                       activation_checkpointing=False)
    seconds, warm = plumbing.warm_start_sft(SFTTrainer, config, model, tokenizer, kept, args, held_out, base)
    out = capsys.readouterr().out
    assert seconds > 0 and warm.words == base.words
    assert "SFT: " in out and "warm start - base model, on the same held-out words:" in out and "first game:" in out
