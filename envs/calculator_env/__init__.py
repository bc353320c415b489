"""calculator_env: an OpenReward (ORS) environment with two tools, served by `openreward`'s own server.

Each task is an integer arithmetic question. The model may call `calculate(expression)` as often as
it likes (the tool answers, but grants no reward) and must finish with `answer(answer)`, which the
environment grades: reward 1.0 for the right integer, 0.0 otherwise, and `finished=True`.

    from calculator_env import CalculatorEnv, make_task, true_answer
    python -m calculator_env.server --port 8080      # serve it (or helpers.openreward.local)

Tasks are deterministic per (split, index); the answer never leaves the server.
"""

from calculator_env.tasks import SPLIT_SIZES, make_task, safe_eval, true_answer
from calculator_env.environment import CalculatorEnv

__all__ = ["CalculatorEnv", "SPLIT_SIZES", "make_task", "safe_eval", "true_answer"]
