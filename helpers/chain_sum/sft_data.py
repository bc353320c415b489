"""The machinery around notebook 02's lesson: the teacher, running `openenv collect`, and checking what it gave.

The lesson itself lives in the notebook's cells: the `openenv collect` command line (tagged "collect-command"),
the conversion of an episode to an SFT row ("to-sft-rows") and the reward filter ("reward-filter"). Around them:

    summary = run_collect(collect_cmd, out_dir, n_episodes=300)   # the real CLI as a subprocess: progress, checks
    records = load_results(out_dir)                                 # results.jsonl, one dict per episode
    n_wrong, n_failed = filter_report(records, examples, kept, requested=300, collect_output=summary.output)
    check_rows(tokenizer, kept, shows_work=True)                    # every kept row: a valid call, its answer
    stats = length_stats(token_lengths(tokenizer, kept))            # p50 / p95 / p99 -> max_length

The notebook's other plumbing (the teacher's choice and probe, the student's loading) is in sft_steps.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.chain_sum.evaluation import parse_answer_call
from helpers.compute.processes import on_main
from helpers.model_folders import trl_qwen3_chat_template
from helpers.prompts import answer as answer_tool
from helpers.secrets import secret_to_env
from helpers.servers import LocalServer

RESULTS_FILE = "results.jsonl"
_SUMMARY = re.compile(r"Collected=(\d+)\s+skipped=(\d+)\s+dropped=(\d+)\s+failed=(\d+)")


class NoExamplesError(RuntimeError):
    """The filter kept nothing to train on; the message says what to change."""


def answer_tool_schema() -> dict:
    """The JSON schema of the `answer` tool, exactly as the chat template shows it at evaluation."""
    from transformers.utils import get_json_schema

    return get_json_schema(answer_tool)


@dataclass
class Teacher:
    """Which model `openenv collect` asks (the notebook's command turns it into the CLI's teacher flags).

    Build one with `Teacher.openai("gpt-5-mini")` (needs OPENAI_API_KEY) or
    `Teacher.endpoint("http://127.0.0.1:8000", "my-model")` (any OpenAI-compatible server:
    vLLM, `transformers serve`, the local stand-in of helpers.chain_sum.local_teacher).
    """

    provider: str                    # "openai" | "endpoint"
    model: str
    url: str | None = None           # the endpoint's base URL (endpoint only)
    port: int | None = None          # appended to url when it names no port (endpoint only)
    api_key_env: str = "OPENAI_API_KEY"
    kind: str = ""                   # "local" (the stand-in, started by start_local) | "openai" | "endpoint"
    shows_work: bool = False         # the stand-in writes its working before the call (start_local's show_work)

    def __post_init__(self):
        self.kind = self.kind or self.provider

    @property
    def tag(self) -> str:
        """The teacher's part of the rollouts folder's name: its model, plus "-worked" when the stand-in shows its
        work (those rows differ, so they must not resume into the folder of rows without it)."""
        return self.model + ("-worked" if self.shows_work else "")

    @classmethod
    def openai(cls, model: str = "gpt-5-mini") -> "Teacher":
        return cls(provider="openai", model=model)

    @classmethod
    def endpoint(cls, url: str, model: str, port: int | None = None) -> "Teacher":
        return cls(provider="endpoint", model=model, url=url.rstrip("/"), port=port)

    @classmethod
    def start_local(cls, model: str = "chain-sum-teacher", **knobs):
        """Serve the local stand-in teacher (helpers.chain_sum.local_teacher) on 127.0.0.1 and point a Teacher at it; returns
        (teacher, server), the server stopped with the kernel. `knobs` are its TEACHER_* settings by their lower-case
        names: mistake_rate, no_tool_rate, seed, show_work, calculate_share (helpers/chain_sum/local_teacher.py)."""
        env = {f"TEACHER_{name.upper()}": int(value) if isinstance(value, bool) else value
               for name, value in knobs.items()}
        server = LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                             env={**env, "TEACHER_MODEL": model}).start()
        teacher = cls.endpoint(server.base_url, model)
        teacher.kind, teacher.shows_work = "local", bool(knobs.get("show_work"))
        return teacher, server

    def describe(self) -> str:
        return f"OpenAI {self.model}" if self.provider == "openai" else f"{self.model} at {self.url}"

    def chat_client(self):
        """An `openai.OpenAI` client for this teacher (OpenAI itself, or the endpoint's `/v1`), for code that
        drives the chat loop itself with tools (`helpers.openreward.warm_start`) instead of through `openenv collect`."""
        import openai

        key = os.environ.get(self.api_key_env)
        if self.provider == "openai":
            return openai.OpenAI(api_key=key)
        base = self.url.rstrip("/")
        if self.port and not re.search(r":\d+$", base):
            base = f"{base}:{self.port}"
        return openai.OpenAI(base_url=base if base.endswith("/v1") else base + "/v1", api_key=key or "not-needed")


def openenv_executable() -> str:
    """The `openenv` console script of this Python (a notebook kernel's PATH may not include it)."""
    beside = Path(sys.executable).with_name("openenv")
    if beside.exists():
        return str(beside)
    found = shutil.which("openenv")
    if not found:
        raise FileNotFoundError("The `openenv` command is not installed: pip install openenv==0.10.0")
    return found


def shell_line(cmd: list[str]) -> str:
    """`cmd` as the shell line a learner would type: `openenv` for the executable's path, "$SYSTEM_PROMPT" for
    the long prompt."""
    shown = ["openenv", *cmd[1:]]
    text = shlex.join(shown)
    if "--system-prompt" in shown[:-1]:
        text = text.replace(shlex.quote(shown[shown.index("--system-prompt") + 1]), '"$SYSTEM_PROMPT"')
    return text


def rollouts_folder(run_dir: str | os.PathLike, dataset_name: str, dataset_config: dict,
                    teacher: str = "") -> Path:
    """`<run_dir>/rollouts/<dataset>-<config>[-<teacher>]`: one folder per difficulty and teacher.

    `openenv collect --resume` skips the episode ids already in results.jsonl whatever config or
    teacher wrote them, so a shared folder would mix them after a change of DATASET_CONFIG or of
    teacher. One folder each keeps --resume safe: the same setup resumes, a new one starts clean.
    """
    slug = "-".join(f"{key}{value}" for key, value in sorted(dataset_config.items())) or "defaults"
    if teacher:
        slug += f"-{teacher}"
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "", slug)
    return Path(run_dir) / "rollouts" / f"{dataset_name}-{slug}"


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


@dataclass
class CollectSummary:
    """What one `openenv collect` run did (its own summary line) and what the folder now holds."""

    requested: int
    in_file: int                  # episodes in results.jsonl after the run (earlier runs included)
    collected: int = 0            # written by this run
    skipped: int = 0              # already in results.jsonl (resume)
    dropped: int = 0
    failed: int = 0               # no reward: the teacher never called the tool, or an error
    seconds: float = 0.0
    output: str = field(default="", repr=False)


def run_collect(cmd: list[str], output_dir: str | os.PathLike, *, n_episodes: int,
                progress: bool = True, timeout: float | None = None, echo: bool = False) -> CollectSummary:
    """Run `openenv collect` as a subprocess; a tqdm bar follows results.jsonl as it grows.

    The CLI's own output (its summary line, and one line per failed episode) goes to
    `<output_dir>/collect.log` and is returned in `.output`. A non-zero exit raises with that output, and so
    does a run that collected nothing (`check_collected`). `echo`: print the command line first, and the
    CLI's output with what the folder now holds after. Several processes (`accelerate launch`): the main one
    collects, the others wait for the file and get the same summary.
    """
    return on_main(_run_collect, cmd, output_dir, n_episodes=n_episodes, progress=progress, timeout=timeout,
                   echo=echo)


def _run_collect(cmd: list[str], output_dir, *, n_episodes: int, progress: bool, timeout: float | None,
                 echo: bool) -> CollectSummary:
    from tqdm.auto import tqdm

    if echo:
        print("$", shell_line(cmd), "\n")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    results, log_path = output_dir / RESULTS_FILE, output_dir / "collect.log"
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        bar = tqdm(total=n_episodes, desc="episodes in results.jsonl", disable=not progress)
        try:
            while proc.poll() is None:
                bar.n = min(count_lines(results), n_episodes)
                bar.refresh()
                if timeout and time.monotonic() - start > timeout:
                    proc.kill()
                    raise TimeoutError(f"openenv collect ran past {timeout:.0f} s; see {log_path}")
                time.sleep(0.5)
            bar.n = min(count_lines(results), n_episodes)
            bar.refresh()
        finally:
            bar.close()
            if proc.poll() is None:
                proc.kill()
    output = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"openenv collect exited with code {proc.returncode}:\n{output[-3000:]}")
    summary = CollectSummary(requested=n_episodes, in_file=count_lines(results),
                             seconds=time.monotonic() - start, output=output)
    match = _SUMMARY.search(output)
    if match:
        summary.collected, summary.skipped, summary.dropped, summary.failed = map(int, match.groups())
    check_collected(summary, log_path)
    if echo:
        print(output.strip())
        print(f"\n{summary.in_file} episodes in {results} ({summary.collected} new, {summary.skipped} resumed from "
              f"an earlier run, {summary.failed} failed) in {summary.seconds:.1f} s")
    return summary


def check_collected(summary: CollectSummary, log_path: str | os.PathLike = "collect.log") -> None:
    """Raise when a collection produced nothing: `openenv collect` exits 0 even when every episode
    failed (e.g. a server whose replies the client cannot read), and training on nothing is worse."""
    to_collect = summary.requested - summary.skipped
    if to_collect > 0 and summary.collected == 0:
        raise RuntimeError(
            f"openenv collect collected 0 of {to_collect} episodes ({summary.failed} failed, "
            f"{summary.dropped} dropped): check the environment server and the teacher; the CLI's "
            f"own words are in {log_path}:\n{summary.output[-2000:]}")


def load_results(output_dir: str | os.PathLike) -> list[dict]:
    """The episodes of `<output_dir>/results.jsonl`, in file order."""
    path = Path(output_dir) / RESULTS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run `openenv collect` first.")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def filter_report(records: list[dict], examples: list[dict], kept: list[dict], *, requested: int,
                  collect_output: str = "") -> tuple[int, int]:
    """Print what the reward filter did: requested, collected, kept, filtered out, failed (with the CLI's reasons),
    and one filtered-out episode beside its correct answer. Returns (wrong, failed): episodes scored below 1,
    and episodes that never got a reward (the CLI writes nothing for them)."""
    from collections import Counter

    n_wrong = sum(e["reward"] < 1.0 for e in examples)
    n_failed = requested - len(records)
    reasons = Counter(line.split(": ", 1)[1] for line in collect_output.splitlines() if line.startswith("failed ep-"))
    print(f"requested {requested} | collected {len(records)} | reward 1: {len(kept)} | "
          f"reward < 1 (filtered out): {n_wrong} | failed, no reward: {n_failed}")
    for reason, count in reasons.items():
        print(f"  failed x{count}: {reason}")
    wrong = next((e for e in examples if e["reward"] < 1.0 and e["messages"]), None)
    if wrong:
        record = next(r for r in records if r["episode_id"] == wrong["episode_id"])
        print("\na filtered-out episode:", wrong["messages"][1]["content"],
              "-> teacher said", wrong["messages"][2]["tool_calls"][0]["function"]["arguments"],
              "| correct:", record["artifacts"].get("correct_answer"), "| reward", wrong["reward"])
    return n_wrong, n_failed


def require_examples(kept: list[dict], *, collected: int, failed: int, min_examples: int = 1) -> None:
    """Stop with advice before SFTTrainer sees an empty (or nearly empty) data set."""
    if len(kept) >= min_examples:
        return
    raise NoExamplesError(
        f"Only {len(kept)} of {collected} collected episodes have reward 1 ({failed} more failed "
        f"without a reward), and SFT needs at least {min_examples}. Check the samples above: is the "
        f"teacher answering with the `answer` tool, and correctly? Use a stronger teacher (TEACHER / "
        f"TEACHER_MODEL), lower TEACHER_MISTAKE_RATE / TEACHER_NO_TOOL_RATE for the local one, make "
        f"DATASET_CONFIG easier, or raise N_EPISODES.")


def assistant_text(tokenizer, example: dict) -> str:
    """The assistant turn of an SFT row as the chat template renders it: what the loss is computed on."""
    tools = json.loads(example["tools"])
    prompt = tokenizer.apply_chat_template(example["messages"][:2], tools=tools, tokenize=False,
                                           add_generation_prompt=True, enable_thinking=False)
    full = tokenizer.apply_chat_template(example["messages"], tools=tools, tokenize=False)
    return full[len(prompt):] if full.startswith(prompt) else full.split("<|im_start|>assistant\n")[-1]


def check_rows(tokenizer, kept: list[dict], *, shows_work: bool = False) -> dict:
    """Check every kept row before training, with the parser the evaluation uses, and print the counts: a valid
    `<tool_call>`, an integer answer, and either no text besides the call or (`shows_work`) working that ends in the
    number the call submits (working that disagrees with its answer would teach the student to ignore it). The
    tokenizer must carry TRL's qwen3 chat template byte for byte. Raises ValueError when a check fails."""
    if tokenizer.chat_template != trl_qwen3_chat_template():
        raise ValueError("TRL needs its qwen3 chat template, byte for byte")
    extra = "working ends in the answer" if shows_work else "no extra text"
    checks = {"valid <tool_call>": 0, "integer answer": 0, extra: 0}
    for row in kept:
        text = assistant_text(tokenizer, row)
        answer = parse_answer_call(text)
        checks["valid <tool_call>"] += answer is not None
        checks["integer answer"] += bool(answer and re.fullmatch(r"-?\d+", answer))
        before_call = text.split("<tool_call>")[0].strip()
        checks[extra] += (before_call.endswith(f"= {answer}.") if shows_work else before_call == "")
    for name, count in checks.items():
        print(f"{name:<27} {count}/{len(kept)}")
    failed = [name for name, count in checks.items() if count != len(kept)]
    if failed:
        raise ValueError(f"fix the data before training: {', '.join(failed)} fails on some of the {len(kept)} rows")
    return checks


def render(tokenizer, example: dict) -> str:
    """The training text of one example, with the prompt's tools, as the trainer will see it."""
    return tokenizer.apply_chat_template(example["messages"], tools=json.loads(example["tools"]), tokenize=False)


def token_lengths(tokenizer, examples: list[dict]) -> list[int]:
    return [len(tokenizer(render(tokenizer, e), add_special_tokens=False)["input_ids"]) for e in examples]


def length_stats(lengths: list[int]) -> dict:
    """p50 / p95 / p99 / max of token lengths."""
    import numpy as np

    values = np.asarray(lengths)
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
            "p99": float(np.percentile(values, 99)), "max": int(values.max()), "n": int(values.size)}


class TeacherError(RuntimeError):
    """The teacher endpoint cannot be used; the message names it and says what to do."""


def _llm_client(teacher: Teacher, system_prompt: str, max_tokens: int):
    """The same openenv LLM client `openenv collect` builds for these flags."""
    from openenv.core.llm_client import OpenAIClient, create_llm_client

    if teacher.provider == "openai":
        key = os.environ.get(teacher.api_key_env) or os.environ.get("API_KEY")
        if not key:
            raise TeacherError(f"The OpenAI teacher needs {teacher.api_key_env} in the environment; set it, "
                               f"or leave TEACHER=None for the local stand-in teacher.")
        return create_llm_client("openai", teacher.model, key, system_prompt=system_prompt, max_tokens=max_tokens)
    try:
        return OpenAIClient(teacher.url, teacher.port, teacher.model,
                            api_key=os.environ.get(teacher.api_key_env) or "not-needed",
                            system_prompt=system_prompt, max_tokens=max_tokens)
    except ValueError as exc:
        raise TeacherError(f"Bad teacher endpoint {teacher.url!r}: {exc}") from exc


def choose_teacher(setting: str, *, llm_endpoint: str | None = None, model: str = "gpt-5-mini") -> str:
    """Which teacher notebook 02 uses ("local" | "openai" | "endpoint"), printed with the reason.

    LLM_ENDPOINT wins; "openai" needs OPENAI_API_KEY, from the environment or a Colab secret (copied into
    the environment, where the `openenv collect` subprocess reads it); without it the local stand-in
    teaches, and this says so instead of failing later.
    """
    if llm_endpoint:
        kind, why = "endpoint", f"LLM_ENDPOINT is set ({llm_endpoint})"
    elif setting == "openai" and secret_to_env("OPENAI_API_KEY"):
        kind, why = "openai", f"OPENAI_API_KEY found: OpenAI {model}"
    elif setting == "openai":
        kind, why = "local", (f"the profile asks for OpenAI {model}, but OPENAI_API_KEY is neither in the environment "
                              "nor a Colab secret: the local stand-in teaches instead")
    else:
        kind, why = setting, "TEACHER / the profile"
    print(f"teacher: {kind} ({why})")
    return kind


def check_teacher(teacher: Teacher, *, system_prompt: str, question: str, max_tokens: int = 1024,
                  timeout: float = 60.0) -> dict:
    """Send one real chat-completions request with the `answer` tool, the way `openenv collect` will.

    Returns {"url", "content", "tool_calls"} of the reply. Raises `TeacherError` naming the URL when
    nothing answers there, it is not an OpenAI-compatible API, the model or key is wrong.
    """
    import asyncio
    import concurrent.futures

    import openai

    client = _llm_client(teacher, system_prompt, max_tokens)
    url = getattr(client, "base_url", None) or teacher.url   # openenv's LLMClient.base_url (public)
    tool = {"name": "answer", "description": answer_tool_schema()["function"]["description"],
            "inputSchema": answer_tool_schema()["function"]["parameters"]}
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]

    async def ask():
        return await asyncio.wait_for(client.complete_with_tools(messages, [tool]), timeout)

    try:  # in a thread: a notebook kernel already runs an event loop
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            response = pool.submit(asyncio.run, ask()).result()
    except (openai.APIConnectionError, asyncio.TimeoutError) as exc:
        raise TeacherError(f"No teacher answers at {url} ({type(exc).__name__}: {exc}). Start the server, fix "
                           f"the URL/port, or leave LLM_ENDPOINT=None for the local stand-in teacher.") from exc
    except openai.AuthenticationError as exc:
        raise TeacherError(f"The teacher at {url} refused the API key ({exc}); check {teacher.api_key_env}.") from exc
    except openai.NotFoundError as exc:
        raise TeacherError(f"The teacher at {url} answered 404 for chat completions or model "
                           f"{teacher.model!r} ({exc}). Check the model name and that the URL is the "
                           f"OpenAI-compatible base (it usually ends in /v1).") from exc
    except openai.APIStatusError as exc:
        raise TeacherError(f"The teacher at {url} answered HTTP {exc.status_code}: {exc}. Does it serve "
                           f"chat completions with tool calling (vLLM needs --enable-auto-tool-choice)?") from exc
    except (AttributeError, KeyError, TypeError, IndexError) as exc:
        if not _raised_reading_the_reply(exc):
            raise  # a bug (ours or a library's), not a teacher that answered in the wrong shape
        raise _not_a_chat_completion(url, exc) from exc
    except (json.JSONDecodeError, openai.APIResponseValidationError) as exc:
        raise _not_a_chat_completion(url, exc) from exc
    return {"url": str(url), "content": response.content,
            "tool_calls": [{"name": c.name, "arguments": c.args} for c in response.tool_calls]}


def _raised_reading_the_reply(exc: BaseException) -> bool:
    """True when `exc` came from the line of openenv's client that reads the reply's fields
    (`response.choices[0].message`, `tc.function.name`, ...): the reply is not a chat completion.
    Anywhere else it is a bug, and it must surface as itself."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    code = tb.tb_frame.f_code
    return code.co_name in ("complete_with_tools", "complete") and code.co_filename.replace("\\", "/").endswith(
        "openenv/core/llm_client.py")


def _not_a_chat_completion(url, exc: BaseException) -> "TeacherError":
    return TeacherError(f"Something answers at {url}, but not with an OpenAI chat completion "
                        f"({type(exc).__name__}: {exc}). Point LLM_ENDPOINT at the OpenAI-compatible base "
                        f"URL (usually ending in /v1) of a server that serves /chat/completions.")
