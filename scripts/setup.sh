#!/usr/bin/env bash
# Installs flowpipe into the active python3 on a Debian/Ubuntu machine (a virtual environment, if one is active).
#   bash scripts/setup.sh          what running a graph needs: flowpipe and its run dependencies, with the scikit-image
#                                  photographs the sample clips are made from, and an OpenCL CPU device
#   bash scripts/setup.sh --test   that, then what the tests, the linters and the evaluation need besides
#
# Debian packages for running:
#   pocl-opencl-icd      a distribution build of PoCL (OpenCL on the CPU) whose kernels build on CPUs newer than
#                        the LLVM inside the PyPI PoCL knows (that one fails with "unknown target CPU generic");
#                        graphs that ask for the OpenCL backend (gpu_zero_copy.yaml) need a device where no GPU
#                        driver exists
#   ocl-icd-libopencl1   the system's OpenCL ICD loader (pyopencl's wheel carries its own; OpenVINO's GPU
#                        plugin and other OpenCL programs use this one)
# FFmpeg is not one of them: PyAV's and OpenCV's wheels carry their own (libx264 included).
# Debian packages for the tests:
#   mosquitto            MQTT broker: the MQTT sink's tests start one on loopback
#   graphviz             PNG/SVG drawings from 'flowpipe graph'
#   chromium             headless browser: the console and MJPEG preview tests look at the page for real
#   ffmpeg               makes H.264 and MPEG-TS test media (corruption, resolution change)
#   gst-rtsp-server ...  a real RTSP server on loopback for the reconnect tests (system Python + GI)
set -euo pipefail
cd "$(dirname "$0")/.."
test_too=0
case "${1:-}" in
  "") ;;
  --test) test_too=1 ;;
  *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
esac
run_pkgs=(ocl-icd-libopencl1 pocl-opencl-icd)
test_pkgs=(mosquitto graphviz chromium ffmpeg python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-rtsp-server-1.0
           gstreamer1.0-plugins-base gstreamer1.0-plugins-good)
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  want=("${run_pkgs[@]}")
  [ "$test_too" -eq 0 ] || want+=("${test_pkgs[@]}")
  need=()
  for pkg in "${want[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
  fi
  if [ "$test_too" -eq 1 ]; then
    # the distribution's broker service is not needed: tests start their own on loopback
    $SUDO systemctl disable --now mosquitto >/dev/null 2>&1 || true
  fi
fi
python3 -m pip install -q --upgrade pip
if [ "$test_too" -eq 0 ]; then
  python3 -m pip install -q -e ".[sample]"
else
  python3 -m pip install -q -e ".[test]"
  python3 -m pip install -q --no-deps -e ./eval  # the evaluation (footage, truth, scores): a checkout's, not the product's
  python3 -m pip install -q -e ./examples/03_onnxruntime_backend  # a backend of its own package (ONNX Runtime): its tests
fi
echo "flowpipe installed: $(command -v flowpipe)"
