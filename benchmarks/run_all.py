"""Run every benchmark; write runs/benchmarks/results.json, one PNG per benchmark and a Markdown table.

    python -m benchmarks.run_all [--size tiny|full] [--only env_servers,env_capacity,training,loss_pass,precision,rollouts,notebooks]
                                 [--with-test-suite] [--out DIR]

`make bench` runs the full size. --size tiny makes each benchmark finish in seconds (CI runs it
to prove the benchmarks still work; its numbers mean nothing). The machine (cores, memory, load
average before and after) is recorded with the numbers: on a shared machine, read the load first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from helpers.runs import run_dir

from . import env_capacity, env_servers, loss_pass, notebooks, precision, rollouts, training

BENCHMARKS = {"env_servers": env_servers, "env_capacity": env_capacity, "training": training, "loss_pass": loss_pass, "precision": precision,
              "rollouts": rollouts, "notebooks": notebooks}


def machine() -> dict:
    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory_gib = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        gpu = None
    return {
        "cpus": os.cpu_count(), "memory_gib": memory_gib, "gpu": gpu,
        "platform": platform.platform(), "python": platform.python_version(),
        "versions": {p: version(p) for p in ("trl", "transformers", "torch", "openenv", "openreward",
                                             "uvicorn", "websockets")},
    }


def load_average() -> list | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def markdown(results: dict) -> str:
    """The tables for the README."""
    lines = []
    m = results["machine"]
    lines.append(f"Machine: {m['cpus']} CPU cores, {m['memory_gib']} GiB, GPU: {m['gpu'] or 'none'}; "
                 f"load average {results['load_average_before']} before, {results['load_average_after']} after; "
                 f"size {results['size']}.")
    servers = results.get("env_servers")
    if servers:
        lines += ["", "| server | protocol | sessions | episodes/s | step p50 (ms) | step p99 (ms) | "
                      "reset p50 (ms) | refused sessions |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name, data in servers["servers"].items():
            for lv in data["levels"]:
                lines.append(f"| {name} | {data['protocol']} | {lv['sessions']} | {lv['episodes_per_s']:,} | "
                             f"{lv['step_p50_ms']} | {lv['step_p99_ms']} | {lv['reset_p50_ms']} | "
                             f"{lv['refused_sessions']} |")
    capacity = results.get("env_capacity")
    if capacity:
        lines += env_capacity.markdown(capacity)
    train = results.get("training")
    if train:
        lines += ["", "| GRPO profile | model | rollouts/step | s/step | env ms/step | env share |",
                  "|---|---|---:|---:|---:|---:|"]
        for p in train["profiles"].values():
            lines.append(f"| {p['profile']} | {p['model']} | {p['rollouts_per_step']} | {p['s_per_step']:.3f} | "
                         f"{p['env_s_per_step'] * 1000:.1f} | {p['env_share_pct']:.2f} % |")
    loss = results.get("loss_pass")
    if loss:
        lim = loss["limits"]
        lines += ["", f"GRPO loss pass: one micro-batch of {loss['rows']} rollouts (up to {loss['tokens_per_row']} tokens), "
                      f"{loss['model']}, lowest {loss['frozen_layers']} layers frozen, forward + backward. Floor: "
                      f"{loss['floor_gflop']} GFLOP at fp32 {lim['fp32_large_gflops']} / bf16 {lim['bf16_large_gflops']} "
                      f"GFLOP/s.", "", "| precision | path | seconds | vs plain | of the floor |", "|---|---|---:|---:|---:|"]
        for r in loss["results"]:
            lines.append(f"| {r['precision']} | {r['path']} | {r['seconds']} | {r['speedup'] or ''}x | {r['of_floor']:.0%} |")
    prec = results.get("precision")
    if prec:
        cpu = prec["cpu"]
        lines += ["", f"Precision on {cpu['model_name']} (flags: {', '.join(cpu['flags']) or 'none'}), {prec['model']}:",
                  "", "| precision | training step (s) | start-up probe (s) | generate (s) | generated tokens/s |",
                  "|---|---:|---:|---:|---:|"]
        for r in prec["rows"]:
            lines.append(f"| {r['precision']} | {r['train_step_s']} | {r['probe_pass_s']} | {r['generate_s']} | "
                         f"{r['generate_tokens_per_s']} |")
    rolls = results.get("rollouts")
    if rolls:
        lim = rolls["limits"]
        lines += ["", f"Generation (transformers {rolls['transformers']}, {rolls['torch_threads']} threads). The machine: "
                      f"fp32 {lim['fp32_large_gflops']} GFLOP/s on a large product, {lim['fp32_decode_gflops']} at a decode "
                      f"step's shape; bf16 {lim['bf16_large_gflops']} / {lim['bf16_decode_gflops']}; copy "
                      f"{lim['copy_gb_per_s']} GB/s. The floor: the shape's FLOPs (shared prefix once) at the fp32 "
                      f"large-product rate (a _bf16 path's: the bf16 rate)."]
        for shape in ("group", "evaluation"):
            if shape not in rolls:
                continue
            info = rolls[shape]
            what = (f"{info['rollouts']} rollouts of one {info['prompt_tokens']}-token prompt, up to "
                    f"{info['max_new_tokens']} new tokens at temperature {rolls['temperature']}" if shape == "group" else
                    f"{info['questions']} held-out questions (~{info['prompt_tokens_mean']} prompt tokens), greedy, up "
                    f"to {info['max_new_tokens']} new tokens")
            lines += ["", f"{shape}: {what}; {info['model']}", "",
                      "| path | seconds | tokens | tokens/s | replies/s | vs the first path | of the floor | "
                      "same replies |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for r in rolls["rows"]:
                if r["shape"] != shape:
                    continue
                if "error" in r:
                    lines.append(f"| {r['path']} | failed: {r['error'][:120]} | | | | | | |")
                else:
                    lines.append(f"| {r['path']} | {r['seconds']} | {r['tokens']} | {r['tokens_per_s']} | "
                                 f"{r.get('replies_per_s', '')} | {r.get('speedup', '')}x | {r['of_floor']:.0%} | "
                                 + (f"{r['same_replies']}/{rolls['evaluation']['questions']} as {r['same_as']}"
                                    if "same_replies" in r else "") + " |")
    nbs = results.get("notebooks")
    if nbs:
        lines += ["", "| notebook (PROFILE=tiny) | wall time (s) | ok |", "|---|---:|---|"]
        for r in nbs["notebooks"]:
            lines.append(f"| {r['notebook']} | {r['wall_s']} | {'yes' if r['ok'] else 'FAILED'} |")
        if "test_suite" in nbs:
            lines.append(f"| whole test suite | {nbs['test_suite']['wall_s']} | "
                         f"{'yes' if nbs['test_suite']['exit_code'] == 0 else 'FAILED'} |")
    return "\n".join(lines) + "\n"


def _write(results: dict, out_dir: Path) -> Path:
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2))
    (out_dir / "results.md").write_text(markdown(results))
    return path


def run_all(size: str = "full", only: list[str] | None = None, with_test_suite: bool = False,
            out_dir: Path | None = None) -> Path:
    out_dir = Path(out_dir) if out_dir else run_dir("benchmarks")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {"size": size, "machine": machine(), "load_average_before": load_average(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"benchmarks ({size}) on {results['machine']['cpus']} cores, load average "
          f"{results['load_average_before']}; writing to {out_dir}", flush=True)
    for name in only or list(BENCHMARKS):
        module = BENCHMARKS[name]
        began = time.perf_counter()
        print(f"\n== {name} ==", flush=True)
        log_dir = out_dir / f"{name}-work"
        kwargs = {"with_test_suite": with_test_suite} if name == "notebooks" else {}
        result = module.run(size, log_dir=log_dir, out=lambda line: print(line, flush=True), **kwargs)
        result["bench_wall_s"] = round(time.perf_counter() - began, 1)
        result["plot"] = str(module.plot(result, out_dir / f"{name}.png"))
        results[name] = result
        results["load_average_after"] = load_average()
        _write(results, out_dir)  # after each benchmark: a long run interrupted keeps what it measured
    path = _write(results, out_dir)
    print("\n" + markdown(results))
    print(f"wrote {path}")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["tiny", "full"], default="full")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--with-test-suite", action="store_true",
                        help="also time the whole test suite (long)")
    parser.add_argument("--out", default=None, help="output folder (default runs/benchmarks)")
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    unknown = [n for n in only or [] if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    run_all(args.size, only, args.with_test_suite, args.out)


if __name__ == "__main__":
    sys.exit(main())
