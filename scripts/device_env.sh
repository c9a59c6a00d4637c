# Sourced by the one-off device scripts (device_rows_sweep.sh, device_validate.sh): the carried py3.11 wheels
# (.whl/, from scripts/device_wheels.sh) installed offline into a temporary folder APPENDED to PYTHONPATH (the lent
# machine's jax stays first), this checkout in front of it, and $OUT (the device tool's folder; here: outputs/device)
# made. scripts/device_check.sh does the same with more checks.
site=$(mktemp -d)/site
OUT=${OUT:-outputs/device}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" .whl/*.whl \
    >"$OUT/install.log" 2>&1 || echo "device_env: the carried wheels did not install (see $OUT/install.log)" >&2
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:$site PYTHONUNBUFFERED=1
