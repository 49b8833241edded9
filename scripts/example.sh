#!/usr/bin/env bash
# Builds tern and runs it on a small real model from ../shared/fixtures: a Python-writing model continues a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=../shared/fixtures/models/tern-py-13m
prompt_ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$model/golden.json'))['prompts'][0])))")
./build/tern generate --model "$model" --prompt-ids "$prompt_ids" --max-tokens 32
