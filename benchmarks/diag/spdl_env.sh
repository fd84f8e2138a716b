#!/bin/bash
# Sourced by device scripts that run SPDL (from session 17 on): SPDL as ../shared/tools/README.md
# says (its wheels from .peers/ into .site, a folder of FFmpeg soname links onto the FFmpeg
# PyAV's wheel bundles, the CUDA runtime torch brings on the library path), and the versions
# into $OUT/bench.log. session12_peers.sh has the same lines, as they ran then.
python3 -m pip install -q --no-index --no-deps --no-compile --target .site .peers/spdl*.whl
SHIM_SH=../shared/tools/ffmpeg-shim.sh
[ -f "$SHIM_SH" ] || SHIM_SH=.peers/ffmpeg-shim.sh
bash "$SHIM_SH" "$PWD/.site" "$HOME/shim" > "$OUT/bench.log" 2>&1
CUDART=$(dirname $(python3 -c "import glob,sysconfig; print(glob.glob(sysconfig.get_paths()['purelib']+'/nvidia/**/libcudart.so.13*', recursive=True)[0])"))
export LD_LIBRARY_PATH=$HOME/shim:$PWD/.site/av.libs:$CUDART:${LD_LIBRARY_PATH:-}
python3 - <<'PY' 2>&1 | tee -a "$OUT/bench.log"
import importlib.metadata as m
import av, av.codec.hwaccel as hw, spdl.io.utils as u
print("spdl-io", m.version("spdl-io"), "ffmpeg", u.get_ffmpeg_versions().get("libavcodec"),
      "cuda", u.built_with_cuda(), "nvcodec", u.built_with_nvcodec())
print("av", av.__version__, "hwdevices", hw.hwdevices_available())
PY
