"""Custom `rollout_func`s: generation and token bookkeeping (helpers/rollouts/completions.py) and the checks that
name what a rollout, a reward or an environment got wrong (helpers/rollouts/checks.py)."""

from helpers.rollouts.completions import (  # noqa: F401
    TemplateView, chat_prompt_ids, chat_template_of, describe_rollout, env_turn_ids, generate_rollout_completions,
    tokenizer_of)
