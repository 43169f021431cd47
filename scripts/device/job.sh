# Call 2 on a lent GPU (scripts/device/pack.sh), within 30 s of smoke.sh: the GGUF's second part, the generated
# train games and the searcher's demonstrations arrive; SmolLM2 is imported (its safetensors' sha256 is printed: it
# matched this machine's import, a672150f...), the two searcher clones are trained side by side (the CPU recipe's
# 150 steps, and the GPU recipe's 2 epochs) and each is evaluated greedily on all 30 games of both ALFWorld
# evaluation splits, in bf16. Adapters, records and logs come back from $OUT as separate archives (16 MB each at most).
# As run on 2026-12-04 the SFT limit was 300 s: the 2-epoch run (2.4 steps/s beside the other) was stopped at step
# 527 of 720 before its evals, and the packing at the end made one 41 MB archive that could not come back; the
# adapters were recovered from the trainer checkpoints (`stratagym sft --export-from`). Both are fixed below.
set -x
J=/tmp/job; L=$OUT
export PYTHONPATH=$J/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 USE_HUB_KERNELS=0
SG="python3 -m stratagym.cli"
T0=$(date +%s)
cat $J/gguf.a .dev2/gguf.b > $J/model.gguf && sha256sum $J/model.gguf
$SG models import $J/model.gguf --out build/models/smollm2-135m-instruct-q4-1 || exit 7
sha256sum build/models/smollm2-135m-instruct-q4-1/model.safetensors
tar -xJf .dev2/games.tar.xz || exit 8
for d in runs/sft/smollm2-lora-alfworld-searcher runs/sft/smollm2-lora-alfworld-searcher-2ep; do
  mkdir -p $d && xz -dc .dev2/demos.jsonl.xz > $d/demos.jsonl; done
mkdir -p runs/alfworld-gpu
ev() {  # ev CHECKPOINT NAME: both splits side by side
  for s in in_distribution out_of_distribution; do
    timeout $(( 520 - ($(date +%s) - T0) )) $SG eval $1 --env stratagym/ALFWorld-v0 --split $s -n 30 -b 30 -E max_steps=30 -E context_k=2 \
      --label "$2" -o runs/alfworld-gpu/$2__$s.json > $L/eval-$2-$s.log 2>&1 &
  done; wait; }
( timeout 380 $SG sft --config recipes/cpu/sft-smollm2-lora-alfworld-searcher.yaml --resume > $L/sft-150.log 2>&1 \
  && ev data/checkpoints/sft-smollm2-lora-alfworld-searcher searcher-sft-150steps ) &
( timeout 380 $SG sft --config recipes/gpu/sft-smollm2-lora-alfworld-searcher.yaml --resume > $L/sft-2ep.log 2>&1 \
  && ev data/checkpoints/sft-smollm2-lora-alfworld-searcher-2ep searcher-sft-2ep ) &
nvidia-smi dmon -c 1 2>/dev/null | tail -1
wait
echo "job seconds $(( $(date +%s) - T0 ))"
for n in smollm2-lora-alfworld-searcher smollm2-lora-alfworld-searcher-2ep; do
  [ -d data/checkpoints/sft-$n ] && tar -cJf $L/adapter-$n.tar.xz data/checkpoints/sft-$n
  cp runs/sft/$n/sft_summary.json $L/sft_summary-$n.json 2>/dev/null; done
tar -cJf $L/evals.tar.xz runs/alfworld-gpu
ls -la $L
grep -h "success " $L/eval-*.log
