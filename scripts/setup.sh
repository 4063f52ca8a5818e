#!/usr/bin/env bash
# Installs what flowpipe needs on a fresh Debian/Ubuntu machine: system packages, then flowpipe itself
# with its test extras (PoCL gives an OpenCL CPU device where no GPU driver exists).
#   mosquitto            MQTT broker: the MQTT sink's tests start one on loopback
#   graphviz             PNG/SVG drawings from 'flowpipe graph'
#   ocl-icd-libopencl1   the OpenCL ICD loader pyopencl talks to
#   pocl-opencl-icd      a distribution build of PoCL (OpenCL on the CPU) whose kernels build on CPUs newer than
#                        the LLVM inside the PyPI PoCL knows (that one fails with "unknown target CPU generic")
#   chromium             headless browser: the MJPEG preview test looks at the page for real
#   ffmpeg               makes H.264 and MPEG-TS test media (corruption, resolution change)
#   gst-rtsp-server ...  a real RTSP server on loopback for the reconnect tests (system Python + GI)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  need=()
  for pkg in mosquitto graphviz ocl-icd-libopencl1 pocl-opencl-icd chromium ffmpeg python3-gi gir1.2-gstreamer-1.0 \
             gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good; do
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
python3 -m pip install -q --no-deps -e ./eval  # the evaluation (footage, truth, scores): a checkout's, not the product's
echo "flowpipe installed: $(command -v flowpipe)"
