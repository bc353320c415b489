"""Generation and token bookkeeping for custom `rollout_func`s (TRL 1.16).

TRL's seed tutorials call `trl.experimental.openenv.generate_rollout_completions(trainer, prompts)`.
That helper was removed in TRL 1.9 (and it always needed vLLM). `generate_rollout_completions`
below does the same job for both set-ups:

- `use_vllm=True`: the trainer's own vLLM (colocate engine or `trl vllm-serve` server), which
  the trainer keeps in sync with the training weights before each rollout;
- `use_vllm=False` (CPU, small GPUs): `model.generate` on the trainer's model with the trainer's
  sampling settings (temperature, top_k, top_p, max_completion_length).

Either way each prompt gets one completion and the log-probability of every sampled token.

For multi-turn rollouts, `env_turn_ids` gives the tokens the chat template puts between one
assistant reply and the next (the environment's message as a user turn + the next assistant
header). They belong in `completion_ids` with `env_mask` 0, so the loss skips them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from helpers.compute.generation import generate_shared


@dataclass
class TemplateView:
    """What the rollout helpers below read from a trainer (its tokenizer and chat-template kwargs), without
    one: the held-out evaluation and the SFT rows tokenize games with it exactly as the rollout does."""

    processing_class: Any
    chat_template_kwargs: dict = field(default_factory=dict)
    chat_template: str | None = None   # None: the prefix-preserving template is found as for a trainer


def tokenizer_of(trainer):
    """The text tokenizer behind the trainer's processing_class (a processor wraps one)."""
    processing_class = trainer.processing_class
    return getattr(processing_class, "tokenizer", processing_class)


def chat_template_of(trainer) -> str | None:
    """A prefix-preserving chat template for multi-turn rollouts (None: the tokenizer's own is fine).

    Qwen3's stock template re-renders earlier assistant turns differently once a new user turn
    follows, so tokens of turn 1 would not be a prefix of turn 2's prompt. TRL ships training
    variants (e.g. qwen3_training.jinja) that fix this; the trainer swaps them in for tool calling,
    and we do the same here.
    """
    if getattr(trainer, "chat_template", None):
        return trainer.chat_template
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    tokenizer = tokenizer_of(trainer)
    if is_chat_template_prefix_preserving(tokenizer):
        return None
    return get_training_chat_template(tokenizer)


def chat_prompt_ids(trainer, messages: list[dict]) -> list[int]:
    """Token ids of `messages` rendered with the generation prompt (assistant header) appended."""
    return tokenizer_of(trainer).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False,
        chat_template=chat_template_of(trainer), **(trainer.chat_template_kwargs or {}),
    )


def env_turn_ids(trainer, content: str) -> list[int]:
    """Tokens that follow an assistant reply (ending in EOS) when the environment answers `content`.

    Found the way TRL does it for tool results: render a dummy exchange with and without the
    extra user turn and keep the difference, so it is right for any chat template.
    """
    tokenizer = tokenizer_of(trainer)
    kwargs = dict(tokenize=True, return_dict=False, chat_template=chat_template_of(trainer),
                  **(trainer.chat_template_kwargs or {}))
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **kwargs)
    full = tokenizer.apply_chat_template(dummy + [{"role": "user", "content": content}],
                                         add_generation_prompt=True, **kwargs)
    eos = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if eos:  # cut after the EOS that closes the reply (templates add "\n" after it)
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("The chat template is not prefix-preserving; pass a training template (see chat_template_of).")
    return full[len(prefix):]


def _as_ids(trainer, prompts: list) -> list[list[int]]:
    tokenizer = tokenizer_of(trainer)
    return [
        list(p) if not isinstance(p, str) else tokenizer(p, add_special_tokens=False)["input_ids"]
        for p in prompts
    ]


def generate_rollout_completions(trainer, prompts: list, *, max_new_tokens: int | None = None) -> list[dict[str, Any]]:
    """One sampled completion per prompt, with the trainer's model and sampling settings.

    Args:
        trainer: the running GRPOTrainer (rollout_func's second argument).
        prompts: texts with the chat template already applied, or lists of token ids.
        max_new_tokens: tokens per completion; default the trainer's max_completion_length.

    Returns:
        One dict per prompt: prompt_ids, completion_ids (up to and including EOS),
        logprobs (one per completion token, under the sampling distribution), text.
    """
    prompt_ids = _as_ids(trainer, prompts)
    if not prompt_ids:
        return []
    if trainer.args.use_vllm:
        completion_ids, logprobs = _generate_vllm(trainer, prompt_ids, max_new_tokens)
    else:
        completion_ids, logprobs = _generate_transformers(trainer, prompt_ids, max_new_tokens)
    tokenizer = tokenizer_of(trainer)
    return [
        {"prompt_ids": p, "completion_ids": c, "logprobs": lp,
         "text": tokenizer.decode(c, skip_special_tokens=True)}
        for p, c, lp in zip(prompt_ids, completion_ids, logprobs, strict=True)
    ]


def _generate_vllm(trainer, prompt_ids, max_new_tokens):
    """The trainer's vLLM (colocate or server); weights were synced by the trainer before rollout_func."""
    engine = trainer.vllm_generation
    saved = engine.max_completion_length
    if max_new_tokens is not None:
        engine.max_completion_length = max_new_tokens
    try:
        _, completion_ids, logprobs, token_ids = engine.generate(prompts=prompt_ids, images=None, num_generations=1)
    finally:
        engine.max_completion_length = saved
    if logprobs is None:
        raise RuntimeError("vLLM returned no logprobs: the trainer's vLLM engine must be built with logprobs=0 or more.")
    # Per position vLLM gives the sampled token's logprob and, when the engine asks for top-N, N more, sorted by
    # rank: the sampled one is first only when it was also the most likely, so pick it by token id.
    return completion_ids, [
        [lps[ids.index(token)] if token in ids else lps[0] for token, lps, ids in zip(seq, seq_lps, seq_ids, strict=True)]
        for seq, seq_lps, seq_ids in zip(completion_ids, logprobs, token_ids, strict=True)
    ]


def _generate_transformers(trainer, prompt_ids, max_new_tokens):
    """`model.generate` on the trainer's model (`generate_shared` for a FastGRPOTrainer); logprobs from the processed
    (sampling) scores."""
    import torch
    from trl.models.utils import unwrap_model_for_generation

    tokenizer = tokenizer_of(trainer)
    device = trainer.accelerator.device
    width = max(len(p) for p in prompt_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=device)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
    config = copy.deepcopy(trainer.generation_config)
    if max_new_tokens is not None:
        config.max_new_tokens = max_new_tokens
    config.return_dict_in_generate, config.output_scores = True, True  # scores -> sampled-token logprobs
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     generation_kwargs=trainer.generation_kwargs) as model, torch.no_grad():
        if getattr(trainer, "shares_prompt_prefix", False):   # FastGRPOTrainer: the shared prompt prefix once
            out = generate_shared(model, input_ids, attention_mask, generation_config=config)
        else:
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    new_tokens = out.sequences[:, width:]
    scores = torch.stack(out.scores, dim=1).float()  # (batch, new tokens, vocab), after temperature/top-k
    token_logprobs = torch.log_softmax(scores, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
    eos_ids = set(trainer.eos_token_ids)
    completion_ids, logprobs = [], []
    for ids, lps in zip(new_tokens.tolist(), token_logprobs.tolist()):
        end = next((i + 1 for i, t in enumerate(ids) if t in eos_ids), len(ids))
        completion_ids.append(ids[:end])
        logprobs.append(lps[:end])
    return completion_ids, logprobs


def describe_rollout(tokenizer, prompt_ids: list[int], completion_ids: list[int], env_mask: list[int]) -> str:
    """One rollout as readable text: the prompt, then the completion cut into MODEL / ENV segments
    (env_mask 1 / 0), so you can see which tokens the loss trains on."""
    if not (len(completion_ids) == len(env_mask)):
        raise ValueError(f"completion_ids ({len(completion_ids)}) and env_mask ({len(env_mask)}) differ in length")
    lines = ["PROMPT (not trained) ▸ " + tokenizer.decode(prompt_ids)]
    start = 0
    for i in range(1, len(env_mask) + 1):
        if i == len(env_mask) or env_mask[i] != env_mask[start]:
            who = "MODEL (trained)" if env_mask[start] else "ENV   (masked) "
            lines.append(f"{who} ▸ " + tokenizer.decode(completion_ids[start:i]))
            start = i
    return "\n".join(lines)
