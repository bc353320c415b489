"""Notebook 03: guess parsing, the notebook's own multi-turn Wordle rollout and reward functions (its cells tagged
"rollout-func" and "reward-funcs") against the real local server with a real (tiny) model inside a real
GRPOTrainer, the held-out evaluation playing with that rollout, the generate_rollout_completions stand-in, and the
notebook."""

from __future__ import annotations

import functools
import math

import pytest

from helpers import wordle
from tools.notebooks import NOTEBOOKS_DIR, cell_outputs_text, load_cells
from helpers.servers import LocalServer

from eval_checks import assert_precision_recorded

STREAMS = ("correct", "valid", "consistent", "letters")   # the rollout's `<stream>_reward` keys


@functools.cache
def notebook() -> dict:
    """What the notebook's rollout and reward-function cells define (WordleRollout, reward_funcs, ...)."""
    return load_cells(NOTEBOOKS_DIR / "03_wordle_rollout_func.ipynb", "rollout-func", "reward-funcs")


def WordleRollout(*args, **kwargs):
    return notebook()["WordleRollout"](*args, **kwargs)


@pytest.mark.parametrize("reply, guess", [
    ("[crane]", "crane"),
    ("[ CRANE ]", "crane"),
    ("Guess: [Slate] because it has common letters", "slate"),
    ("**HOUSE**", "house"),
    ("My first guess is mouse.", "mouse"),
    ("[c-r-a-n-e]", "crane"),
    ("<think>maybe think about words</think>\n[brain]", "brain"),
    ("crane slate", "crane"),
    ("I don't know", None),
    ("", None),
    ("[toolong] and [ab]", None),
])
def test_extract_guess_tolerates_what_small_models_write(reply, guess):
    assert wordle.extract_guess(reply) == guess


def test_guess_message_falls_back_to_the_reply_so_the_game_complains():
    assert wordle.guess_message("so my answer is CRANE") == "[crane]"
    assert wordle.guess_message("  no idea  ") == "no idea"
    assert wordle.guess_message("") == "(no guess)"
    assert len(wordle.guess_message("x" * 1000)) == 200


def test_reward_helpers():
    assert wordle.feedback_counts([]) == (0, 0)
    assert wordle.feedback_counts(["XXXXX", "GYXGY"]) == (2, 2)
    cells = notebook()
    rewards = cells["reward_valid"](["a", "b"], valid_reward=[0.2, 0.4])
    assert rewards == [0.2, 0.4] and cells["reward_correct"](["a"]) == [0.0]
    assert [f.__name__ for f in cells["reward_funcs"]] == [f"reward_{key}" for key in STREAMS]


@pytest.mark.parametrize("guess, secret, row", [
    ("slate", "crane", "XXGXG"),
    ("crane", "crane", "GGGGG"),
    ("eerie", "there", "YXYXG"),   # one e is green, the other e's: one yellow (one left), one grey
    ("speed", "abide", "XXYXY"),
    ("llama", "hello", "YYXXX"),
])
def test_feedback_pattern_is_textarenas(guess, secret, row):
    assert wordle.feedback_pattern(guess, secret) == row


def test_consistency_keeps_greens_moves_yellows_drops_greys():
    history = [("slate", "XXGXG")]                 # secret: _ _ a _ e, no s/l/t
    assert wordle.is_consistent("crane", history)
    assert not wordle.is_consistent("slate", history)   # its own row would be all green
    assert wordle.is_consistent("brave", [("slate", "XXGXG"), ("crane", "XGGXG")])
    assert not wordle.is_consistent("crate", [("slate", "XXGXG"), ("crane", "XGGXG")])  # crane's c was grey
    assert wordle.is_consistent("anything", [])


def test_game_skills_count_what_each_move_shows():
    Move = wordle.Move
    moves = [Move("slate", True, "XXGXG", True), Move(None, False, None, False),
             Move("crane", True, "GGGGG", True)]
    skills = wordle.game_skills(moves, won=True)
    assert skills["valid"] == pytest.approx(2 / 3)
    assert skills["consistent"] == pytest.approx(1 / 2)   # after the first row: one refused, one consistent
    assert skills["greens_yellows"] == pytest.approx((2 + 5) / 2) and skills["letters"] == pytest.approx(0.7)
    assert skills["turns"] == 3 and skills["won"] is True
    assert wordle.game_skills([Move("crane", True, "GGGGG", True)], won=True)["consistent"] == 1.0
    assert wordle.game_skills([Move(None, False, None, False)] * 2, won=False) == {
        "valid": 0.0, "consistent": 0.0, "letters": 0.0, "greens_yellows": 0.0, "turns": 2, "won": False}


def test_reward_streams_count_the_turns_a_game_never_played():
    Move = wordle.Move
    good, refused = Move("slate", True, "XXGXG", True), Move("slate", False, None, False)
    # a good guess, then two refusals: the game is over after 3 moves, 3 of its 6 turns never played
    cut_short = wordle.turn_rewards([good, refused, refused], won=False, max_turns=6)
    assert cut_short == {"valid": pytest.approx(1 / 6), "consistent": 0.0, "letters": pytest.approx(0.4)}
    played_on = wordle.turn_rewards([good] + [Move("crane", True, "XXGXG", True)] * 5, won=False, max_turns=6)
    assert played_on["valid"] == 1.0 and played_on["consistent"] == 1.0 and played_on["letters"] == pytest.approx(0.4)
    # a win in two keeps full marks for the four turns it did not need; letters is per accepted guess
    won = wordle.turn_rewards([good, Move("crane", True, "GGGGG", True)], won=True, max_turns=6)
    assert won == {"valid": 1.0, "consistent": 1.0, "letters": pytest.approx((0.4 + 1) / 2)}
    assert wordle.turn_rewards([Move("crane", True, "GGGGG", True)], won=True, max_turns=6)["consistent"] == 1.0
    assert wordle.turn_rewards([refused, refused], won=False, max_turns=6) == {"valid": 0.0, "consistent": 0.0, "letters": 0.0}


def test_letters_pay_for_better_words_not_for_longer_games():
    """An extra accepted guess with fewer greens + yellows lowers the letters stream (the valid stream pays for
    playing on); a better word raises it. Counted per turn, the poor extra guess had raised it."""
    Move = wordle.Move
    two = [Move("slate", True, "YXGXG", True), Move("crane", True, "XXGXG", True)]   # 3 and 2 letters
    poor_third = two + [Move("bumpy", True, "XXXXX", False)]
    good_third = two + [Move("brave", True, "XGGXG", True)]
    letters = {name: wordle.turn_rewards(moves, won=False, max_turns=6)["letters"]
               for name, moves in [("two", two), ("poor", poor_third), ("good", good_third)]}
    assert letters["poor"] < letters["two"] < letters["good"]
    assert wordle.turn_rewards(poor_third, won=False, max_turns=6)["valid"] > \
        wordle.turn_rewards(two, won=False, max_turns=6)["valid"]


def test_same_script_says_how_far_guesses_follow_the_feedback():
    from helpers.wordle.evaluation import same_script, summarize_games

    def game(word, guesses):
        return {"word": word, "guesses": guesses, "valid": 1.0, "consistent": 0.0, "greens_yellows": 1.0,
                "turns": len(guesses), "won": False}

    scripted = [game(w, ["scrag", "drunk"]) for w in ("crane", "slate", "brave")]
    assert same_script(scripted) == {"same_sequence": 1.0, "commonest": ["scrag", "drunk"], "sequences": 1}
    reading = scripted[:1] + [game("slate", ["scrag", "plate"]), game("brave", ["scrag", "grave"])]
    assert same_script(reading)["same_sequence"] == pytest.approx(1 / 3) and same_script(reading)["sequences"] == 3
    evaluation = summarize_games(reading, ["crane", "slate", "brave"])
    assert evaluation.summary()["same_sequence"] == pytest.approx(1 / 3)
    assert "games playing the commonest sequence of guesses" in str(evaluation) and "3 different sequences" in str(evaluation)


def test_summarize_compares_first_and_last_steps():
    def game(step, correct, won, guesses):
        parsed = [g for g in guesses if g]
        return {"step": step, "correct": correct, "won": won,
                "streams": {"correct": correct, "valid": 0.5 * step, "consistent": 0.0, "letters": 0.1}, "turns": len(guesses), "parsed_guesses": len(parsed),
                "repeated_guesses": len(parsed) - len(set(parsed))}

    episodes = [game(0, 0.0, False, ["crane", "crane"]), game(0, 0.1, False, [None]),
                game(1, 0.5, False, ["slate"]), game(2, 1.0, True, ["house", "mouse"])]
    summary = wordle.summarize(episodes)
    assert summary["episodes"] == 4 and summary["steps_with_rollouts"] == 3
    assert summary["win_rate"] == 0.25
    assert summary["repeated_guess_rate"] == pytest.approx(1 / 5)
    assert summary["correct_first"] == pytest.approx(0.05) and summary["correct_last"] == 1.0
    assert summary["valid_first"] == 0.0 and summary["valid_last"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="No games"):
        wordle.summarize([])


def test_held_out_words_never_overlap_training_words():
    from helpers.wordle.evaluation import check_held_out, split_words, wordle_words

    words = wordle_words()
    assert len(words) == 1384 and words == sorted(words)
    train, held = split_words(words, 150)
    assert len(held) == 150 and len(train) == 1234 and not set(train) & set(held)
    assert split_words(words, 150) == (train, held)          # fixed by the seed
    assert split_words(words, 150, seed=1)[1] != held
    with pytest.raises(ValueError, match="n_eval must be between 1 and 1383"):
        split_words(words, 1384)
    with pytest.raises(ValueError, match=r"2 evaluation word\(s\) are also training words \(abbey, acorn\).*split_words"):
        check_held_out(["abbey", "acorn", "actor"], ["abbey", "acorn", "zebra"])


def test_a_rollout_draws_secret_words_only_from_its_list():
    rollout = WordleRollout("http://unused", seed=5, words=["crane", "slate"])
    assert {rollout.word_for(s) for s in range(50)} == {"crane", "slate"}
    assert rollout.word_for(7) == rollout.word_for(7)
    with pytest.raises(ValueError, match="empty `words`"):
        WordleRollout("http://unused", words=[])
    with pytest.raises(ValueError, match=r"1 training word\(s\) are not \('cran'\)"):
        WordleRollout("http://unused", words=["crane", "cran"])


def test_paired_changes_pair_games_word_by_word():
    from helpers.wordle.evaluation import paired_changes, summarize_games

    def games(valid):
        return [{"valid": v, "consistent": 0.0, "greens_yellows": 1.0, "turns": 2, "won": False} for v in valid]

    before = summarize_games(games([0.5] * 20), ["w"] * 20)
    after = summarize_games(games([0.5] * 10 + [1.0] * 10), ["w"] * 20)
    changes = {c.key: c for c in paired_changes(before, after)}
    assert changes["valid"].change == pytest.approx(0.25) and changes["valid"].gained == 10
    assert changes["valid"].resolved and not changes["turns"].resolved
    assert "+25.0 points" in str(changes["valid"])
    other = summarize_games(games([0.5] * 20), ["x"] * 20)
    with pytest.raises(ValueError, match="same words"):
        paired_changes(before, other)
    # the skill bars write the last stage's paired change under each panel (issue 77)
    from helpers.wordle.evaluation import skill_bars

    fig = skill_bars({"before": before, "after GRPO": after})
    assert fig.axes[0].get_xlabel() == f"before -> after GRPO, paired:\n{changes['valid'].points()}"
    assert changes["valid"].points().startswith("+25.0 [")


# ---------------------------------------------------------------------- the scripted teacher
def test_the_scripted_player_reads_the_board_and_stays_consistent():
    from helpers.wordle.teacher import ScriptedPlayer, read_board

    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "You are Playing Wordle."},
                {"role": "assistant", "content": "[slate]"},
                {"role": "user", "content": "You submitted [slate].\nFeedback:\nS L A T E\nX X G X G\nYou have 5 guesses left."}]
    assert read_board(messages) == [("slate", "XXGXG")]
    player = ScriptedPlayer(["slate", "crane", "brave", "shake", "grape"], seed=0)
    for seed in range(10):
        guess = ScriptedPlayer(player.words, seed=seed).reply(messages)
        assert guess in ("[crane]", "[brave]", "[grape]")   # _ _ a _ e without s, l, t
    assert player.reply([{"role": "user", "content": "What is 2 + 2?"}]).startswith("I only play Wordle")
    # each game its own draw: the same game replays identically, different games open differently
    opening = messages[:2]
    assert player.reply(opening, game=7) == player.reply(opening, game=7)
    assert len({player.reply(opening, game=g) for g in range(40)}) == 5   # drawn from every word of its list
    assert len({player.reply(opening) for _ in range(5)}) == 1   # no game seed: one opener, as before


def test_the_scripted_player_draws_from_the_most_informative_words():
    """Its short list: the words whose distinct letters occur in the most candidates; every game draws from it."""
    from helpers.wordle.teacher import ScriptedPlayer, informative

    words = ["slate", "crane", "brave", "shake", "grape", "fuzzy"]
    assert informative(words, 2) == ["brave", "crane"]   # a, e, r and one more: 15, as grape; ties in word order
    assert informative(words, 0) == words and informative(words[:2], 3) == words[:2]
    player = ScriptedPlayer(words, top=2)
    opening = [{"role": "user", "content": "You are Playing Wordle."}]
    assert {player.reply(opening, game=g) for g in range(30)} == {"[brave]", "[crane]"}


@pytest.fixture(scope="module")
def wordle_url(tmp_path_factory):
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "16"},
                     name="textarena", log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server.base_url


@pytest.fixture(scope="module")
def wordle_teacher(tmp_path_factory):
    with LocalServer("helpers.wordle.teacher:create_app", factory=True, name="wordle-teacher",
                     log_dir=tmp_path_factory.mktemp("teacher-logs")) as server:
        yield server


def test_the_teacher_wins_real_games_and_its_rows_are_the_rollouts_tokens(wordle_url, wordle_teacher):
    """Over the OpenAI protocol the local player wins real games; each won game's SFT row is token for token what
    WordleRollout produces when the same replies are played through the server (prompt, guesses, masked feedback)."""
    from helpers.model_folders import resolve_model
    from helpers.rollouts import TemplateView
    from helpers.chain_sum.sft_data import Teacher
    from helpers.wordle.evaluation import split_words, wordle_words
    from helpers.wordle.teacher import collect_games, sft_rows, won_games
    from transformers import AutoTokenizer

    train, held = split_words(wordle_words(), 150)
    games = collect_games(Teacher.endpoint(wordle_teacher.base_url, "wordle-teacher"), wordle_url, train, n_games=12)
    assert all(g["word"] in train for g in games)
    assert sum(g["won"] for g in games) >= 10 and all(g["invalid_moves"] == 0 for g in games)
    openers = {g["messages"][2]["content"] for g in games}   # each game sent its own seed: not one script
    assert len(openers) >= 6, openers
    kept = won_games(games)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    view = TemplateView(tokenizer, {"enable_thinking": False})
    rows = sft_rows(kept[:3], view)

    for game, row in zip(kept[:3], rows):
        replies = iter(m["content"] for m in game["messages"] if m["role"] == "assistant")

        def replay(prompts):
            out = []
            for _ in prompts:
                text = next(replies)
                out.append({"completion_ids": tokenizer(text, add_special_tokens=False)["input_ids"]
                            + [tokenizer.eos_token_id], "text": text})
            return out

        player = WordleRollout(wordle_url)
        try:
            [played] = player.play(view, [wordle.DATASET_PROMPT], [0], [game["word"]], generate=replay)
        finally:
            player.close()
        assert row["input_ids"] == played.prompt_ids + played.completion_ids
        assert row["assistant_masks"] == [0] * len(played.prompt_ids) + played.env_mask
        assert bool(played.result.observation.won)


def test_bad_teachers_stop_with_what_to_set(wordle_url):
    from helpers.servers import free_port
    from helpers.chain_sum.sft_data import NoExamplesError, Teacher, TeacherError
    from helpers.wordle.teacher import collect_games, won_games

    dead = Teacher.endpoint(f"http://127.0.0.1:{free_port()}", "wordle-teacher")
    with pytest.raises(TeacherError, match="did not answer.*TEACHER_URL"):
        collect_games(dead, wordle_url, ["crane"], n_games=1, timeout=5)
    with pytest.raises(NoExamplesError, match="won none of its 2 games.*TEACHER_GAMES"):
        won_games([{"won": False, "invalid_moves": 2}, {"won": True, "invalid_moves": 1}])
    with pytest.raises(ValueError, match="training words"):
        collect_games(dead, wordle_url, [], n_games=1)


def test_the_server_refuses_a_word_list_it_cannot_play(wordle_url):
    from helpers.wordle.evaluation import evaluate_wordle

    with pytest.raises(ValueError, match=r"five-letter words a-z; 1 evaluation word\(s\) are not \('toolong'\).*split_words"):
        evaluate_wordle(None, None, wordle_url, ["crane", "toolong"], player=notebook()["WordleRollout"])
    from textarena_env import TextArenaEnv

    with TextArenaEnv(base_url=wordle_url).sync() as env, pytest.raises(Exception, match="word= must be 5 letters"):
        env.reset(word="toolong")   # what the server itself says to a client that skips that check


# ---------------------------------------------------------------------- real server + real trainer
def make_trainer(tmp_path, rollout, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from helpers.model_folders import resolve_model
    from helpers.rollouts.checks import checked_rewards

    args = dict(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                max_completion_length=8, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                logging_steps=1, chat_template_kwargs={"enable_thinking": False}, seed=0)
    args.update(config)
    return GRPOTrainer(model=resolve_model("tiny"), reward_funcs=checked_rewards(notebook()["reward_funcs"]),
                       train_dataset=Dataset.from_dict({"prompt": [wordle.DATASET_PROMPT] * 8}),
                       rollout_func=rollout, args=GRPOConfig(**args))


@pytest.mark.slow
def test_multi_turn_rollout_output_is_consistent_across_turns(wordle_url, tmp_path):
    from helpers.rollouts.checks import checked_rollout

    rollout = WordleRollout(wordle_url, max_turns=3, seed=100)
    trainer = make_trainer(tmp_path, rollout)
    tokenizer = trainer.processing_class
    try:
        out = checked_rollout(rollout)([wordle.DATASET_PROMPT] * 4, trainer)   # and it keeps TRL's contract
    finally:
        rollout.close()

    keys = {"prompt_ids", "completion_ids", "logprobs", "env_mask", *(f"{k}_reward" for k in STREAMS)}
    assert set(out) == keys and all(len(v) == 4 for v in out.values())
    eos = tokenizer.eos_token_id
    for i in range(4):
        ids, logprobs, mask = out["completion_ids"][i], out["logprobs"][i], out["env_mask"][i]
        assert len(ids) == len(logprobs) == len(mask) > 0
        assert "You are Playing Wordle" in tokenizer.decode(out["prompt_ids"][i])
        assert mask[0] == 1 and mask[-1] == 1  # starts and ends with the model's own tokens
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp, m in zip(logprobs, mask) if m == 1)
        for key in STREAMS:
            assert 0.0 <= out[f"{key}_reward"][i] <= 1.0

    # Every game got past turn 1 (one invalid move never ends a game), so each has environment turns,
    # and each environment segment is the game's reply wrapped as a user turn by the chat template.
    games = rollout.episodes
    assert len(games) == 4 and all(g["turns"] >= 2 for g in games)
    for i in range(4):
        mask, ids = out["env_mask"][i], out["completion_ids"][i]
        segments, start = [], None
        for j, m in enumerate(mask + [1]):
            if m == 0 and start is None:
                start = j
            elif m == 1 and start is not None:
                segments.append(ids[start:j])
                start = None
        assert len(segments) == games[i]["turns"] - 1
        for segment in segments:
            text = tokenizer.decode(segment)
            assert "<|im_start|>user" in text and text.rstrip().endswith("</think>")
            assert "You submitted" in text or "invalid move" in text
    # one GRPO group = one secret word
    assert [g["seed"] for g in games] == [100, 100, 101, 101]
    assert rollout.next_seed == 102


@pytest.mark.slow
def test_the_held_out_evaluation_plays_with_the_notebooks_rollout(wordle_url):
    """evaluate_wordle plays every game with the rollout class it is given (the notebook's WordleRollout), greedy:
    the same model plays the same games twice, and the games it measures are the ones that class played."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.model_folders import resolve_model
    from helpers.wordle.evaluation import evaluate_wordle

    path = resolve_model("tiny")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    kwargs = dict(max_turns=2, max_new_tokens=6, chat_template_kwargs={"enable_thinking": False})
    played = []

    class Watched(notebook()["WordleRollout"]):
        def play(self, *args, **kw):
            games = super().play(*args, **kw)
            played.extend(games)
            return games

    result = evaluate_wordle(model, tokenizer, wordle_url, ["crane", "slate"], player=Watched, **kwargs)
    assert result.n == 2 and [g["word"] for g in result.games] == ["crane", "slate"]
    assert [g.word for g in played] == ["crane", "slate"] and all(1 <= g["turns"] <= 2 for g in result.games)
    assert all(list(g["streams"]) == list(STREAMS) for g in result.games)
    for game in played:   # the rollout's layout: the model's reply first, one mask value and logprob per token
        assert len(game.completion_ids) == len(game.env_mask) == len(game.logprobs) and game.env_mask[0] == 1
    again = evaluate_wordle(model, tokenizer, wordle_url, ["crane", "slate"], player=notebook()["WordleRollout"],
                            **kwargs)
    assert [g["guesses"] for g in again.games] == [g["guesses"] for g in result.games]


@pytest.mark.slow
def test_env_turn_ids_follow_the_chat_template(wordle_url, tmp_path):
    from helpers.rollouts import env_turn_ids, tokenizer_of

    trainer = make_trainer(tmp_path, WordleRollout(wordle_url))
    ids = env_turn_ids(trainer, "Feedback:\nC R A N E\nX G X X X")
    assert tokenizer_of(trainer).decode(ids) == (
        "\n<|im_start|>user\nFeedback:\nC R A N E\nX G X X X<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.slow
def test_generate_rollout_completions_returns_the_sampling_logprobs(wordle_url, tmp_path):
    """Without vLLM: logprobs equal the model's own log-softmax (temperature 1, no top-k)."""
    import torch

    from helpers.rollouts import generate_rollout_completions

    trainer = make_trainer(tmp_path, WordleRollout(wordle_url), temperature=1.0, top_k=0)
    tokenizer = trainer.processing_class
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=False) for q in ("Guess a word.", "Hi")]
    outputs = generate_rollout_completions(trainer, prompts, max_new_tokens=6)
    assert len(outputs) == 2
    for out in outputs:
        assert 0 < len(out["completion_ids"]) == len(out["logprobs"]) <= 6
        assert out["text"] == tokenizer.decode(out["completion_ids"], skip_special_tokens=True)
        ids = torch.tensor([out["prompt_ids"] + out["completion_ids"]])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(out["prompt_ids"]) - 1:-1].float()
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out["completion_ids"])[:, None])[:, 0]
        assert torch.allclose(torch.tensor(out["logprobs"]), expected, atol=1e-3)


@pytest.mark.notebook
def test_notebook_runs_tiny(notebook_runner):
    metrics, executed = notebook_runner("03_wordle_rollout_func")
    assert metrics["profile"] == "tiny" and metrics["generation_mode"].startswith("transformers")
    assert metrics["episodes"] == 2 * 4  # 2 steps x 4 games
    assert metrics["env_episodes"]["rollouts"] >= 2 * 4 and metrics["env_episodes"]["failed"] == 0   # none lost
    assert metrics["rollout_lengths_consistent"] is True
    assert metrics["activation_checkpointing"] is False  # CPU: TRL's default would only cost time
    assert metrics["model_dtype"] == "torch.float32"   # a loaded fp32 model, whatever the precision
    assert_precision_recorded(metrics, cell_outputs_text(executed))
    for key in ("correct", "valid", "consistent", "letters"):
        for when in ("first", "last"):
            assert 0.0 <= metrics[f"{key}_{when}"] <= 1.0
    for key in ("win_rate", "repeated_guess_rate", "guess_parse_rate"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["mean_turns"] >= 2  # one invalid move never ends a game
    assert metrics["echo_steps"] == 1 and metrics["echo_env_reward_first"] is not None
    assert metrics["echo_env_rewards_seen"] > 0   # env_reward reached the reward function through rollout_func
    assert metrics["factory_steps"] == 1
    # the warm start: the local teacher played training words, won, and its games were trained on
    assert metrics["warm_start"] is True and metrics["teacher_games"] == 8 and 6 <= metrics["teacher_kept"] <= 8
    assert metrics["sft_seconds"] > 0
    # the held-out evaluation: the same 6 words, never training words, at three stages, each skill with its interval
    assert metrics["eval_words"] == 6 and metrics["train_words"] == 1384 - 6
    for stage in ("base", "warm", "after"):
        held = metrics["held_out"][stage]
        assert held["n"] == 6
        for key in ("valid", "consistent", "won"):
            lo, hi = held[key + "_ci"]
            assert 0.0 <= held[key] <= 1.0 and lo <= held[key] <= hi
        assert held["turns"] >= 1   # every game played at least one move
    for change in ("warm_change", "grpo_change"):
        assert set(metrics[change]) == {"valid", "consistent", "greens_yellows", "turns", "won"}
        for value in metrics[change].values():
            lo, hi = value["ci"]
            assert lo <= value["change"] <= hi
    expected = metrics["held_out"]["after"]["valid"] - metrics["held_out"]["warm"]["valid"]
    assert metrics["grpo_change"]["valid"]["change"] == pytest.approx(expected)   # paired means = difference of means
    text = cell_outputs_text(executed)
    assert "6 held-out games, greedy:" in text and "after GRPO - warm start, on the same held-out words:" in text
    # one of the environment_factory model's own rollouts, shown whole (helpers.reporting.show), and its tool calls counted
    assert "One rollout of the last step:\nprompt    │ Play Wordle" in text and "\ntool call │ " in text
    assert metrics["factory_tool_call_frequency"] >= 0.0   # tool calls per rollout, as the notebook printed
    assert "reward    │ factory_correct +" in text and "factory_greens +" in text
    # one rollout_func game token by token: the model's guesses trained, the game's feedback masked, template checked
    assert "MODEL (trained), " in text and "ENV (masked), " in text and "You submitted" in text
    assert "✓ the chat template is prefix-preserving (feedback turns append" in text
    assert "✓ env_mask has one 0/1 per completion token" in text
    # the watch: the probe (valid guesses in held-out games) at the start, halfway and the end; the recorded
    # curves; the valid stream placed against the stored reference runs
    watch = metrics["watch"]
    assert [step for step, _ in watch["probe"]] == [0, 1, 2] and all(0 <= v <= 1 for _, v in watch["probe"])
    assert all(f"[watch] ALARM {kind}" in text for kind in watch["alarms"])
    assert metrics["curves"]["step"] == [1, 2] and len(metrics["curves"]["rewards/reward_valid/mean"]) == 2
    # one loss pass a step; skipped only where every group of the step scored alike (no gradient)
    zero_std = metrics["curves"]["frac_reward_zero_std"]
    assert metrics["loss_passes"] == 2 and 0 <= metrics["loss_passes_skipped"] <= sum(z == 1.0 for z in zero_std)
    assert f"loss passes skipped: {metrics['loss_passes_skipped']} of 2" in text
    assert "valid stream" in text
