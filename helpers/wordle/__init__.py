"""Notebook 03's Wordle: the game's rules and sessions (helpers/wordle/game.py, re-exported here, so a cell reads
`wordle.extract_guess`), the held-out evaluation (evaluation.py), the teacher (teacher.py) and the notebook's
plumbing (plumbing.py)."""

from helpers.wordle.game import (  # noqa: F401
    BRACKETED_WORD, DATASET_PROMPT, SYSTEM_PROMPT, EpisodeFailed, Game, Move, Sessions, check_words, extract_guess,
    feedback_counts, feedback_pattern, game_record, game_skills, guess_message, is_consistent, prompt_text, summarize,
    training_words, turn_rewards)
