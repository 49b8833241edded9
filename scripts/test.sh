#!/usr/bin/env bash
# Builds tern and runs the whole test suite (GPU tests skip where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build -j2 --output-on-failure --timeout 900
