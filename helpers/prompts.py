"""Prompts shared by notebooks 01 and 02, so an SFT checkpoint is a drop-in start for GRPO."""

SYSTEM_PROMPT = """You are a careful arithmetic assistant.
You will be given a chain of integer additions. Compute the result and submit it as a single number.
Rules:
1. Read the question carefully.
2. Use the tool `answer` exactly once with your final number.
3. The answer must be a single integer with no units or explanation.
"""

# chain_sum difficulty used by the seeds: sums of 2-3 two-digit numbers.
CHAIN_SUM_CONFIG = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}


def answer(answer: str) -> str:
    """Submit the final answer for the current question.

    Args:
        answer: The agent's answer (will be parsed as a number server-side).
    """
    return answer


# The same tool as the notebooks' `ReasoningGymTrainEnv.answer` (same name, signature, docstring): the
# schema shown to the model is built from these, so evaluation prompts match training prompts.
answer_tool = answer
