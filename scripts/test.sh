#!/usr/bin/env bash
# Builds tern and runs the whole test suite (GPU tests skip where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Node packages the tests drive tern with: ajv validates constrained outputs, openai is the HTTP client.
npm ci --prefix tests/grammar/validator --no-audit --no-fund
npm ci --prefix tests/e2e --no-audit --no-fund
ctest --test-dir build -j2 --output-on-failure --timeout 900
