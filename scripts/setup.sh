#!/usr/bin/env bash
# Installs what flowpipe needs on a fresh Debian/Ubuntu machine: system packages (the MQTT broker
# for the MQTT sink and its tests, Graphviz for graph drawings, an OpenCL ICD loader), then flowpipe
# itself with its test extras (PoCL gives an OpenCL CPU device where no GPU driver exists).
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  need=()
  for pkg in mosquitto graphviz ocl-icd-libopencl1; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
  fi
  # the distribution's broker service is not needed: tests start their own on loopback
  $SUDO systemctl disable --now mosquitto >/dev/null 2>&1 || true
fi
python3 -m pip install -q --upgrade pip
python3 -m pip install -q -e ".[test]"
echo "flowpipe installed: $(command -v flowpipe)"
