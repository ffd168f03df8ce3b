#!/usr/bin/env bash
# Installs what bakery needs on a fresh Debian bookworm machine (run as root) and the
# package itself (editable, with the test and ray extras). Idempotent.
# Without a hardware GPU driver it installs Mesa lavapipe (a CPU Vulkan device) from
# bookworm-backports: bookworm's own Mesa 22.3 cannot create a slangpy device.
set -euo pipefail
cd "$(dirname "$0")/.."

have_hw_vulkan() {
  # An NVIDIA/AMD/Intel ICD manifest means a hardware driver is installed.
  ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json \
     /usr/local/nvidia/share/vulkan/icd.d/*.json 2>/dev/null | grep -q .
}
have_lavapipe() {
  dpkg-query -W -f='${Version}\n' mesa-vulkan-drivers 2>/dev/null | grep -q 'bpo12'
}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! have_hw_vulkan && ! have_lavapipe; then
  echo "setup: no hardware Vulkan driver; installing Mesa lavapipe from bookworm-backports" >&2
  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
fi

# Tools the tests use when present (they skip without them): headless Chromium opens
# out/report.html and runs `bakery view`, glslangValidator compiles the generated GLSL and
# HLSL decoders; npm installs three.js for `bakery view` (below).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=""
  command -v chromium >/dev/null || missing="$missing chromium"
  command -v glslangValidator >/dev/null || missing="$missing glslang-tools"
  command -v npm >/dev/null || missing="$missing npm"
  if [ -n "$missing" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null \
      || echo "setup: could not install$missing; the tests that need them will skip" >&2
  fi
fi

# Into the python3 the README's commands run; a Debian python3 marked externally managed
# (PEP 668) refuses that unless told (an older pip ignores the variable).
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check -e '.[test,ray]'

# three.js for `bakery view`, pinned by package-lock.json (Playwright drives the system
# Chromium above: no browser download).
if command -v npm >/dev/null; then
  npm ci --ignore-scripts --no-audit --no-fund --silent
else
  echo "setup: npm not found; \`bakery view\` needs three.js (apt-get install npm, then npm ci)" >&2
fi
