"""Notebook 03's plumbing: the set-up its tutorial does not teach, each piece one named call in the notebook.

What stays in the notebook is what the tutorial teaches (the rollout functions, the reward functions, the trainers);
what lives here is what a run needs around them and no lesson is about: checks before anything slow, model loading
with its memory check and precision, where each trainer writes and logs, the environment servers, the warm start's
SFT, and the alarms while GRPO trains.

    from helpers.wordle import plumbing

    settings.use_vllm = plumbing.check_options(settings, VLLM_SERVER_URL, PUSH_TO_HUB, HUB_MODEL_ID, TRACKIO_SPACE_ID)
    model, tokenizer, precision, model_path, echo_model_path = plumbing.load_models(NOTEBOOK, settings)
    trainer_args = plumbing.TrainerArgs(NOTEBOOK, settings, precision, TRACKIO_SPACE_ID)
    SFTConfig(**trainer_args.io("sft"), ...)   # the notebook's grpo_config does the same for each GRPOConfig
"""

from __future__ import annotations

import time

from helpers.compute.hardware import check_memory
from helpers.compute.precision import choose_precision
from helpers.compute.processes import one_server, process_count
from helpers.compute.vllm_check import decide_use_vllm
from helpers.model_folders import resolve_model
from helpers.models import load_policy
from helpers.reporting.alarms import RunWatch
from helpers.reporting.publish import check_can_publish
from helpers.reporting.tracking import check_trackio_space, trainer_io
from helpers.rollouts import TemplateView
from helpers.servers import server_or_url
from helpers.wordle.evaluation import HeldOut, check_held_out, paired_changes, split_words, wordle_words
from helpers.wordle.teacher import sft_rows

VLLM_MODES = ("colocate", "server")
EVAL_SESSIONS = 72   # the held-out evaluation's 64 games at once, the teacher's game and yours, with room to spare


def check_options(settings, vllm_server_url: str | None = None, push_to_hub: bool = False,
              hub_model_id: str | None = None, trackio_space_id: str | None = None) -> bool:
    """Check before anything slow: a push that cannot happen, an unreachable trackio Space, vLLM without a CUDA GPU
    or its package, a bad VLLM_MODE and server mode without VLLM_SERVER_URL each stop here with what to set, not
    after training. Prints the generation mode and returns whether to use vLLM (the profile's wish falls back to
    transformers, and says so, when vLLM cannot run; USE_VLLM=True set by you raises instead)."""
    import torch

    check_can_publish(push_to_hub, hub_model_id)
    check_trackio_space(trackio_space_id, settings.report_to)
    use_vllm = decide_use_vllm(settings.use_vllm, explicit="use_vllm" in settings.overridden,
                               cuda=torch.cuda.is_available())
    if settings.vllm_mode not in VLLM_MODES:
        raise ValueError(f"VLLM_MODE must be 'colocate' or 'server', not {settings.vllm_mode!r}.")
    if use_vllm and settings.vllm_mode == "server" and not vllm_server_url:
        raise ValueError("VLLM_MODE='server' needs VLLM_SERVER_URL, e.g. 'http://localhost:8000' "
                         "(start it with: trl vllm-serve --model <MODEL> --port 8000).")
    print("generation:", _generation_mode(use_vllm, settings.vllm_mode))
    return use_vllm


def generation_mode(settings) -> str:
    """How the run generates, as metrics.json records it: "vLLM colocate", "vLLM server" or transformers."""
    return _generation_mode(settings.use_vllm, settings.vllm_mode)


def _generation_mode(use_vllm: bool, vllm_mode: str) -> str:
    return f"vLLM {vllm_mode}" if use_vllm else "transformers generate (no vLLM)"


def load_models(notebook: str, settings, *, seed: int | None = None):
    """(model, tokenizer, precision, model_path, echo_model_path): the Wordle policy loaded after the memory check
    (which stops, with what to set, a run that will not fit), the precision it trains in ("auto": timed here on a
    CPU, the card's native on CUDA), its tokenizer, and where both models come from. Prints each decision. `seed`:
    torch's, before loading (LoRA adapters start the same for the same seed)."""
    from transformers import AutoTokenizer

    model_path = resolve_model(settings.model)
    echo_model_path = resolve_model(settings.echo_model)
    print("model:", model_path, "| echo model:", echo_model_path)
    check_memory(notebook, settings, model=model_path)   # prints the estimate; stops here if it will not fit
    model = load_policy(model_path, lora=settings.lora, seed=seed)   # fp32 weights (or LoRA adapters), on the GPU if any
    precision = choose_precision(model, settings.precision)
    print(precision)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return model, tokenizer, precision, model_path, echo_model_path


class TrainerArgs:
    """What the notebook's five trainer configs share (two SFT warm starts, three GRPO runs): where each writes, how
    it logs, its precision (`io`), and the chat template's switches; the notebook's `grpo_config` adds the rest."""

    def __init__(self, notebook: str, settings, precision, trackio_space_id: str | None = None):
        if settings.vllm_mode not in VLLM_MODES:
            raise ValueError(f"VLLM_MODE must be 'colocate' or 'server', not {settings.vllm_mode!r}.")
        self.notebook, self.settings, self.precision = notebook, settings, precision
        self.trackio_space_id = trackio_space_id
        # the chat template's switches, the same for training, the evaluation and the SFT rows (Qwen3: thinking off)
        self.chat_template_kwargs = {} if settings.enable_thinking is None else {"enable_thinking": settings.enable_thinking}

    def io(self, name: str) -> dict:
        """Where trainer `name` writes (runs/<notebook>/<name>), how it logs, in which precision: the same for SFT
        and GRPO (helpers.reporting.tracking.trainer_io)."""
        return trainer_io(self.notebook, name, self.settings, self.precision, trackio_space_id=self.trackio_space_id,
                          seed=self.settings.seed)


def _environment(base_url: str | None, app: str, name: str, label: str, **server_kwargs):
    url, server = server_or_url(base_url, app, name=name, **server_kwargs)
    print(f"{label} environment at", url, "(started here)" if server else "(given)")
    return url, server


def start_echo(base_url: str | None = None):
    """(url, server): the echo environment at `base_url` (ECHO_BASE_URL, checked now), else started here on
    127.0.0.1, standing in for the tutorial's Hugging Face Space. `server` is None when nothing was started (and on
    every process but the main one under `accelerate launch`: one server for all)."""
    return one_server(_environment, base_url, "echo_env.server.app:app", "echo", "echo")


def start_textarena(base_url: str | None, settings):
    """(url, server): the TextArena Wordle environment at `base_url` (ENV_BASE_URL, checked now), else started here
    with a session slot for each game that can be open at once: training's games and the preview's (two generation
    batches), the held-out evaluation's, the teacher's and yours; under `accelerate launch`, one server for every
    process, with training's slots for each."""
    generation_batch = settings.per_device_train_batch_size * settings.gradient_accumulation_steps
    if generation_batch < 1:
        raise ValueError(f"per_device_train_batch_size x gradient_accumulation_steps must be at least 1, "
                         f"not {generation_batch}.")
    return one_server(_environment, base_url, "textarena_env.server.app:app", "textarena", "TextArena",
                      env={"MAX_CONCURRENT_ENVS": str(2 * generation_batch * process_count() + EVAL_SESSIONS)})


def finish_echo(trainer, seen_env_rewards: list, client) -> list[float]:
    """The echo warm-up's mean env_reward per step (printed, with how many values reached the reward function
    through rollout_func's extra key), its environment client closed. Raises when no step logged a reward."""
    key = "rewards/reward_from_env/mean"
    rewards = [h[key] for h in trainer.state.log_history if key in h]
    if not rewards:
        raise ValueError(f"The echo trainer logged no {key!r}: did it train a step (ECHO_STEPS)?")
    print("mean env_reward per step:", [round(r, 3) for r in rewards])
    print("env_reward values the reward function received:", len(seen_env_rewards))
    client.close()
    return rewards


def held_out_games(env_url: str, player, trainer_args: TrainerArgs):
    """(training words, HeldOut): EVAL_GAMES of TextArena's secret words held out (never drawn in training, checked),
    printed with a few examples, and the evaluation that plays them greedily with `player` (the notebook's
    WordleRollout) as the trainer generates: its turns, tokens per guess, chat template and precision."""
    settings = trainer_args.settings

    train_words, eval_words = split_words(wordle_words(), n_eval=settings.eval_games)
    check_held_out(train_words, eval_words)
    print(f"{len(train_words)} training words, {len(eval_words)} held-out words, e.g. {', '.join(eval_words[:6])}")
    return train_words, HeldOut(env_url, eval_words, player=player, max_turns=settings.max_turns,
                                max_new_tokens=settings.max_completion_length,
                                chat_template_kwargs=trainer_args.chat_template_kwargs,
                                precision=trainer_args.precision.precision)


def warm_start_sft(sft_class, sft_config, model, tokenizer, kept_games: list[dict], trainer_args: TrainerArgs, held_out,
                   base_eval):
    """(seconds, warm evaluation): SFT with the notebook's `sft_config` on the teacher's won games (`helpers.wordle.teacher.sft_rows`,
    laid out as the rollout lays out a game), then the held-out games again, printed with the paired change from
    `base_eval`. WARM_START off (`settings.warm_start` False): nothing trains, (0.0, base_eval)."""
    from datasets import Dataset

    settings = trainer_args.settings
    if not settings.warm_start:
        return 0.0, base_eval
    if not kept_games:
        raise ValueError("warm_start_sft needs the teacher's kept games (helpers.wordle.teacher.warm_start_games).")
    sft_dataset = Dataset.from_list(sft_rows(kept_games, TemplateView(tokenizer, trainer_args.chat_template_kwargs)))
    sft_trainer = sft_class(model=model, processing_class=tokenizer, train_dataset=sft_dataset, args=sft_config)
    started = time.perf_counter()
    sft_trainer.train()
    seconds = time.perf_counter() - started
    print(f"SFT: {sft_trainer.state.global_step} steps over {len(sft_dataset)} games in {seconds:.0f} s")
    del sft_trainer
    warm_eval = held_out(model, tokenizer)
    print(warm_eval)
    print("\nwarm start - base model, on the same held-out words:")
    for change in paired_changes(base_eval, warm_eval):
        print(" ", change)
    print("first game:", warm_eval.games[0]["guesses"], "->", warm_eval.games[0]["feedback"])
    return seconds, warm_eval


def run_watch(held_out, tokenizer, *, max_steps: int, probe_games: int = 8):
    """A `helpers.reporting.alarms.RunWatch` for the Wordle trainer: alarms while it trains, and a probe (valid
    guesses in the first `probe_games` held-out games, greedy) at the start, halfway and the end."""
    if probe_games < 1:
        raise ValueError(f"probe_games must be at least 1, not {probe_games}.")
    probe_words = held_out.words[:probe_games]
    return RunWatch(probe=lambda m: held_out(m, tokenizer, words=probe_words).summary()["valid"],
                    probe_every=max(1, max_steps // 2))
