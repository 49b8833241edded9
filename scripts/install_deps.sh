#!/usr/bin/env bash
# Installs every Debian package tern needs to build and test. Run as root on Debian 12.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev  # JSON, command line, formatting
  libpcre2-dev libutf8proc-dev             # tokenizer regexes with Unicode properties, normalization
  libicu-dev                               # Unicode character names (\N{...} in chat templates)
  libboost-dev                             # Asio/Beast HTTP server
  libgtest-dev libgmock-dev libbenchmark-dev  # tests, benchmarks
  python3
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# End-to-end tests drive the server with the openai npm client; keep a Node.js that is already there
# (Debian's npm package conflicts with NodeSource's nodejs).
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
