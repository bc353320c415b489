"""Benchmarks: scripts that print numbers and write them (JSON + PNG plots) into runs/benchmarks/.

    python -m benchmarks.run_all                 # everything, full size (what `make bench` runs)
    python -m benchmarks.run_all --size tiny     # each benchmark in seconds (CI proves they work)

- `env_servers`: episodes/s and per-call latency of the environment servers at 1-128 sessions,
  against an OpenEnv server left at its defaults (1 session, uvicorn's default logging).
- `training`: seconds per GRPO step and the share of it spent in the environment.
- `precision`: a training step and a generation in fp32 and in bf16 autocast, on this CPU.
- `rollouts`: the machine's GEMM GFLOP/s and bandwidth (`limits`), then a GRPO group and notebook 01's
  evaluation generated every way, each as a fraction of the floor those limits give.
- `notebooks`: wall time of every notebook under PROFILE=tiny (and, on request, the test suite).

Speed numbers live here, never in timed tests: a shared machine is too noisy to assert on them.
"""
