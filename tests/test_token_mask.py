"""helpers.reporting.token_mask: which tokens of a multi-turn rollout are trained, shown, with the checks behind it."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from helpers.model_folders import resolve_model
from helpers.prompts import answer
from helpers.reporting.token_mask import mask_from_ids, mask_from_messages, prefix_preserving, tool_calls_parse

CALL = {"type": "function", "function": {"name": "answer", "arguments": {"answer": "42"}}}
ROLLOUT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12 + 30?"},
           {"role": "assistant", "content": "", "tool_calls": [CALL]},
           {"role": "tool", "name": "answer", "content": "score=1.0 correct=42"},
           {"role": "assistant", "content": "Done."}]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("tiny-toolcall"))   # Qwen3's chat template


def test_a_tool_rollout_splits_into_model_env_and_prompt_tokens_under_the_trainers_template(tokenizer):
    from trl.chat_template_utils import get_training_chat_template

    mask = mask_from_messages(tokenizer, ROLLOUT, n_prompt=2, tools=[answer],
                              chat_template=get_training_chat_template(tokenizer))
    kinds = [kind for kind, _, _ in mask.segments]
    assert kinds == ["prompt", "model", "env", "model"]
    model_text = [text for kind, text, _ in mask.segments if kind == "model"]
    env_text = next(text for kind, text, _ in mask.segments if kind == "env")
    assert '"answer": "42"' in model_text[0] and "Done." in model_text[1]
    assert "score=1.0 correct=42" in env_text and "<tool_response>" in env_text   # the env's reply, masked
    counts = mask.counts()
    chat = tokenizer.apply_chat_template(ROLLOUT, tools=[answer], tokenize=False,
                                         chat_template=get_training_chat_template(tokenizer))
    # every token of the rollout counted once: the chat up to the model's last end-of-turn token, where it stopped
    assert "".join(text for _, text, _ in mask.segments) == chat[:chat.rindex(tokenizer.eos_token) + len(tokenizer.eos_token)]
    assert all(n > 0 for n in counts.values())
    assert all(mask.checks.values()), mask.checks
    assert "✓ the chat template is prefix-preserving" in str(mask) and "ENV (masked)" in str(mask)
    page = mask._repr_html_()
    assert page.count("<span") >= 4 + 3 and "#c8f0cf" in page and "&lt;tool_response&gt;" in page


def test_qwen3s_own_template_is_flagged_not_prefix_preserving(tokenizer):
    """Qwen3's stock template renders an earlier assistant turn differently once more turns follow (it drops the
    empty thinking block), so turn-by-turn token counts would be wrong: the check says so (TRL swaps in a
    training template for exactly this reason)."""
    mask = mask_from_messages(tokenizer, ROLLOUT, n_prompt=2, tools=[answer])
    assert not mask.checks["the chat template is prefix-preserving (each turn's text stays as it was)"]
    assert "✗ the chat template is prefix-preserving" in str(mask)
    from trl.chat_template_utils import get_training_chat_template

    assert prefix_preserving(tokenizer, get_training_chat_template(tokenizer))   # what notebook 03's rollouts use


def test_a_rollout_funcs_own_mask_and_bad_calls(tokenizer):
    prompt = tokenizer.encode("Guess a word.")
    guess, feedback = tokenizer.encode(" [crane]"), tokenizer.encode(" X Y G X X")
    mask = mask_from_ids(tokenizer, prompt, guess + feedback + guess, [1] * len(guess) + [0] * len(feedback) + [1] * len(guess))
    assert [k for k, _, _ in mask.segments] == ["prompt", "model", "env", "model"]
    assert mask.counts() == {"prompt": len(prompt), "model": 2 * len(guess), "env": len(feedback)}
    with pytest.raises(ValueError, match="differ in length"):
        mask_from_ids(tokenizer, prompt, guess, [1])
    assert not tool_calls_parse({"role": "assistant", "content": "<tool_call>{not json}</tool_call>"})
    assert tool_calls_parse({"role": "assistant", "content": '<tool_call>{"name": "answer", "arguments": {}}</tool_call>'})


def test_the_trainers_template_kwargs_put_the_empty_thinking_block_in_the_prompt(tokenizer):
    """With enable_thinking=False (notebook 01's chat_template_kwargs) Qwen3's generation prompt already holds
    `<think>\\n\\n</think>`: the model did not write it, so it must not count as trained."""
    from trl.chat_template_utils import get_training_chat_template

    kwargs = dict(n_prompt=2, tools=[answer], chat_template=get_training_chat_template(tokenizer))
    plain = mask_from_messages(tokenizer, ROLLOUT[:4], **kwargs)
    no_thinking = mask_from_messages(tokenizer, ROLLOUT[:4], template_kwargs={"enable_thinking": False}, **kwargs)
    first_model = lambda mask: next(text for kind, text, _ in mask.segments if kind == "model")   # noqa: E731
    assert "<think>" in first_model(plain) and "<think>" not in first_model(no_thinking)
    assert "</think>" in no_thinking.segments[0][1] and all(no_thinking.checks.values())


@pytest.mark.parametrize("template_kwargs", [{}, {"enable_thinking": False}])
def test_the_layout_is_the_one_trl_builds_when_the_model_writes_before_its_call(tokenizer, template_kwargs):
    """Notebook 01's rollouts: working text, then the call. The tokens of the tool turn are exactly those TRL 1.16
    appends after the model's end-of-turn token (`GRPOTrainer._get_tool_suffix_ids`, called on a stand-in for the
    trainer holding the attributes it reads), and the model's tokens are its own text, not merged with the prompt's
    trailing newlines (as a whole-chat tokenization would: the check failed on every cpu run before)."""
    from types import SimpleNamespace

    from trl import GRPOTrainer
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tokenizer)
    rollout = [*ROLLOUT[:2], {"role": "assistant", "content": "tens 1 + 3 = 4, ones 2 + 0 = 2\n", "tool_calls": [CALL]},
               *ROLLOUT[3:]]
    mask = mask_from_messages(tokenizer, rollout, n_prompt=2, tools=[answer], chat_template=template,
                              template_kwargs=template_kwargs)
    assert all(mask.checks.values()), mask.checks
    assert [kind for kind, _, _ in mask.segments] == ["prompt", "model", "env", "model"]
    model_text = mask.segments[1][1]
    assert model_text.split("</think>")[-1].lstrip().startswith("tens 1 + 3 = 4") and model_text.endswith(tokenizer.eos_token)
    assert ("<think>" in model_text) == ("enable_thinking" not in template_kwargs)   # else the prompt holds it
    trainer = SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=template,
                              chat_template_kwargs=template_kwargs, _is_vlm=False)
    trl_suffix = GRPOTrainer._get_tool_suffix_ids(trainer, [rollout[3]])
    env_kind, env_text, env_tokens = mask.segments[2]
    assert env_tokens == len(trl_suffix) and tokenizer.decode(trl_suffix) == env_text
