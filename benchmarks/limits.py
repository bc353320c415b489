"""What this machine can do at most: matrix-product GFLOP/s and memory bandwidth, measured here.

    python -m benchmarks.limits

The generation benchmark (`benchmarks/rollouts.py`) divides the work of a path (the floating-point operations of
every token it must process) by these rates to get the path's floor, and reports each path as a fraction of it.
Measured with torch's own kernels on all of torch's threads, so "the machine" means what PyTorch can reach on it:
a large square product (the best case) and the product one decode step of a 16-row batch does in SmolLM2-135M
(16 x 576 times 576 x 1536, where a CPU is far below its best), in fp32 and bf16; and a large copy.
"""

from __future__ import annotations

import json
import time

SHAPES = {"large": (1024, 1024, 1024), "decode": (16, 576, 1536)}


def gemm_gflops(m: int, k: int, n: int, dtype, seconds: float = 0.5) -> float:
    """GFLOP/s of `m x k` times `k x n` products in `dtype`: the best of several timed batches after a warm-up."""
    import torch

    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    reps = max(3, int(seconds * 1e11 / (2 * m * k * n)) // 10)
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while True:
        started = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - started) / reps)
        if time.perf_counter() > deadline:
            break
    return 2 * m * k * n / best / 1e9


def copy_gb_per_s(mib: int = 256) -> float:
    """Bytes read plus bytes written per second by a large tensor copy (a streaming memory bandwidth)."""
    import torch

    src = torch.empty(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    best = float("inf")
    for _ in range(8):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * 4 / best / 1e9


def measure(seconds: float = 0.5) -> dict:
    """{"fp32_large_gflops", "fp32_decode_gflops", "bf16_large_gflops", "bf16_decode_gflops", "copy_gb_per_s",
    "threads"}: a few seconds."""
    import torch

    limits = {"threads": torch.get_num_threads()}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for shape, (m, k, n) in SHAPES.items():
            limits[f"{name}_{shape}_gflops"] = round(gemm_gflops(m, k, n, dtype, seconds), 1)
    limits["copy_gb_per_s"] = round(copy_gb_per_s(), 1)
    return limits


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
