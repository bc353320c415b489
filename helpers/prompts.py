"""Every system prompt the notebooks show a model, in one place.

    SYSTEM_PROMPT           chain_sum with the `answer` tool: notebooks 01, 02 and 04, the evaluation and
                            the `tiny-toolcall` model all use it, so an SFT checkpoint is a drop-in start
                            for GRPO (it sees at training time the prompt it was taught on)
    GENERIC_SYSTEM_PROMPT   any other reasoning_gym dataset (notebook 01's DATASET_NAME)
    WORDLE_SYSTEM_PROMPT    notebook 03's Wordle player
"""

SYSTEM_PROMPT = """You are a careful arithmetic assistant.
You will be given a chain of integer additions. Compute the result and submit it as a single number.
Rules:
1. Read the question carefully.
2. Use the tool `answer` exactly once with your final number.
3. The answer must be a single integer with no units or explanation.
"""

GENERIC_SYSTEM_PROMPT = """You are a careful reasoning assistant.
You will be given a problem. Solve it and submit your final answer.
Rules:
1. Read the question carefully.
2. Use the tool `answer` exactly once with your final answer.
3. The answer must be only the final answer, with no explanation.
"""

WORDLE_SYSTEM_PROMPT = """You are an expert Wordle player. Reply with your guess only: one real five-letter English word \
in square brackets.
Example reply: [crane]
Feedback after each guess: G = right letter, right spot; Y = in the word, wrong spot; X = not in the word. \
Use it, and never repeat a guess."""

# chain_sum difficulty of the original TRL/OpenEnv tutorials: sums of 2-3 two-digit numbers.
CHAIN_SUM_CONFIG = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}


def system_prompt_for(dataset_name: str) -> str:
    """The shared chain_sum SYSTEM_PROMPT (what notebook 02's checkpoint saw), else the generic one."""
    return SYSTEM_PROMPT if dataset_name == "chain_sum" else GENERIC_SYSTEM_PROMPT


def answer(answer: str) -> str:
    """Submit the final answer for the current question.

    Args:
        answer: The agent's answer (will be parsed as a number server-side).
    """
    return answer


# The same tool as the notebooks' `ReasoningGymTrainEnv.answer` (same name, signature, docstring): the
# schema shown to the model is built from these, so evaluation prompts match training prompts.
answer_tool = answer
