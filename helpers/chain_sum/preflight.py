"""Before GRPO trains: is there anything in the start policy for it to learn from?

GRPO learns only from groups whose rollouts disagree (some right, some wrong): a group that is all
right or all wrong has reward std 0 and no gradient (TRL logs the share as `frac_reward_zero_std`).
This measures that before a single step, on questions of the training distribution:

    parse_rate       share of sampled rollouts with a valid tool call (the environment scored them)
    greedy_accuracy  mean reward of one greedy rollout per question
    sampled_accuracy mean reward of the k sampled rollouts (k = num_generations, at the training temperature)
    pass_at_k        share of questions with at least one fully right rollout among the k
    mixed_share      share of questions whose k rewards are not all equal: the groups GRPO learns from

and prints a verdict: "format-bound" (few valid tool calls), "too hot" (sampling at the training temperature
breaks the policy: pass@k no better than greedy), "no headroom" (few mixed groups: too easy or too hard) or
"headroom" (with the pass@k-over-greedy gap), with what to change.

    pf = preflight(reasoning_gym_sampler(model, tokenizer, env_url, ...), seeds, k=8, temperature=1.2)
    print(pf)                       # the numbers, the verdict and the advice
    pf.mixed_tasks()                # the questions whose group was mixed (MIXED_ONLY: measured worse, off)

One core (`preflight`) takes a sampler, `sample(tasks, k, temperature) -> [[episode, ...] per task]`
with each episode a dict {"reward": float, "parsed": bool}, and temperature None meaning greedy. The sampler here
adapts it to a reasoning_gym server (notebook 01); `helpers.openreward.evaluation.ors_sampler` to an ORS environment
through `OpenRewardSpec` (notebook 04, multi-turn).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from helpers.chain_sum.evaluation import generate_replies, parse_answer_call
from helpers.prompts import SYSTEM_PROMPT, answer_tool

FORMAT_BOUND = 0.5     # below this parse rate most rollouts score 0 whatever they say
LOW_MIXED = 0.2        # below this share of mixed groups most steps carry no gradient


@dataclass
class Preflight:
    """The start policy measured on `n` training questions, `k` sampled rollouts each (see the module docstring)."""

    n: int
    k: int
    temperature: float
    parse_rate: float
    greedy_accuracy: float
    sampled_accuracy: float
    sampled_exact: float       # share of sampled rollouts that were fully right (reward >= success)
    pass_at_k: float
    mixed_share: float
    verdict: str               # format-bound | no headroom | headroom
    advice: str
    groups: list[dict] = field(default_factory=list)   # per question: {"task", "rewards", "greedy"}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Preflight":
        return cls(**d)

    def mixed_tasks(self) -> list:
        """The tasks whose k rewards were not all equal: the questions a GRPO group learns from today."""
        return [g["task"] for g in self.groups if len(set(g["rewards"])) > 1]

    def mixed_or_why_not(self, start: str = "the policy") -> list:
        """`mixed_tasks()`, or a ValueError that says why no group was mixed and what to do (MIXED_ONLY).

        `start`: what the policy started from, for the message (e.g. "smollm2-135m (base, no warm start)")."""
        mixed = self.mixed_tasks()
        if mixed:
            return mixed
        rollouts = self.n * self.k
        if self.parse_rate < 0.5:   # rewards are (almost) all 0
            why = (f"{start} made a valid tool call in {self.parse_rate:.0%} of {rollouts} rollouts, so almost every "
                   "reward is 0. ")
            why += ("Run notebook 02 first: its checkpoint (WARM_START) calls the tool; or set MODEL to one that calls "
                    "tools."
                    if "no warm start" in start else
                    "Its replies rarely end in a tool call: give them more tokens (MAX_COMPLETION_LENGTH) or re-run "
                    "notebook 02 with more steps.")
        elif self.sampled_exact >= 1.0:
            why = f"all {rollouts} rollouts were right: nothing left to learn here. Set a harder DATASET_CONFIG."
        else:
            why = f"every group of {self.k} agreed. Raise PREFLIGHT_N or change DATASET_CONFIG."
        raise ValueError(f"No preflight group was mixed, so MIXED_ONLY has nothing to train on: {why}")

    def as_metrics(self) -> dict:
        """What metrics.json records (prefixed `preflight_`)."""
        return {f"preflight_{k}": getattr(self, k) for k in
                ("n", "k", "temperature", "parse_rate", "greedy_accuracy", "sampled_accuracy", "sampled_exact", "pass_at_k",
                 "mixed_share", "verdict")}

    def __str__(self) -> str:
        return (f"preflight on {self.n} training questions, {self.k} rollouts each at temperature {self.temperature}:\n"
                f"  valid tool calls {self.parse_rate:.0%}, greedy accuracy {self.greedy_accuracy:.0%}, "
                f"sampled accuracy {self.sampled_accuracy:.0%}, pass@{self.k} {self.pass_at_k:.0%}\n"
                f"  mixed groups (some right, some wrong: a gradient) {self.mixed_share:.0%}; "
                f"expected frac_reward_zero_std about {1 - self.mixed_share:.2f}\n"
                f"verdict: {self.verdict}. {self.advice}")


def verdict(parse_rate: float, mixed_share: float, pass_at_k: float, sampled_accuracy: float, k: int,
            greedy_accuracy: float | None = None) -> tuple[str, str]:
    """The verdict and what to change, from the measured shares. With `greedy_accuracy` it also says whether
    the temperature is too hot (pass@k no better than greedy: nothing for GRPO to pull the greedy answer up to)."""
    if parse_rate < FORMAT_BOUND:
        return "format-bound", (f"Only {parse_rate:.0%} of rollouts make a valid tool call, so most rewards are 0 "
                                "whatever the answer: warm-start from an SFT checkpoint (notebook 02) or give "
                                "the reply more tokens (max_completion_length) before tuning anything else.")
    if greedy_accuracy is not None and greedy_accuracy > 0 and pass_at_k <= greedy_accuracy \
            and sampled_accuracy < greedy_accuracy / 2:
        return "too hot", (f"Sampled rollouts score {sampled_accuracy:.0%} against {greedy_accuracy:.0%} greedy, and "
                           f"pass@{k} ({pass_at_k:.0%}) is no better than greedy: at this temperature GRPO learns "
                           "from a broken policy and has no better answer to pull the greedy one toward. Lower "
                           "the temperature until pass@k clearly exceeds greedy accuracy.")
    if mixed_share < LOW_MIXED:
        if pass_at_k < 0.5:
            return "no headroom", (f"Only {mixed_share:.0%} of groups are mixed and {1 - pass_at_k:.0%} of questions "
                                   f"get no right answer in {k} tries: too hard. Make the task easier "
                                   "(DATASET_CONFIG), raise num_generations or the temperature.")
        return "no headroom", (f"Only {mixed_share:.0%} of groups are mixed and sampled accuracy is "
                               f"{sampled_accuracy:.0%}: too easy, most groups are all right. Make the task harder "
                               "(DATASET_CONFIG) or raise the temperature.")
    gap = (f" pass@{k} minus greedy accuracy: {pass_at_k - greedy_accuracy:+.0%}, the most greedy accuracy "
           "GRPO can hope to gain on such questions." if greedy_accuracy is not None else "")
    return "headroom", (f"{mixed_share:.0%} of groups are mixed: about that share of each step's groups carries a "
                        f"gradient.{gap} Train, on new questions each step (training only on the mixed ones "
                        "memorized them in notebook 01: held-out -4.6 points).")


def preflight(sample, tasks: list, *, k: int, temperature: float, success: float = 1.0) -> Preflight:
    """Measure the start policy on `tasks` through `sample` (see the module docstring): one greedy rollout
    and `k` rollouts at `temperature` per task. A rollout counts as right when its reward >= `success`."""
    tasks = list(tasks)
    if not tasks or k < 1:
        raise ValueError("preflight needs at least one task and k >= 1")
    greedy = sample(tasks, 1, None)
    sampled = sample(tasks, k, temperature)
    groups = [{"task": t, "rewards": [float(e["reward"]) for e in eps], "greedy": float(g[0]["reward"])}
              for t, eps, g in zip(tasks, sampled, greedy)]
    episodes = [e for eps in sampled for e in eps]
    n = len(tasks)
    parse_rate = sum(bool(e["parsed"]) for e in episodes) / len(episodes)
    sampled_accuracy = sum(float(e["reward"]) for e in episodes) / len(episodes)
    sampled_exact = sum(float(e["reward"]) >= success for e in episodes) / len(episodes)
    pass_at_k = sum(any(r >= success for r in g["rewards"]) for g in groups) / n
    mixed_share = sum(len(set(g["rewards"])) > 1 for g in groups) / n
    greedy_accuracy = sum(g["greedy"] for g in groups) / n
    name, advice = verdict(parse_rate, mixed_share, pass_at_k, sampled_accuracy, k, greedy_accuracy)
    return Preflight(n=n, k=k, temperature=temperature, parse_rate=parse_rate,
                     greedy_accuracy=greedy_accuracy, sampled_accuracy=sampled_accuracy,
                     sampled_exact=sampled_exact, pass_at_k=pass_at_k, mixed_share=mixed_share, verdict=name, advice=advice, groups=groups)


def reasoning_gym_sampler(model, tokenizer, base_url: str, *, dataset_name: str = "chain_sum",
                          dataset_config: dict | None = None, system_prompt: str | None = None,
                          max_new_tokens: int = 64, batch_size: int | None = None, precision: str | None = None,
                          progress: bool = False):
    """A sampler for `preflight` on a reasoning_gym server; tasks are question seeds (notebook 01's
    `question_seed` column: `reset(seed=s, size=1)` serves that question). One-turn episodes: the reply's
    `answer` tool call is sent to the environment, which scores it; no valid call scores 0."""
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    config = dict(dataset_config or {})

    def sample(seeds: list[int], k: int, temperature: float | None) -> list[list[dict]]:
        with ReasoningGymEnv(base_url=base_url).sync() as env:
            def reset(seed):
                return env.reset(dataset_name=dataset_name, dataset_config=config, seed=seed, size=1)

            questions = [reset(seed).observation.question for seed in seeds]
            conversations = [[{"role": "system", "content": system_prompt or SYSTEM_PROMPT},
                              {"role": "user", "content": q}] for q in questions for _ in range(k)]
            replies = generate_replies(model, tokenizer, conversations, tools=[answer_tool],
                                       max_new_tokens=max_new_tokens, batch_size=batch_size, precision=precision,
                                       temperature=temperature,
                                       progress=(f"preflight ({len(seeds)} questions x {k}, "
                                                 f"{'sampled' if temperature else 'greedy'})" if progress is True
                                                 else progress))
            episodes = []
            for i, reply in enumerate(replies):
                answer = parse_answer_call(reply)
                reward = 0.0
                if answer is not None:
                    reset(seeds[i // k])   # a fresh episode on the same question
                    reward = float(env.step(ReasoningGymAction(answer=answer)).observation.score or 0.0)
                episodes.append({"reward": reward, "parsed": answer is not None})
        return [episodes[i * k:(i + 1) * k] for i in range(len(seeds))]

    return sample

