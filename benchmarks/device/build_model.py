"""Random-weight Qwen3-1.7B and Qwen3-0.6B, the gpu profiles' shapes, for the device machine (no weights can be
fetched there). Their replies are noise, so every completion runs to its length limit: the time per step is the
worst case of the recipe and the memory is the recipe's, but nothing is learned.

    python3 .gpu/build_model.py [qwen3-1.7b-random ...]     -> /tmp/models/<name>
"""
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

SHAPES = {  # Qwen3's published configs: hidden size, MLP size, layers, attention heads, key-value heads
    "qwen3-1.7b-random": (2048, 6144, 28, 16, 8),
    "qwen3-0.6b-random": (1024, 3072, 28, 16, 8),
}
tokenizer = AutoTokenizer.from_pretrained(Path(__file__).with_name("tok"))
for name in sys.argv[1:] or SHAPES:
    hidden, mlp, layers, heads, kv_heads = SHAPES[name]
    started = time.time()
    config = Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=128,
                         max_position_embeddings=40960, rope_theta=1000000, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)   # bf16 on disk, as the Hub's Qwen3 checkpoints are
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(Path("/tmp/models") / name)
    tokenizer.save_pretrained(Path("/tmp/models") / name)
    print(name, sum(p.numel() for p in model.parameters()), "parameters", f"{time.time() - started:.1f} s", flush=True)
    del model
    torch.cuda.empty_cache()
