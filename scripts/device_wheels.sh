#!/usr/bin/env bash
# Downloads (here, with network) exactly the wheels that the workplace's lent GPU machine lacks for lbm into .whl/,
# for scripts/device_check.sh to install there offline. That machine (/work/.library/device/KINDS.md, nvidia-h200):
# "nothing outside it can be reached"; its python3 is Python 3.12.3 (x86-64) with jax 0.11.2 + jax-cuda13-plugin,
# numpy, matplotlib, rich, flatbuffers, PyYAML, packaging, protobuf, cloudpickle, typing-extensions, pytest,
# pytest-xdist and hypothesis already installed. Missing (lbm's runtime dependencies in pyproject.toml against
# KINDS.md's package list): hydra-core, omegaconf, antlr4-python3-runtime (their dependency), perfetto, pyevtk,
# hydra-submitit-launcher, submitit, trimesh, rtree. Every one of them but rtree is pure Python, so one wheel serves any platform;
# antlr4-python3-runtime 4.9.3 is published as an sdist only, so it is built into a wheel here. Also xprof (32 MB, for
# issue 20's XProf cross-check in device_check.sh; not on that machine): its offline converter
# (xprof.convert.raw_to_tool_data) imports only six and protobuf beyond the wheel itself, both on that machine, so it
# is installed without its other dependencies (duckdb, google-cloud-storage, ... serve its web server).
#   bash scripts/device_wheels.sh        # -> .whl/*.whl (about 33 MB), /.whl/ added to .git/info/exclude
# The device's tool call then names it: carry: [".whl"] (the working tree plus carried paths travel up to 64 MiB).
# Environment: LBM_WHEEL_PYTHON (the python whose pip downloads; default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${LBM_WHEEL_PYTHON:-python3}
dest=.whl
# the versions tested with lbm (the runtime .venv's); one version of each, as the device's offline install needs
wheels=(hydra-core==1.3.8 omegaconf==2.3.1 perfetto==0.59.1 pyevtk==1.7.0 hydra-submitit-launcher==1.2.0
        submitit==1.5.4 trimesh==5.2.0 rtree==1.4.1 xprof==2.24.2)
sdists=(antlr4-python3-runtime==4.9.3)
limit_mib=40  # under the 64 MiB the working tree and carried paths share (xprof's wheel is 31 MiB of it)

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >> "$exclude"
rm -rf "$dest"
mkdir -p "$dest"
# the README's recipe for the device (python 3.12, CPython, manylinux x86-64); pure-Python wheels match it too
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$dest" "${wheels[@]}"
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$dest" "${sdists[@]}"
rm -f "$dest"/*.tar.gz "$dest"/*.zip

n=$(ls "$dest"/*.whl | wc -l)
want=$(( ${#wheels[@]} + ${#sdists[@]} ))
(( n == want )) || { echo "device_wheels.sh: $n wheels in $dest, expected $want" >&2; ls -l "$dest" >&2; exit 1; }
for w in "$dest"/*.whl; do  # each must install on any CPython 3.12 x86-64: pure Python or a matching platform tag
  case "$w" in
    *-py3-none-any.whl|*-py2.py3-none-any.whl|*-cp312-*manylinux*x86_64*.whl|*-py3-none-manylinux*x86_64*.whl) ;;
    *) echo "device_wheels.sh: $w does not install on CPython 3.12 x86-64" >&2; exit 1 ;;
  esac
done
kib=$(du -sk "$dest" | cut -f1)
(( kib < limit_mib * 1024 )) || { echo "device_wheels.sh: $dest is $kib KiB, over $limit_mib MiB" >&2; exit 1; }
echo "device_wheels.sh: $n wheels, $kib KiB in $dest/ (ignored via $exclude); name it in the run tool's carry: [\".whl\"]"
ls -1 "$dest"
