#!/usr/bin/env bash
# The GPU check (docs/training.md): a short GPT-2 sweep with --use-gpu (4 trials, bf16, one
# worker and one GPU per trial) and one trial of a larger GPT-2 (12 layers, 768 wide, 512
# tokens), then a table of tokens/s, peak GPU memory and final validation loss per trial,
# headed by the GPU's name. Under 8 minutes on one H200-class GPU.
#
#   bash scripts/gpu_check.sh                 # results under ./gpu_check (OUT=... to change)
#   REHEARSAL=1 bash scripts/gpu_check.sh     # the same steps on CPU, tiny: check the script first
#
# It installs tunetrain (editable, without dependencies) when it is not importable; torch
# with CUDA, Ray, MLflow and transformers must be installed already.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu_check}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # absolute: the tracking URI and the table read it from here
python -c "import tunetrain" 2>/dev/null || pip install -q --no-deps -e .
COMMON=(--storage "$OUT/results" --tracking-uri "sqlite:///$OUT/mlflow.db" --no-report --set train.precision=bf16)
if [[ "${REHEARSAL:-0}" == 1 ]]; then
    # Every step on CPU with a few steps of the small model: the commands and the table work.
    SWEEP=(--set train.max_steps=4 --set train.eval_every=2 --set data.max_bytes=200000)
    LARGE=(--set train.max_steps=2 --set train.eval_every=2 --set data.max_bytes=200000 --set model_config.n_layer=1)
else
    python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible to torch')"
    COMMON+=(--use-gpu)
    SWEEP=(--set train.max_steps=300 --set train.eval_every=50 --set train.batch_size=32)
    LARGE=(--set model_config.n_layer=12 --set model_config.n_embd=768 --set model_config.n_head=12
           --set model_config.context=512 --set train.batch_size=16 --set train.max_steps=100
           --set train.eval_every=50 --set data.max_bytes=4000000)
fi

python -m tunetrain sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-sweep --num-samples 4 "${SWEEP[@]}"
python -m tunetrain sweep experiments/gpt2_lr.py "${COMMON[@]}" --name gpu-large --num-samples 1 --scheduler fifo \
    "${LARGE[@]}"

python - "$OUT" <<'PY'
import sys

import torch

from tunetrain.analysis import load_sweep

out = sys.argv[1]
if torch.cuda.is_available():
    print(f"\nGPU: {torch.cuda.get_device_name(0)} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB), "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}")
else:
    print(f"\nNo GPU (a rehearsal on CPU), torch {torch.__version__}")
print(f"{'sweep':<10} {'trial':<11} {'status':<14} {'tokens/s':>10} {'peak GiB':>9} {'val_loss':>9}")
for name in ("gpu-sweep", "gpu-large"):
    sweep = load_sweep(name, tracking_uri=f"sqlite:///{out}/mlflow.db")
    for _, row in sweep.trials().iterrows():
        print(f"{name:<10} {row['trial']:<11} {row['status']:<14} {row.get('tokens_per_s', float('nan')):>10.0f} "
              f"{row.get('peak_memory_gib', float('nan')):>9.2f} {row.get('val_loss', float('nan')):>9.3f}")
PY
