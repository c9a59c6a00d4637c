#!/usr/bin/env bash
# Creates .venv-accel: the accelerator COMPILE environment, kept apart from the runtime .venv.
#   bash scripts/accel_env.sh            -> create or reuse .venv-accel, print its python
#   bash scripts/accel_env.sh --check    -> exit 0 if .venv-accel is complete and current, 1 otherwise; installs nothing
# It holds the runtime's jax version plus jax-cuda<N>-plugin, jax-cuda<N>-pjrt (CUDA compiler, no NVIDIA
# libraries: enough to compile for a GPU without one; N = LBM_CUDA_MAJOR, 12 by default) and libtpu (the
# jax[tpu] extra), and lbm (editable, with its test tools). Then: JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 .venv-accel/bin/python -m lbm inspect target=h100
# (inspect sets that variable itself). On a CPU-only machine an installed CUDA plugin prints an initialisation
# error at every jax start, which is why these packages never go into .venv.
# Idempotent: a stamp file records what was installed; a second run with the same versions only checks.
# Cache-friendly: pip's cache (PIP_CACHE_DIR) holds the wheels; CI can cache .venv-accel/ keyed on the stamp.
# Environment: LBM_PYTHON (interpreter >= 3.11 for the venv), LBM_JAX_VERSION (default: the runtime's jax),
#              LBM_ACCEL_VENV (default: <repo>/.venv-accel), LBM_CUDA_MAJOR (12 | 13; default 12).
# The workplace's lent H200 runs jax 0.11.2 with the CUDA 13 plugin (/work/.library/device/KINDS.md); its exact
# stack, to prove the pallas engine's Triton lowering on it without the device:
#   LBM_JAX_VERSION=0.11.2 LBM_CUDA_MAJOR=13 LBM_ACCEL_VENV=~/.cache/lbm/venv-accel-cuda13 bash scripts/accel_env.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${LBM_ACCEL_VENV:-$root/.venv-accel}
check_only=""
[[ "${1:-}" == "--check" ]] && check_only=1

# The jax version: the runtime environment's, so that both compile the same programs.
jax_version=${LBM_JAX_VERSION:-}
if [[ -z "$jax_version" ]]; then
  for rt in "$root/.venv/bin/python" python3; do
    if command -v "$rt" >/dev/null 2>&1; then
      jax_version=$("$rt" -c 'import jax; print(jax.__version__)' 2>/dev/null || true)
      [[ -n "$jax_version" ]] && break
    fi
  done
fi
if [[ -z "$jax_version" ]]; then
  echo "accel_env.sh: no runtime jax found (run 'bash install.sh' first, or set LBM_JAX_VERSION=0.12.0.1)" >&2
  exit 1
fi
cuda=${LBM_CUDA_MAJOR:-12}
[[ "$cuda" == 12 || "$cuda" == 13 ]] || { echo "accel_env.sh: LBM_CUDA_MAJOR must be 12 or 13, not '$cuda'" >&2; exit 1; }
# lbm's accel extra names the CUDA 12 plugin; with CUDA 13 the plugin is named below instead
extras="test,accel"; [[ "$cuda" == 13 ]] && extras="test"
# pyproject.toml's hash: a changed dependency (e.g. a new test tool) reinstalls instead of passing as current
deps=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])' "$root/pyproject.toml")
wanted() { echo "jax==$jax_version jax[tpu]==$jax_version jax-cuda$cuda-plugin==$jax_version jax-cuda$cuda-pjrt==$jax_version lbm[$extras]@$root pyproject:$deps"; }
stamp="$venv/.lbm-accel-stamp"
# The CUDA plugin comes out after jax (jax 0.12.1 was on the index days before jax-cuda12-plugin 0.12.1): where the
# runtime's jax has no plugin yet, the environment takes the newest jax <= the runtime's that has one (said in one
# line), and remembers the pair ("runtime chosen") so that a rerun checks it without asking the index.
# LBM_JAX_VERSION pins the version instead.
runtime_version=$jax_version
chosen_file="$venv/.lbm-accel-jax"
if [[ -z "${LBM_JAX_VERSION:-}" && -f "$chosen_file" ]]; then
  read -r for_runtime chosen < "$chosen_file" || true
  [[ "${for_runtime:-}" == "$runtime_version" && -n "${chosen:-}" ]] && jax_version=$chosen
fi
want=$(wanted)

complete() {
  [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || return 1
  JAX_PLATFORMS=cpu JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 "$venv/bin/python" - "$jax_version" "$root" "$cuda" <<'EOF' >/dev/null 2>&1
import importlib, importlib.metadata as md, os, sys
import jax, lbm, libtpu  # noqa: F401
importlib.import_module(f"jax_plugins.xla_cuda{sys.argv[3]}")
assert jax.__version__ == sys.argv[1]
assert md.version(f"jax-cuda{sys.argv[3]}-plugin") == md.version(f"jax-cuda{sys.argv[3]}-pjrt") == sys.argv[1]
assert os.path.dirname(os.path.dirname(os.path.abspath(lbm.__file__))) == sys.argv[2]
EOF
}

if complete; then
  echo "accel_env.sh: $venv is current (jax $jax_version, CUDA $cuda plugin, libtpu): $venv/bin/python"
  exit 0
fi
[[ -n "$check_only" ]] && { echo "accel_env.sh: $venv is missing or out of date" >&2; exit 1; }

py=$(LBM_PYTHON="${LBM_PYTHON:-}" bash "$root/install.sh" --find-python)
if [[ ! -x "$venv/bin/python" ]]; then
  echo "accel_env.sh: creating $venv with $py"
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --quiet)
"${pip[@]}" --upgrade pip
index_versions() {  # the versions of a package on the index, one per line
  "$venv/bin/python" -m pip index versions "$1" --disable-pip-version-check 2>/dev/null \
    | sed -n 's/^Available versions: //p' | tr -d ' ' | tr ',' '\n'
}
if [[ -z "${LBM_JAX_VERSION:-}" ]]; then
  jax_version=$runtime_version
  plugins=$(index_versions "jax-cuda$cuda-plugin")
  if [[ -n "$plugins" ]] && ! grep -qxF "$runtime_version" <<<"$plugins"; then
    pjrts=$(index_versions "jax-cuda$cuda-pjrt")
    chosen=""
    for v in $(sort -rV <<<"$plugins"); do  # the newest plugin version <= the runtime's jax that has its pjrt too
      if [[ "$(printf '%s\n%s\n' "$v" "$runtime_version" | sort -V | tail -n 1)" == "$runtime_version" ]] \
          && grep -qxF "$v" <<<"$pjrts"; then
        chosen=$v
        break
      fi
    done
    if [[ -z "$chosen" ]]; then
      echo "accel_env.sh: no jax-cuda$cuda-plugin <= jax $runtime_version on the package index" >&2
      exit 1
    fi
    echo "accel_env.sh: jax-cuda$cuda-plugin $runtime_version is not on the package index yet: this environment" \
         "compiles with jax $chosen, the newest with the plugin (LBM_JAX_VERSION pins another)"
    jax_version=$chosen
  fi
  want=$(wanted)
fi
# One resolver call: jax pinned to the runtime's version, its TPU extra (libtpu), the CUDA compiler plugin
# without the NVIDIA wheels (no [with-cuda]: they are only needed to run, not to compile), and lbm.
"${pip[@]}" "jax[tpu]==$jax_version" "jaxlib==$jax_version" \
  "jax-cuda$cuda-plugin==$jax_version" "jax-cuda$cuda-pjrt==$jax_version" -e "$root[$extras]"
echo "$want" > "$stamp"
echo "$runtime_version $jax_version" > "$chosen_file"
if ! complete; then
  echo "accel_env.sh: $venv was installed but does not import jax $jax_version, libtpu and the CUDA plugin" >&2
  exit 1
fi
echo "accel_env.sh: ready (jax $jax_version, CUDA $cuda plugin, libtpu): $venv/bin/python"
