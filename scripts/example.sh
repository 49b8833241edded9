#!/usr/bin/env bash
# Builds tern and runs it on a small real model from ../shared/fixtures: a model trained on Python source continues
# a prompt, its text streamed as it is generated.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/tern generate --model ../shared/fixtures/models/tern-py-13m --prompt 'def fibonacci(n):' --echo \
  --max-tokens 64 --temperature 0.7 --top-p 0.9 --seed 7
