"""A local Wordle teacher and the warm-start data it plays: notebook 03's SFT before GRPO.

A 135M model that has never seen Wordle answers in the wrong format and ignores the feedback, so GRPO's
groups all score alike and there is nothing to learn from. As in notebooks 02 and 04, a teacher's games
give it the format and a habit worth sharpening first. Offline there is no strong LLM to ask, so a
**scripted player stands in for it**: it reads the game's feedback from the conversation and guesses a
word, from TextArena's own list, that is consistent with every row so far (greens kept, yellows moved,
greys dropped). It is served like the other local teachers (`helpers.chain_sum.local_teacher`), over the OpenAI
chat-completions protocol, so any real model endpoint can replace it:

    with LocalServer("helpers.wordle.teacher:create_app", factory=True, name="wordle-teacher") as teacher:
        games = collect_games(Teacher.endpoint(teacher.base_url, TEACHER_MODEL), env_url, train_words, n_games=300)
    rows = sft_rows(won_games(games), TemplateView(tokenizer))

Each game becomes one SFT row in exactly the token layout notebook 03's `WordleRollout` trains on: the
prompt, then each guess (trained) and the game's reply as a user turn (masked).

Each game is its own draw: `collect_games` sends a per-game `seed` with every request (the OpenAI API's own
`seed` field), and the player draws its opener and each consistent word with it. A teacher that opened every game
with the same word taught the warm start one script, whose GRPO groups then played alike and gave nothing to learn
from (docs/measurements.md#notebook-03).

Settings (environment variables, read when the app is created): WORDLE_TEACHER_SEED (which consistent
word it picks, default 0), WORDLE_TEACHER_OPENER (its first guess; default "" = a seeded draw),
WORDLE_TEACHER_TOP (draw only from that many of the most informative consistent words; default 0 = from all
of them: a short list taught the warm start a strong script whose later GRPO guesses could only be poorer words,
docs/measurements.md#notebook-03).
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from helpers.chain_sum.local_teacher import completion_response
from helpers.chain_sum.sft_data import NoExamplesError, Teacher, TeacherError
from helpers.compute.processes import one_server
from helpers.rollouts import chat_prompt_ids, env_turn_ids, tokenizer_of
from helpers.servers import LocalServer
from helpers.wordle.evaluation import wordle_words
from helpers.wordle.game import BRACKETED_WORD, DATASET_PROMPT, SYSTEM_PROMPT, guess_message, is_consistent

DEFAULT_MODEL_NAME = "wordle-teacher"

# "S L A T E\nX X G X G": a guessed word spelt out, then its feedback row, as TextArena renders the board
_BOARD_ROW = re.compile(r"((?:[A-Z] ){4}[A-Z])\s*\n\s*((?:[GYX] ){4}[GYX])")


def read_board(messages: list[dict]) -> list[tuple[str, str]]:
    """The (guess, feedback) rows the game has shown in a conversation, oldest first, each once."""
    rows: list[tuple[str, str]] = []
    for message in messages:
        if message.get("role") != "user" or not isinstance(message.get("content"), str):
            continue
        for letters, feedback in _BOARD_ROW.findall(message["content"]):
            row = (letters.replace(" ", "").lower(), feedback.replace(" ", ""))
            if row not in rows:
                rows.append(row)
    return rows


def guessed_words(messages: list[dict]) -> set[str]:
    """Every word the assistant has already sent (valid or not)."""
    return {m.lower() for message in messages if message.get("role") == "assistant"
            for m in BRACKETED_WORD.findall(message.get("content") or "")}


def informative(candidates: list[str], top: int) -> list[str]:
    """The `top` candidates whose distinct letters occur in the most candidates (a guess that tells the most
    about the rest), ties in word order: a strong player's short list. top <= 0: every candidate."""
    if top <= 0 or len(candidates) <= top:
        return candidates
    from collections import Counter

    counts = Counter(c for w in candidates for c in set(w))
    return sorted(candidates, key=lambda w: (-sum(counts[c] for c in set(w)), w))[:top]


class ScriptedPlayer:
    """Guesses a word consistent with every feedback row so far, drawn (seeded) from all of them, or from the
    `top` most informative ones (`informative`) when top > 0.

    The draw depends only on (seed, the game's own seed, the rows so far), so a game replays identically and
    two games differ from their first guess on."""

    def __init__(self, words: list[str], seed: int = 0, opener: str | None = None, top: int = 0):
        if not words:
            raise ValueError("ScriptedPlayer needs a word list (e.g. helpers.wordle.evaluation.wordle_words()).")
        self.words = sorted(words)
        self.seed = seed
        self.opener = opener
        self.top = top

    def next_guess(self, rows: list[tuple[str, str]], tried: set[str] = frozenset(), game: int | None = None) -> str:
        if not rows and self.opener:
            return self.opener
        candidates = [w for w in self.words if w not in tried and is_consistent(w, rows)]
        if not candidates:   # the secret is not in our list: any untried word still earns feedback
            candidates = [w for w in self.words if w not in tried] or self.words
        key = f"{self.seed}|{'' if game is None else game}|" + "|".join(f"{g}:{f}" for g, f in rows)
        return random.Random(key).choice(informative(candidates, self.top))

    def reply(self, messages: list[dict], game: int | None = None) -> str:
        """The assistant's next message in a Wordle conversation: one bracketed guess. `game`: the request's
        `seed`, which makes each game its own draw."""
        if not any("Wordle" in (m.get("content") or "") for m in messages if isinstance(m.get("content"), str)):
            return "I only play Wordle: send the game's instructions and feedback."
        return f"[{self.next_guess(read_board(messages), guessed_words(messages), game=game)}]"


def create_app(player: ScriptedPlayer | None = None, model_name: str | None = None):
    """The FastAPI app: POST /v1/chat/completions, GET /v1/models, GET /health."""
    player = player or ScriptedPlayer(wordle_words(), seed=int(os.environ.get("WORDLE_TEACHER_SEED", "0")),
                                      opener=os.environ.get("WORDLE_TEACHER_OPENER", "").strip().lower() or None,
                                      top=int(os.environ.get("WORDLE_TEACHER_TOP", "0")))
    model_name = model_name or os.environ.get("TEACHER_MODEL", DEFAULT_MODEL_NAME)
    app = FastAPI(title="Local Wordle teacher (a scripted player, OpenAI-compatible stand-in)")
    replies = {"n": 0}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "seed": player.seed, "words": len(player.words),
                "opener": player.opener, "replies": replies["n"]}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "local"}]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise HTTPException(400, f"The request body is not JSON: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) \
                or not all(isinstance(m, dict) for m in body["messages"]):
            raise HTTPException(400, "Expected a JSON object with a `messages` list of message objects.")
        if body.get("stream"):
            raise HTTPException(400, "This local teacher does not stream; send stream=false.")
        game = body.get("seed")
        if game is not None and not isinstance(game, int):
            raise HTTPException(400, f"`seed` must be an integer, not {game!r}.")
        replies["n"] += 1
        message = {"role": "assistant", "content": player.reply(body["messages"], game=game)}
        return completion_response(message, body, model_name)

    return app


def collect_games(teacher, env_url: str, words: list[str], *, n_games: int, seed: int = 0, max_turns: int = 6,
                  system_prompt: str | None = None, prompt: str | None = None, timeout: float = 60.0) -> list[dict]:
    """Let `teacher` (a `helpers.chain_sum.sft_data.Teacher`: the local stand-in or any OpenAI-compatible endpoint) play
    `n_games` games through the TextArena server, secret words drawn from `words` with `seed`.

    Each game: {"word", "messages" (the conversation, OpenAI format), "won", "env_prompt" (the game's instructions),
    "last_message" (the game's answer to the last guess), "turns", "reward", "invalid_moves"}.
    Every request of a game carries that game's own `seed` (the OpenAI API's field): the local player draws each
    game apart with it, a real model's endpoint may use it or not. Raises TeacherError naming the endpoint when it
    does not answer."""
    from textarena_env import TextArenaAction, TextArenaEnv

    if not words:
        raise ValueError("collect_games needs training words to draw secrets from (the training side of split_words).")
    client = teacher.chat_client().with_options(timeout=timeout, max_retries=1)
    system_prompt = system_prompt or SYSTEM_PROMPT
    rng = random.Random(seed)
    games = []
    with TextArenaEnv(base_url=env_url).sync() as env:
        for _ in range(n_games):
            word = rng.choice(words)
            game_seed = rng.randrange(2**31)
            result = env.reset(word=word)
            env_prompt = result.observation.prompt
            user = f"{prompt or DATASET_PROMPT}\n\n{env_prompt}".strip()
            messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]
            invalid = 0
            for turn in range(max_turns):
                try:
                    answer = client.chat.completions.create(model=teacher.model, messages=messages, max_tokens=32,
                                                            seed=game_seed)
                except Exception as exc:
                    raise TeacherError(f"The Wordle teacher ({teacher.describe()}) did not answer: "
                                       f"{type(exc).__name__}: {exc}. Is it running? Set TEACHER_URL to a live "
                                       "OpenAI-compatible endpoint, or None for the local scripted player.") from exc
                text = (answer.choices[0].message.content or "").strip()
                messages.append({"role": "assistant", "content": text})
                result = env.step(TextArenaAction(message=guess_message(text)))
                invalid += int(result.observation.invalid_move)
                if result.done or turn == max_turns - 1:
                    break
                messages.append({"role": "user", "content": result.observation.last_message})
            games.append({"word": word, "messages": messages, "won": bool(result.observation.won),
                          "env_prompt": env_prompt, "last_message": result.observation.last_message,
                          "turns": sum(m["role"] == "assistant" for m in messages),
                          "reward": float(result.reward or 0.0), "invalid_moves": invalid})
    return games


def won_games(games: list[dict]) -> list[dict]:
    """The reward filter: games the teacher won without an invalid move. Raises when none are left, naming
    what to change, because SFT on nothing would silently train nothing."""
    kept = [g for g in games if g["won"] and g["invalid_moves"] == 0]
    if not kept:
        raise NoExamplesError(
            f"The teacher won none of its {len(games)} games without an invalid move, so there is nothing to "
            "imitate. Check that it answers with one bracketed five-letter word per turn (print one game's "
            "messages), raise TEACHER_GAMES, or point TEACHER_URL at a stronger player.")
    return kept


def sft_rows(games: list[dict], view) -> list[dict]:
    """One pre-tokenized SFT row per game, {"input_ids", "assistant_masks"}, laid out exactly as notebook 03's
    `WordleRollout` lays out a game: prompt (masked), each reply + EOS (trained), the game's replies as user turns
    via `env_turn_ids` (masked). `view`: the trainer, or a `helpers.rollouts.TemplateView`."""
    tokenizer = tokenizer_of(view)
    rows = []
    for game in games:
        messages = game["messages"]
        ids = chat_prompt_ids(view, messages[:2])
        mask = [0] * len(ids)
        for message in messages[2:]:
            if message["role"] == "assistant":
                reply = tokenizer(message["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                ids, mask = ids + reply, mask + [1] * len(reply)
            else:
                turn = env_turn_ids(view, message["content"])
                ids, mask = ids + turn, mask + [0] * len(turn)
        rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows


def warm_start_games(settings, teacher_url: str | None, env_url: str, train_words: list[str]):
    """(games, kept games, server): the warm start's data. The teacher (`teacher_url`, any OpenAI-compatible
    endpoint serving `settings.teacher_model`; None: the local scripted player, started here) plays
    `settings.teacher_games` whole games on training words; the reward filter (`won_games`) keeps those won without
    an invalid move and stops, with what to change, when none are left. Prints the tally and one kept game.
    WARM_START off: nothing is played, ([], [], None). Stop `server` (None unless started here) when done.
    Several processes (`accelerate launch`): the main one plays, every process gets the games (server None there)."""
    (games, kept), server = one_server(_warm_start_games, settings, teacher_url, env_url, train_words)
    return games, kept, server


def _warm_start_games(settings, teacher_url: str | None, env_url: str, train_words: list[str]):
    if not settings.warm_start:
        print("WARM_START is off: GRPO starts from the model as it is.")
        return ([], []), None
    server = None
    if teacher_url:
        teacher = Teacher.endpoint(teacher_url, settings.teacher_model)
    else:
        server = LocalServer("helpers.wordle.teacher:create_app", factory=True, name="wordle-teacher").start()
        teacher = Teacher.endpoint(server.base_url, settings.teacher_model)
    # the teacher plays whole games (six guesses), whatever MAX_TURNS the rollout uses
    games = collect_games(teacher, env_url, train_words, n_games=settings.teacher_games, seed=settings.seed)
    kept = won_games(games)
    print(f"{teacher.describe()} played {len(games)} games: won {sum(g['won'] for g in games)}, "
          f"{sum(g['turns'] for g in games) / len(games):.1f} guesses a game; "
          f"{len(kept)} kept (won without an invalid move)")
    game = kept[0]
    print(f"one game (secret {game['word']!r}):")
    for message in game["messages"][2:]:
        print("  " + ("guess: " if message["role"] == "assistant" else "game:  ") + message["content"].replace("\n", " | "))
    return (games, kept), server
