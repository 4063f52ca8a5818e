# On the 16-core GPU machine (the device tool, carrying .whl and .device with device-env.sh and the models):
#   bash benchmarks/device_scaling.sh   -> face blur, 16 streams, over 1..16 processes, GPU and CPU inference
set -u
source .device/device-env.sh
rm -rf /tmp/t && cp -r . /tmp/t && cd /tmp/t
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . > /dev/null 2>&1
export FLOWPIPE_CACHE=/tmp/t/.device/cache
mkdir -p /tmp/run && cd /tmp/run
for cfg in "GPU 1 8" "GPU 2 4" "GPU 4 4" "GPU 8 2" "GPU 16 1" "CPU 1 8" "CPU 4 4" "CPU 8 2"; do
  set -- $cfg; dev=$1; p=$2; w=$3
  timeout 120 python3 -c 'import sys; from flowpipe.cli import main; sys.exit(main())' bench /tmp/t/graphs/face_blur_near.yaml \
    --set tiles=null --set device=$dev --set workers=$w --set output=/tmp/run/o.mp4 --set metadata=/tmp/run/m.jsonl \
    --streams 16 --processes $p --frames 150 --warmup 20 --json $OUT/s_${dev}_p${p}_w$w.json > /dev/null 2>&1
  python3 -c "import json; d=json.load(open('$OUT/s_${dev}_p${p}_w$w.json')); print('$dev p=$p w=$w', d['fps'], d['cpu_util_cores'], d['cpu_ms_per_frame'], d['peak_rss_mb'], d['frames'], d['error'])"
done
