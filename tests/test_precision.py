"""helpers.compute.precision and helpers.models.load_policy: the precision a run uses is the one that is fast and
trains on the machine at hand, weights stay fp32, and a finished trainer's memory can be given back."""

from __future__ import annotations

import types
import weakref

import pytest
import torch

from helpers.models import free_memory, load_policy
from helpers.model_folders import ModelError
from helpers.compute.hardware import cuda_precision
from helpers.compute.precision import PrecisionError, choose_precision, time_training_pass
from helpers.profiles import NOTEBOOK_PROFILES


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", device="cpu")


def test_auto_keeps_the_faster_precision_on_cpu(tiny):
    """A forced-slow path is never chosen: whichever precision measures slower loses."""
    slow_bf16 = choose_precision(tiny, "auto", measure=lambda m, p: {"fp32": 1.0, "bf16": 2.5}[p])
    assert slow_bf16.precision == "fp32" and not slow_bf16.bf16
    assert slow_bf16.seconds_per_pass == {"fp32": 1.0, "bf16": 2.5}
    assert "2.50 s in bf16" in slow_bf16.reason
    fast_bf16 = choose_precision(tiny, "auto", measure=lambda m, p: {"fp32": 3.0, "bf16": 1.0}[p])
    assert fast_bf16.precision == "bf16" and fast_bf16.bf16
    assert fast_bf16.as_metrics()["precision_seconds_per_pass"] == {"fp32": 3.0, "bf16": 1.0}


def test_the_real_measurement_times_both_and_leaves_the_model_as_it_was(tiny):
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    tiny.eval()
    choice = choose_precision(tiny, "auto", batch_size=1, seq_len=16, repeats=1, native_bf16=True)   # timed anywhere
    assert set(choice.seconds_per_pass) == {"fp32", "bf16"} and all(t > 0 for t in choice.seconds_per_pass.values())
    assert choice.precision == min(choice.seconds_per_pass, key=choice.seconds_per_pass.get)
    assert not tiny.training and all(p.grad is None for p in tiny.parameters())
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())


def test_the_probe_runs_in_the_precision_it_times(tiny):
    seen = set()
    hook = tiny.lm_head.register_forward_hook(lambda module, args, out: seen.add(out.dtype))
    try:
        time_training_pass(tiny, "bf16", batch_size=1, seq_len=8, repeats=1)
        assert seen == {torch.bfloat16}
        seen.clear()
        time_training_pass(tiny, "fp32", batch_size=1, seq_len=8, repeats=1)
        assert seen == {torch.float32}
    finally:
        hook.remove()


def test_explicit_settings_win_and_bad_ones_are_named(tiny):
    assert choose_precision(tiny, False).precision == "fp32"
    assert choose_precision(tiny, True).precision == "bf16"
    assert choose_precision(tiny, "bf16").reason == "as set"
    with pytest.raises(PrecisionError, match="fp16 autocast is for CUDA"):
        choose_precision(tiny, "fp16")
    with pytest.raises(PrecisionError, match="'auto', 'fp32', 'bf16' or 'fp16'"):
        choose_precision(tiny, "half")


@pytest.mark.parametrize("capability, expected", [((7, 5), "fp16"), ((7, 0), "fp16"), ((8, 0), "bf16"),
                                                  ((8, 9), "bf16"), ((9, 0), "bf16"), ((6, 1), "fp32")])
def test_cuda_cards_get_what_they_compute_natively(monkeypatch, capability, expected):
    """A T4 (7.5) reports bf16 as supported, but only emulates it: it gets fp16 autocast."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)   # what a T4 says
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    on_gpu = types.SimpleNamespace()
    on_gpu.parameters = lambda: iter([types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))])
    assert cuda_precision(capability) == expected
    choice = choose_precision(on_gpu, "auto")
    assert choice.precision == expected and choice.device == "cuda"
    assert f"{capability[0]}.{capability[1]}" in choice.reason


def test_gpu_recipe_weights_stay_fp32_and_one_step_moves_them(tiny):
    """The gpu profile's lr with bf16 autocast: fp32 master weights take the update, bf16 weights lose most of it."""
    lr = NOTEBOOK_PROFILES["01_grpo_walkthrough"]["gpu"]["learning_rate"]
    assert next(tiny.parameters()).dtype == torch.float32   # what load_policy gives, whatever the precision

    def share_changed(model) -> float:
        layers = [p for p in model.model.layers.parameters() if p.dim() == 2]
        before = [p.detach().clone() for p in layers]
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        changed = sum((p.detach() != b).sum().item() for p, b in zip(layers, before))
        return changed / sum(b.numel() for b in before)

    fp32_master = load_policy("tiny", device="cpu")
    bf16_weights = load_policy("tiny", device="cpu").to(torch.bfloat16)
    assert share_changed(fp32_master) > 0.9
    assert share_changed(bf16_weights) < 0.2   # why the notebooks no longer load bf16 weights


def test_load_policy_names_what_failed_and_what_to_set(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)   # read at import: no network retries
    with pytest.raises(ModelError, match="Could not load the model 'nobody/no-such-model'.*set MODEL to one of tiny"):
        load_policy("nobody/no-such-model")


def test_a_finished_trainer_can_be_collected(tmp_path):
    """`del trainer; free_memory()` really frees the trainer, its model and its optimizer (notebook 03 builds three)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from helpers.model_folders import resolve_model

    model = load_policy("tiny", device="cpu")
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                        max_steps=1, per_device_train_batch_size=2, num_generations=2, max_completion_length=4,
                        activation_checkpointing=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, args=config, processing_class=AutoTokenizer.from_pretrained(resolve_model("tiny")),
                          reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
                          train_dataset=Dataset.from_dict({"prompt": ["hi"] * 4}))
    trainer.train()
    assert trainer.model.dtype == torch.float32
    refs = [weakref.ref(trainer), weakref.ref(model), weakref.ref(trainer.optimizer)]
    del trainer, model
    free_memory()
    assert [r() is None for r in refs] == [True, True, True]


def test_the_policy_goes_where_training_will_run(monkeypatch):
    """On a GPU machine the model is moved to CUDA before anything runs (notebook 04 used to evaluate its
    'before' on the CPU of a GPU machine, for hours, and before/after on different devices)."""
    moved = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *args, **kw: moved.append(args[0] if args else kw) or self)
    model = load_policy("tiny")
    assert moved == ["cuda"] and next(model.parameters()).dtype == torch.float32


def _accelerated(model):
    """`model` as GRPOTrainer runs it on a bf16 CPU: accelerate's prepare_model wraps each forward in its own
    autocast region (mirrored here: an Accelerator's mixed precision is fixed per process, and earlier tests'
    trainers set it)."""
    import functools

    forward = model.forward

    @functools.wraps(forward)
    def wrapped(*args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    model.forward = wrapped
    return model


def _sample(model, ids, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                              top_k=0, top_p=1.0, max_new_tokens=12, pad_token_id=0)


@pytest.mark.parametrize("fused", [False, True])
def test_reused_weight_casts_give_autocasts_tokens_and_follow_each_optimizer_step(fused):
    """Inside `weight_casts_reused` the products read bf16 copies, and they are the casts autocast makes: the same
    logits and sampled tokens, with layers frozen as notebook 01 freezes them, before and after an optimizer step
    moves the trained weights. Copies live only inside: the fused AdamW (transformers' default `optim`, notebook
    02's) updates in place without bumping the weights' versions, so copies kept across steps would go stale
    (notebook 02 once evaluated its base model as the trained one). On leaving, no hook and no copy stay."""
    from helpers.compute.precision import weight_casts_reused

    model = load_policy("tiny", device="cpu")
    model.model.layers[0].requires_grad_(False)
    model = _accelerated(model).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]] * 3)
    seen = []   # the dtype of one trained layer's weight during its product
    layer = model.model.layers[1].mlp.up_proj
    layer.register_forward_hook(lambda module, args, output: seen.append(module.weight.dtype))
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())

    def both():
        with weight_casts_reused(model), weight_casts_reused(model):   # entered twice: one set of hooks
            assert sum(len(m._forward_pre_hooks) for m in model.modules()) == hooks + sum(
                type(m) is torch.nn.Linear for m in model.modules())
            with torch.no_grad():
                reused = model(input_ids=ids).logits
            tokens = _sample(model, ids, seed=1)
        assert seen[-1] == torch.bfloat16
        assert sum(len(m._forward_pre_hooks) for m in model.modules()) == hooks   # the hooks went
        with torch.no_grad():
            plain = model(input_ids=ids).logits
        assert seen[-1] == torch.float32
        assert torch.equal(reused, plain) and torch.equal(tokens, _sample(model, ids, seed=1))
        assert all(p.dtype == torch.float32 for p in model.parameters())   # lent copies were given back
        return plain

    before = both()
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-2, fused=fused)
    versions = [p._version for p in trained]
    model.train()
    with weight_casts_reused(model), torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss   # a pass with a graph: the fp32 weights, not the copies
    assert seen[-1] == torch.float32
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in trained)
    optimizer.step()
    assert fused == (versions == [p._version for p in trained])   # what copies kept across steps could not go by
    model.eval()
    after = both()
    assert not torch.equal(before, after)   # the step moved the weights, and the copies followed


def test_a_failing_product_gives_the_fp32_weight_back():
    from helpers.compute.precision import weight_casts_reused

    layer = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False))
    with weight_casts_reused(layer), torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), \
            pytest.raises(RuntimeError):
        layer(torch.ones(2, 5))
    assert layer[0].weight.dtype == torch.float32 and layer[0].weight.requires_grad


def test_a_cpu_without_native_bf16_gets_fp32_without_timing_bf16(monkeypatch):
    """An AVX2 CPU (or oneDNN capped to AVX2) emulates bf16: "auto" says so and times nothing."""
    from helpers.compute import hardware

    tiny = torch.nn.Linear(2, 2)
    timed = []
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert hardware.cpu_native_bf16() == (False, "ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below bf16 instructions")
    choice = choose_precision(tiny, "auto", native_bf16=False, measure=lambda m, p: timed.append(p) or 1.0)
    assert choice.precision == "fp32" and timed == [] and "not timed" in choice.reason
    monkeypatch.setattr(hardware, "cpu_native_bf16", lambda: (False, "the CPU has neither avx512_bf16 nor amx_bf16"))
    choice = choose_precision(tiny, "auto")
    assert choice.precision == "fp32" and choice.seconds_per_pass == {} and "neither avx512_bf16" in choice.reason
    monkeypatch.undo()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert "ONEDNN_MAX_CPU_ISA" not in hardware.cpu_native_bf16()[1]   # a bf16-capable cap leaves it to the flags


def test_cpu_flags_decide_native_bf16(monkeypatch, tmp_path):
    """The flags line of /proc/cpuinfo decides, on x86 Linux."""
    from helpers.compute import hardware

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(hardware.sys, "platform", "linux")
    monkeypatch.setattr(hardware.platform, "machine", lambda: "x86_64")
    real_open = open

    def cpuinfo(flags):
        return lambda path, *a, **k: (iter([f"flags\t\t: {flags}\n"]) if path == "/proc/cpuinfo"
                                      else real_open(path, *a, **k))

    monkeypatch.setattr("builtins.open", cpuinfo("fpu sse avx2 fma"))
    assert hardware.cpu_native_bf16()[0] is False
    monkeypatch.setattr("builtins.open", cpuinfo("avx2 avx512f avx512_bf16"))
    assert hardware.cpu_native_bf16() == (True, "the CPU has avx512_bf16")
    monkeypatch.setattr(hardware.platform, "machine", lambda: "arm64")
    assert hardware.cpu_native_bf16()[0] is None
