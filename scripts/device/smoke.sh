# Call 1 on a lent GPU (scripts/device/pack.sh): unpack the packages, keep GGUF part A in /tmp/job, and run the
# whole LoRA SFT -> export -> eval path on a tiny model, so a missing package or a CUDA-only failure shows before
# the real job (it found two: pydantic missing there; transformers 5.25 asking for hub kernels on CUDA).
set -x
J=/tmp/job; mkdir -p $J; cp .dev1/gguf.a $J/ 2>/dev/null; tar -xJf .dev1/site.tar.xz -C $J && tar -xJf .dev1/tiny-model.tar.xz -C .dev1 || exit 3
export PYTHONPATH=$J/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 USE_HUB_KERNELS=0
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "
import sys, torch, transformers, trl, datasets, peft, accelerate, textworld, gymnasium, tatsu, alfworld, fast_downward
print(sys.version); print('torch', torch.__version__, torch.cuda.is_available(), 'tf', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'ds', datasets.__version__, 'acc', accelerate.__version__)
import stratagym.cli
" || exit 4
time python3 -m stratagym.cli sft --config scripts/device/smoke-sft.yaml || exit 5
time python3 -m stratagym.cli eval /tmp/smoke/ckpt --env stratagym/ALFWorld-v0 --split in_distribution -n 2 -b 2 -E max_steps=3 -E context_k=2 -o /tmp/smoke/rec.json || exit 6
python3 -c "import json; r=json.load(open('/tmp/smoke/rec.json')); print({k: r[k] for k in list(r)[:12]})" | head -c 3000
ls -la $J
echo SMOKE-OK
