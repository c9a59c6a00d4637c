#!/usr/bin/env bash
# Downloads (here, with network) the wheels that a lent accelerator machine without network lacks for lbm, into
# .whl/, for scripts/device_check.sh to install there offline (pip --no-index --no-deps --target, appended to
# PYTHONPATH so that the machine's own jax stays first).
#   bash scripts/device_wheels.sh [tpu|h200]     # -> .whl/*.whl, /.whl/ added to .git/info/exclude
# The device's run tool then names it: carry: [".whl"] (the working tree and carried paths travel up to 64 MiB).
#
# tpu (default): the workplace's TPU v5e machine (/work/.library/device/KINDS.md): Python 3.11.7, jax 0.10.2 with
#   jaxlib, libtpu, numpy, scipy, pytest and hypothesis preinstalled, glibc 2.36, no network. It lacks hydra-core,
#   omegaconf, antlr4 (their dependency), perfetto, pyevtk, rich, trimesh, rtree, submitit and pytest-xdist (not
#   carried: the suite runs without it, in one process, as one program at a time may hold the chip); and
#   matplotlib, which installs from the machine's own index (device_check.sh does it). Their small dependencies
#   (PyYAML, markdown-it-py, mdurl, pygments, cloudpickle, flatbuffers, protobuf, six, typing-extensions) travel too:
#   a copy the machine already has stays first on PYTHONPATH. Also xprof (31 MiB) for the XProf cross-check: its
#   offline converter (xprof.convert.raw_to_tool_data) needs only six and protobuf beyond the wheel itself.
# h200: the GPU machine once lent (Python 3.12.3, jax 0.11.2 + CUDA plugin, matplotlib, rich, pytest-xdist there).
# antlr4-python3-runtime 4.9.3 is published as an sdist only, so it is built into a wheel here.
# Environment: LBM_WHEEL_PYTHON (the python whose pip downloads; default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${1:-tpu}
py=${LBM_WHEEL_PYTHON:-python3}
dest=.whl
# the versions tested with lbm (the runtime .venv's); one version of each, as the device's offline install needs
common=(hydra-core==1.3.8 omegaconf==2.3.1 perfetto==0.59.1 pyevtk==1.7.0 hydra-submitit-launcher==1.2.0
        submitit==1.5.4 trimesh==5.2.0 rtree==1.4.1 xprof==2.24.2)
case "$target" in
  tpu) pyver=3.11; abi=cp311
       wheels=("${common[@]}" rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 PyYAML==6.0.3
               cloudpickle==3.1.3 flatbuffers==25.12.19 protobuf==6.33.5 six==1.17.0 typing-extensions==4.15.0) ;;
  h200) pyver=3.12; abi=cp312; wheels=("${common[@]}") ;;
  *) echo "device_wheels.sh: the target must be tpu or h200, not '$target'" >&2; exit 2 ;;
esac
sdists=(antlr4-python3-runtime==4.9.3)
limit_mib=48  # under the 64 MiB the working tree and carried paths share (xprof's wheel is 31 MiB of it)

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >> "$exclude"
rm -rf "$dest"
mkdir -p "$dest"
# the device README's recipe (CPython, manylinux x86-64, glibc <= 2.36 on the TPU machine); pure-Python wheels too
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$dest" "${wheels[@]}"
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$dest" "${sdists[@]}"
rm -f "$dest"/*.tar.gz "$dest"/*.zip

n=$(ls "$dest"/*.whl | wc -l)
want=$(( ${#wheels[@]} + ${#sdists[@]} ))
(( n == want )) || { echo "device_wheels.sh: $n wheels in $dest, expected $want" >&2; ls -l "$dest" >&2; exit 1; }
for w in "$dest"/*.whl; do  # each must install on that CPython: pure Python, abi3 or a matching platform tag
  case "$w" in
    *-py3-none-any.whl|*-py2.py3-none-any.whl|*-"$abi"-*manylinux*x86_64*.whl|*-py3-none-manylinux*x86_64*.whl) ;;
    *-cp3*-abi3-manylinux*x86_64*.whl) ;;
    *) echo "device_wheels.sh: $w does not install on CPython $pyver x86-64" >&2; exit 1 ;;
  esac
done
kib=$(du -sk "$dest" | cut -f1)
(( kib < limit_mib * 1024 )) || { echo "device_wheels.sh: $dest is $kib KiB, over $limit_mib MiB" >&2; exit 1; }
echo "device_wheels.sh: $n wheels for the $target machine (CPython $pyver), $kib KiB in $dest/ (ignored via $exclude);" \
  "name it in the run tool's carry: [\".whl\"]"
ls -1 "$dest"
