# Call 2 on a lent GPU for the reasons recipe (recipes/gpu/sft-smollm2-lora-alfworld-searcher-reasons.yaml, issue 48
# item 5), within 30 s of smoke.sh; packed like job.sh (scripts/device/pack.sh), whose demonstrations step also packs
# the reasoned ones when they exist (collect them first: `stratagym sft --config RECIPE --demos-only`, or the recipe's
# own first minutes). Trains the 2 epochs (saving every 200 steps: a run stopped by the limit still leaves a checkpoint
# to export with `stratagym sft --export-from`), then evaluates greedily on all 30 games of both ALFWorld evaluation
# splits in bf16, and sends back the adapter, the records (with transcripts) and the logs, each archive under 16 MB.
# Not yet run (written 2026-12-05 on a session without a GPU): smoke.sh's checks come first.
set -x
J=/tmp/job; L=$OUT; R=recipes/gpu/sft-smollm2-lora-alfworld-searcher-reasons.yaml; N=smollm2-lora-alfworld-searcher-reasons
export PYTHONPATH=$J/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 USE_HUB_KERNELS=0
SG="python3 -m stratagym.cli"
T0=$(date +%s)
cat $J/gguf.a .dev2/gguf.b > $J/model.gguf && $SG models import $J/model.gguf --out build/models/smollm2-135m-instruct-q4-1 || exit 7
tar -xJf .dev2/games.tar.xz || exit 8
mkdir -p runs/sft/$N && xz -dc .dev2/demos-reasons.jsonl.xz > runs/sft/$N/demos.jsonl || exit 9
timeout 360 $SG sft --config $R --resume > $L/sft.log 2>&1
[ -d data/checkpoints/sft-$N ] || $SG sft --config $R --export-from "$(ls -d runs/sft/$N/trainer/checkpoint-* | sort -V | tail -1)" >> $L/sft.log 2>&1
mkdir -p runs/alfworld-gpu
for s in in_distribution out_of_distribution; do
  timeout $(( 540 - ($(date +%s) - T0) )) $SG eval data/checkpoints/sft-$N --env stratagym/ALFWorld-v0 --split $s -n 30 -b 30 \
    -E max_steps=30 -E context_k=2 --label "SmolLM2-135M LoRA SFT (searcher demos with reasons, 2 epochs)" \
    -o runs/alfworld-gpu/reasons__$s.json > $L/eval-$s.log 2>&1 &
done; wait
echo "job seconds $(( $(date +%s) - T0 ))"
tar -cJf $L/adapter-$N.tar.xz data/checkpoints/sft-$N runs/sft/$N/sft_summary.json 2>/dev/null
tar -cJf $L/evals.tar.xz runs/alfworld-gpu
grep -h "success " $L/eval-*.log
