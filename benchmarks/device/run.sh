#!/bin/bash
# The notebooks' gpu profiles on the device machine, with random-weight Qwen3 models of the real shapes (no
# weights can be fetched there): memory and time per step are real, learning metrics are not. Results: $OUT.
#   bash .gpu/run.sh [gen nb01 nb04 nb02 nb03 nb01t4 ...]   SECONDS_LEFT=470 caps the whole run (device time is scarce)
# The ...t4 runs are the 16gb card recipe (Qwen3-0.6B's shape, LoRA, fp16 autocast) with the allocator capped at a
# T4's 14.7 GiB and AGENT_RL_FAKE_GPU=T4 (the memory check sees a T4); nb01l4: the 24gb one (1.7B, LoRA, bf16, 22 GiB).
# Measured 2026-11-26 on an H200 (docs/gpu.md): setup ~15 s, both models ~25 s, then per notebook the times below.
T0=$(date +%s); LIMIT=${SECONDS_LEFT:-470}; mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/logs/env.txt
tar -xJf .gpu/site312.tar.xz -C /tmp || exit 3
export PYTHONPATH=/tmp/site312:$PWD:$PWD/envs PYTHONUNBUFFERED=1 MPLBACKEND=Agg HF_HUB_OFFLINE=1
# `openenv collect` (notebook 02) as a console script of this Python
mkdir -p /tmp/bin && printf '#!%s\nimport sys\nfrom openenv.cli.__main__ import main\nsys.exit(main())\n' \
  "$(which python3)" > /tmp/bin/openenv && chmod +x /tmp/bin/openenv && export PATH=/tmp/bin:$PATH
python3 -W ignore -c "import torch, transformers, trl, openenv, reasoning_gym; print('imports ok', torch.__version__, \
  transformers.__version__, trl.__version__)" || exit 4
python3 .gpu/build_model.py 2>&1 | grep parameters
echo "setup and models: $(( $(date +%s) - T0 )) s"
M=/tmp/models/qwen3-1.7b-random; M06=/tmp/models/qwen3-0.6b-random
T4="--model $M06 --lora True --precision fp16"; L4="--model $M --lora True --precision bf16"
run() {  # name, timeout, script and flags
  local n=$1 t=$2; shift 2; local left=$(( LIMIT - ($(date +%s) - T0) ))
  (( left < 40 )) && { echo "skip $n: ${left} s left"; return; }; (( t > left )) && t=$left
  echo "== $n (timeout $t s) at $(( $(date +%s) - T0 )) s"
  AGENT_RL_RUNS=/tmp/runs/$n CAP_GIB=$CAP AGENT_RL_FAKE_GPU=$FAKE timeout -s INT -k 20 $t python3 .gpu/measure.py $n "$@" > $OUT/logs/$n.log 2>&1
  echo "rc $?"; grep -E "total  |s a step|steps in|\[measure\]|Error" $OUT/logs/$n.log | tail -8; }
for nb in ${@:-nb01 nb04 nb02 nb03}; do CAP=; FAKE=; CARD=
case $nb in *t4) CAP=14.7; FAKE=T4; CARD=$T4;; *l4) CAP=22; FAKE=L4; CARD=$L4;; esac
case $nb in
  # generation paths on notebook 01's prompt (benchmarks/device/generation.py), compiling last: ~3 minutes at most
  gen) (( $(date +%s) - T0 < LIMIT - 60 )) && { echo "== gen at $(( $(date +%s) - T0 )) s"; \
         GEN_SECONDS=${GEN_SECONDS:-150} timeout -s INT -k 10 ${GEN_TIMEOUT:-200} python3 .gpu/generation.py \
         > $OUT/logs/gen.log 2>&1; echo "rc $?"; grep -E "^(rollouts|eval|lora)|failed|Error" $OUT/logs/gen.log; } ;;
  # 01: ~30 s to load, ~8 s a probe (16 sums, 256 tokens), ~10 s a GRPO step (4 rollouts of 256 tokens)
  nb01) run nb01 220 .gpu/01_grpo_walkthrough.py --profile gpu --model $M --max-steps 3 --preflight-n 0 --eval-n 8 \
          --report-to none ;;
  # 04: one GRPO step (8 rollouts of 512 tokens) ~20 s; probes of 9 tasks
  nb04) run nb04 200 .gpu/04_openreward_spec.py --profile gpu --model $M --max-steps 3 --eval-tasks 9 --preflight-n 2 \
          --report-to none ;;
  # 02: the local teacher instead of gpt-5-mini; 6 SFT steps in 7 s
  nb02) run nb02 90 .gpu/02_sft_warmup.py --profile gpu --model $M --teacher local --n-episodes 48 --num-train-epochs 1 \
          --eval-n 16 --report-to none ;;
  # 03: echo on the random Qwen3-0.6B (Qwen2.5-0.5B's stand-in), Wordle and the factory version: ~95 s
  nb03) run nb03 120 .gpu/03_wordle_rollout_func.py --profile gpu --model $M --echo-model /tmp/models/qwen3-0.6b-random \
          --echo-steps 2 --max-steps 2 --gradient-accumulation-steps 4 --factory-steps 1 --eval-games 4 --report-to none ;;
  # the card recipes, nothing else changed: ~30 s to load and the probes, then steps of the smaller model
  nb01t4|nb01l4) run $nb 110 .gpu/01_grpo_walkthrough.py --profile gpu $CARD --max-steps ${STEPS:-2} --preflight-n 0 \
            --eval-n 8 --eval-max-new-tokens 64 --report-to none ;;
  nb04t4) run $nb 110 .gpu/04_openreward_spec.py --profile gpu $CARD --max-steps 2 --eval-tasks 4 --preflight-n 2 --report-to none ;;
  nb02t4) run $nb 70 .gpu/02_sft_warmup.py --profile gpu $CARD --teacher local --n-episodes 48 --num-train-epochs 1 \
            --eval-n 16 --report-to none ;;
  nb03t4) run $nb 100 .gpu/03_wordle_rollout_func.py --profile gpu $CARD --echo-model $M06 --echo-steps 1 --max-steps 2 \
            --gradient-accumulation-steps 4 --factory-steps 1 --eval-games 4 --report-to none ;;
esac; done
cd $OUT && tar -czf logs.tar.gz logs && rm -rf logs; echo "total $(( $(date +%s) - T0 )) s"
