#!/usr/bin/env bash
# The GPU check (docs/training.md, "The GPU check"): what only a GPU can show, in one run of
# about 10 minutes on one H200-class GPU. Each step is a real sweep of experiments/gpt2_lr.py:
#   gpu-sweep  4 trials, bf16, one worker and one GPU each (ASHA)
#   gpu-large  one trial of a larger GPT-2 (12 layers, 768 wide, 512 tokens), for tokens/s
#   gpu-pack   4 one-worker trials at 0.25 GPU each: all four must run at once on one GPU
#   gpu-oom    one trial far too large for the GPU: it must end "oom", the sweep exit 1 not crash
#   gpu-nccl   one trial of 2 workers over NCCL (only where the machine has 2 GPUs or more)
# then scripts/gpu_baseline.py (the large trial's model in plain PyTorch DDP) and
# scripts/gpu_check_report.py: the best trial of gpu-sweep replayed and held to a stated
# tolerance, a table of tokens/s, peak memory and validation loss, the checks, and
# gpu_check.json (the figures for docs/benchmarks.md). Exit 0 when every check passed.
#
#   bash scripts/gpu_check.sh                 # results under ./gpu_check (OUT=... to change)
#   REHEARSAL=1 bash scripts/gpu_check.sh     # every step on CPU, tiny (tests/test_gpu_check.py)
#
# It installs tunetrain (editable, without dependencies) when it is not importable; torch
# with CUDA, Ray, MLflow and transformers must be there (scripts/gpu_wheelhouse.py carries
# them to a machine without a network).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu_check}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # absolute: the tracking URI and the report read it from here
python -c "import tunetrain" 2>/dev/null || pip install -q --no-deps -e .
# --no-baseline: each sweep runs exactly the trials its check counts.
COMMON=(--storage "$OUT/results" --tracking-uri "sqlite:///$OUT/mlflow.db" --no-report --no-baseline --no-register
        --set train.precision=bf16)
if [[ "${REHEARSAL:-0}" == 1 ]]; then
    # Every step on CPU with a few steps of the small model: the commands and the report work.
    GPUS=0
    TINY=(train.max_steps=4 train.eval_every=2 data.max_bytes=200000)
    LARGE=(train.max_steps=2 train.eval_every=2 data.max_bytes=200000 model_config.n_layer=1)
    PACK_SHARE='"CPU": 0.5'  # four at once on 2 CPUs
else
    python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible to torch')"
    GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
    COMMON+=(--use-gpu)
    TINY=(train.max_steps=300 train.eval_every=50 train.batch_size=32)
    LARGE=(model_config.n_layer=12 model_config.n_embd=768 model_config.n_head=12 model_config.context=512
           train.batch_size=16 train.max_steps=100 train.eval_every=50 data.max_bytes=4000000)
    PACK_SHARE='"CPU": 1, "GPU": 0.25'  # four at once on one GPU
fi
sets() { for kv in "$@"; do printf -- '--set\0%s\0' "$kv"; done; }
mapfile -d '' TINY_SETS < <(sets "${TINY[@]}")
mapfile -d '' LARGE_SETS < <(sets "${LARGE[@]}")
sweep() { python -m tunetrain sweep "$@"; }

sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-sweep --num-samples 4 "${TINY_SETS[@]}"
sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-large --num-samples 1 --scheduler fifo "${LARGE_SETS[@]}"

# The same experiment at a share of a GPU per trial (its resources line, rewritten).
sed -e "s/resources_per_worker={\"CPU\": 1}/resources_per_worker={$PACK_SHARE}/" \
    -e 's/name="gpt2_lr"/name="gpu_pack"/' experiments/gpt2_lr.py > "$OUT/gpu_pack.py"
grep -q "resources_per_worker={$PACK_SHARE}" "$OUT/gpu_pack.py"
sweep "$OUT/gpu_pack.py" "${COMMON[@]}" --name gpu-pack --num-samples 4 --scheduler fifo "${TINY_SETS[@]}"

if [[ "$GPUS" -ge 1 ]]; then
    # About 1 TB of activations: CUDA's out-of-memory error on any GPU. No trial completes: exit 1.
    status=0
    sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-oom --num-samples 1 --scheduler fifo \
        --set model_config.n_layer=24 --set model_config.n_embd=2048 --set model_config.n_head=16 \
        --set model_config.context=1024 --set train.batch_size=1024 --set train.max_steps=2 \
        --set train.eval_every=1 || status=$?
    [[ "$status" -eq 1 ]] || { echo "gpu-oom: expected exit 1 (no trial completed), got $status"; exit 1; }
fi
if [[ "$GPUS" -ge 2 || "${REHEARSAL:-0}" == 1 ]]; then  # on CPU: the same two workers over gloo
    sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-nccl --num-samples 1 --scheduler fifo \
        --workers-per-trial 2 "${TINY_SETS[@]}"
fi

if [[ "${REHEARSAL:-0}" == 1 ]]; then STEPS=(--steps 3 --warmup 1); else STEPS=(--steps 60 --warmup 10); fi
# The large trial's model in plain PyTorch, one process (as the trial: one worker, no DDP);
# with two GPUs also the 2-worker trial's model in torch's DDP over two processes.
python scripts/gpu_baseline.py --out "$OUT/baseline.json" "${STEPS[@]}" --set train.precision=bf16 "${LARGE_SETS[@]}"
if [[ "$GPUS" -ge 2 || "${REHEARSAL:-0}" == 1 ]]; then
    torchrun --standalone --nproc-per-node 2 scripts/gpu_baseline.py --out "$OUT/baseline_ddp.json" \
        "${STEPS[@]}" --set train.precision=bf16 "${TINY_SETS[@]}"
fi
python scripts/gpu_check_report.py "$OUT" --gpus "$GPUS"
