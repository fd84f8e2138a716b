# Session 8, call 5: why the combo idles on W4 clips (ComboPool.idle_s, variants), and the W1
# combo after this session's changes (combo_diag: 24 x 1080p, random frames, batch 128).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 250 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick --variants combo,combo-horizon0,combo-share-0.4,combo-div8 --out $OUT/combo_w4_variants.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4_variants.log
python3 - <<P
import json
d = json.load(open("$OUT/combo_w4_variants.json"))
for k, v in d["results"]["W4-clips"].items():
    print(k, round(v["frames_per_s"]), [round(x) for x in v["frames_per_s_windows"]], v["share_by_executor_timed"], v["combo_cpu_idle_s"], round(v["cpu_cores_busy"], 1), round(v["nvdec_util_pct"], 1))
P
OUT=$OUT timeout 250 python3 benchmarks/diag/combo_diag.py 24 1920 1080 nvdec:30:12,combo:45:15,cpu:45:25 > $OUT/combo_diag.log 2>&1
grep -E "^(nvdec|combo|cpu) " $OUT/combo_diag.log | cut -c1-300
