"""Held-out evaluation of a tool-calling policy against a reasoning_gym environment server.

The training reward says how the policy did on the questions it trained on. This asks the same
environment for a fixed, seeded question set that training never uses, lets the model answer each
with one greedy generation, parses the tool call the way TRL does, and lets the environment score
it. Two numbers come back, each with a 95 % Wilson interval:

    format_compliance  share of answers that were a valid `answer` tool call
    accuracy           mean environment score (a reply without a valid tool call scores 0)

Before and after training score the same questions, so `helpers.reporting.intervals.paired_change` compares them
question by question: a change of a few points can be real even when the two accuracy intervals overlap.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from helpers.compute.generation import generate_in_batches
from helpers.compute.precision import autocast
from helpers.compute.processes import on_main
from helpers.prompts import SYSTEM_PROMPT, answer_tool
from helpers.reporting.intervals import check_same_questions, wilson_interval
from helpers.rollouts.tool_calls import parse_tool_calls

EVAL_SEED = 999_999  # training envs draw random seeds; this fixed one is reserved for evaluation


class Summarized:
    """`summary()`: the dataclass's fields without the per-question `samples` (what metrics and plots use)."""

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("samples", None)
        return d


@dataclass
class EvalResult(Summarized):
    """Held-out results. `accuracy` is the environment's mean score, which is what GRPO's reward sees;
    reasoning_gym gives partial credit to an answer that contains the right one (2/3 for "-41" when the
    answer is 41), so `exact` (the share scored 1.0) is the strict "got it right" number."""

    n: int
    format_compliance: float
    accuracy: float
    format_ci: tuple[float, float]
    accuracy_ci: tuple[float, float]
    exact: float = 0.0
    exact_ci: tuple[float, float] = (0.0, 0.0)
    samples: list[dict] = field(default_factory=list)
    seconds: float | None = None   # wall time of the evaluation: what the one after training will take again

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalResult":
        """Back from `to_dict()` (or its JSON, where the intervals became lists)."""
        return cls(**{k: tuple(v) if k.endswith("_ci") else v for k, v in d.items()})

    def __str__(self) -> str:
        return (f"n={self.n}  format compliance {self.format_compliance:.1%} "
                f"[{self.format_ci[0]:.0%}, {self.format_ci[1]:.0%}]  accuracy {self.accuracy:.1%} "
                f"[{self.accuracy_ci[0]:.0%}, {self.accuracy_ci[1]:.0%}]  exactly right {self.exact:.1%} "
                f"[{self.exact_ci[0]:.0%}, {self.exact_ci[1]:.0%}]")


@dataclass
class KindChange:
    """The paired change on the held-out questions of one kind (`change_by_kind`)."""

    kind: str
    n: int
    before: float   # share exactly right (score 1.0) before training
    after: float
    gained: int     # questions of this kind wrong before and right after
    lost: int


class ChangeByKind(list):
    """`KindChange` rows, most common kind first; prints as a table, `records()` for metrics.json."""

    def __str__(self) -> str:
        width = max([len(row.kind) for row in self] + [4])
        lines = [f"{'kind':<{width}}  {'n':>4}  before   after  gained  lost"]
        lines += [f"{row.kind:<{width}}  {row.n:>4}  {row.before:>6.0%}  {row.after:>6.0%}  {row.gained:>6}  {row.lost:>4}"
                  for row in self]
        return "\n".join(lines)

    def records(self) -> list[dict]:
        return [asdict(row) for row in self]


def change_by_kind(before: EvalResult, after: EvalResult, kind_of) -> ChangeByKind:
    """Split a paired before/after evaluation by `kind_of(question)` (for chain_sum,
    `helpers.chain_sum.local_teacher.working_kind`): where training gained and where it lost, which one number hides.

    Counts exact answers (score 1.0), like `EvalResult.exact`."""
    check_same_questions(before, after)
    pairs: dict[str, list[tuple[bool, bool]]] = {}   # kind -> (right before, right after) per question
    for b, a in zip(before.samples, after.samples):
        pairs.setdefault(kind_of(a["question"]), []).append((b["score"] == 1.0, a["score"] == 1.0))
    return ChangeByKind(KindChange(kind, len(rows), sum(b for b, _ in rows) / len(rows),
                                   sum(a for _, a in rows) / len(rows),
                                   gained=sum(a and not b for b, a in rows), lost=sum(b and not a for b, a in rows))
                        for kind, rows in sorted(pairs.items(), key=lambda item: (-len(item[1]), item[0])))


def parse_answer_call(text: str) -> str | None:
    """The `answer` argument of the first well-formed tool call in `text` when it is an `answer` call, else None."""
    calls = parse_tool_calls(text)
    if not calls or calls[0]["name"] != "answer" or "answer" not in calls[0]["arguments"]:
        return None
    return str(calls[0]["arguments"]["answer"])


# The KV cache one CPU evaluation batch may fill, and its most rows: more rows share each pass over the weights
# (docs/measurements.md#held-out-evaluation-on-cpu).
EVAL_CACHE_GIB = 3.0
MAX_CPU_BATCH = 256


def default_batch_size(model, positions: int | None = None, precision: str | None = None) -> int:
    """Rows per generation batch. On a CPU as many as fit a KV cache of `EVAL_CACHE_GIB` for `positions` (the
    longest prompt plus the new tokens; None: 512), at most `MAX_CPU_BATCH`: more rows share each pass over the
    weights, and a finished row leaves its batch (`helpers.compute.generation.greedy_dropping_finished`). On a GPU
    8, where a static KV cache of many long rows of a 1-2B model would take gigabytes beside the trained model (not
    measured on a card)."""
    if model.device.type != "cpu":
        return 8
    config = getattr(model, "config", None)
    try:
        heads = config.num_key_value_heads or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        per_position = config.num_hidden_layers * 2 * heads * head_dim * (2 if precision in ("bf16", "fp16") else 4)
    except (AttributeError, TypeError, ZeroDivisionError):
        return 64
    rows = int(EVAL_CACHE_GIB * 2**30 // (per_position * (positions or 512)))
    return max(8, min(MAX_CPU_BATCH, rows))


def generate_replies(model, tokenizer, conversations: list[list[dict]], *, tools=None,
                     max_new_tokens: int = 64, batch_size: int | None = None, precision: str | None = None,
                     temperature: float | None = None, progress: bool | str = True) -> list[str]:
    """Greedy replies for each conversation, in their order; special tokens kept out.

    The conversations are batched by prompt length (`batch_size` rows; None: `default_batch_size`), and each batch
    generates with `helpers.compute.generation`: the system prompt and tool schema every conversation starts with
    are computed once per batch, not once per row, and a greedy batch drops each row that has finished. In fp32 the
    same greedy replies as plain `model.generate` (tested); speeds in docs/measurements.md#held-out-evaluation-on-cpu.

    `temperature`: None (or 0) replies greedily; a number samples at it the way GRPOTrainer does (no top-k,
    no top-p), for measurements of the training distribution (`helpers.chain_sum.preflight`).

    `precision` ("bf16"/"fp16") generates under that autocast on the model's device, the precision the
    trainer trains in (`helpers.compute.precision.choose_precision`): greedy replies in fp32 and bf16 differ
    (docs/measurements.md#precision-on-cpu), so an evaluation before training and one after must
    use the same setting. None or "fp32" leave the precision as the caller set it (an outer autocast stays on).
    """
    import torch

    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    texts = [tokenizer.apply_chat_template(c, tools=tools, add_generation_prompt=True, tokenize=False,
                                           enable_thinking=False) for c in conversations]
    prompts = tokenizer(texts, add_special_tokens=False)["input_ids"]
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature \
        else {"do_sample": False}
    positions = max(map(len, prompts), default=0) + max_new_tokens
    with torch.no_grad(), autocast(precision, model.device.type):
        new_tokens = generate_in_batches(model, prompts, batch_size=batch_size or default_batch_size(model, positions,
                                                                                                     precision),
                                         pad_token_id=tokenizer.pad_token_id, progress=progress,
                                         max_new_tokens=max_new_tokens, **sampling)
    replies = [tokenizer.decode(row, skip_special_tokens=False).replace(tokenizer.pad_token, "")
               .split(tokenizer.eos_token)[0] for row in new_tokens]
    return replies


def evaluate_policy(model, tokenizer, base_url: str, *, dataset_name: str = "chain_sum",
                    dataset_config: dict | None = None, n: int = 50, seed: int = EVAL_SEED,
                    system_prompt: str = SYSTEM_PROMPT, max_new_tokens: int = 64,
                    batch_size: int | None = None, precision: str | None = None, progress: bool | str = True) -> EvalResult:
    """Score `model` on `n` held-out questions served by the reasoning_gym env at `base_url`.

    `precision`: generate under that autocast (see `generate_replies`); pass the trainer's. Several processes
    (`accelerate launch`): the main process evaluates, every process gets the result.
    """
    return on_main(_evaluate_policy, model, tokenizer, base_url, dataset_name=dataset_name,
                   dataset_config=dataset_config, n=n, seed=seed, system_prompt=system_prompt,
                   max_new_tokens=max_new_tokens, batch_size=batch_size, precision=precision, progress=progress)


def _evaluate_policy(model, tokenizer, base_url: str, *, dataset_name: str, dataset_config: dict | None, n: int,
                     seed: int, system_prompt: str, max_new_tokens: int, batch_size: int | None,
                     precision: str | None, progress: bool | str) -> EvalResult:
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    started = time.perf_counter()
    with ReasoningGymEnv(base_url=base_url).sync() as env:
        first = env.reset(dataset_name=dataset_name, dataset_config=dataset_config or {}, seed=seed, size=n)
        questions = [first.observation.question] + [env.reset().observation.question for _ in range(n - 1)]
        conversations = [[{"role": "system", "content": system_prompt}, {"role": "user", "content": q}]
                         for q in questions]
        replies = generate_replies(model, tokenizer, conversations, tools=[answer_tool],
                                   max_new_tokens=max_new_tokens, batch_size=batch_size, precision=precision,
                                   progress=f"evaluation ({n} questions)" if progress is True else progress)
        # replay the same questions in order and let the environment score each answer
        env.reset(dataset_name=dataset_name, dataset_config=dataset_config or {}, seed=seed, size=n)
        samples = []
        for i, (question, reply) in enumerate(zip(questions, replies)):
            if i:
                env.reset()
            answer = parse_answer_call(reply)
            score = 0.0
            correct = None
            if answer is not None:
                step = env.step(ReasoningGymAction(answer=answer))
                score, correct = float(step.observation.score or 0.0), step.observation.correct_answer
            samples.append({"question": question, "reply": reply, "answer": answer, "score": score,
                            "correct_answer": correct})
    formatted = sum(s["answer"] is not None for s in samples)
    total = sum(s["score"] for s in samples)
    exact = sum(s["score"] == 1.0 for s in samples)
    return EvalResult(n=n, format_compliance=formatted / n, accuracy=total / n,
                      format_ci=wilson_interval(formatted, n), accuracy_ci=wilson_interval(total, n),
                      exact=exact / n, exact_ci=wilson_interval(exact, n), samples=samples,
                      seconds=round(time.perf_counter() - started, 1))
