#!/usr/bin/env bash
# The full `lbm validate` level on the lent TPU, one case at a time (issue 37, item 4), in one device command:
#   run  command: "bash scripts/device_validate.sh [BUDGET_S] [CASE[:PATTERN]...]"  carry: [".whl"]  timeout_s: 600
# Each item runs `python -m lbm validate --case CASE [--check PATTERN] --out outputs/device-validate/ITEM` with what is
# left of BUDGET_S (default 540 s), e.g. "schafer_turek:dfg_2d2_*" for DFG 2D-2 alone; an item cut by the budget keeps
# its runs' logs (steps done, MLUPS). The default order puts the long DFG case (2D-2: 367 500 steps at N = 70) last. In $OUT: validate-summary.txt (each case's table and wall
# time) and validate.tgz (every validation.json and run log).
set -u
source scripts/device_env.sh
budget=${1:-540}; shift || true
cases=("$@"); (( ${#cases[@]} )) || cases=(taylor_green poiseuille cavity duct taylor_green_3d schafer_turek)
dir=outputs/device-validate
mkdir -p "$dir"
summary="$OUT/validate-summary.txt"
start=$(date +%s)
for item in "${cases[@]}"; do
  case=${item%%:*}; args=(--case "$case"); [[ $item == *:* ]] && args+=(--check "${item#*:}")
  name=${item//[^A-Za-z0-9_]/_}
  left=$(( start + budget - $(date +%s) - 10 ))
  if (( left < 20 )); then echo "validate ${args[*]}: not run, ${left} s of the budget left" | tee -a "$summary"; continue; fi
  t0=$(date +%s)
  timeout -k 5 "$left" python3 -m lbm validate "${args[@]}" --out "$dir/$name" >"$dir/$name.log" 2>&1
  rc=$?
  { echo "=== validate ${args[*]}: exit $rc in $(( $(date +%s) - t0 )) s (limit $left s)"
    grep -v "UserWarning\|warnings.warn" "$dir/$name.log" | tail -n 30; } | tee -a "$summary"
done
tar -czf "$OUT/validate.tgz" --exclude='*.npz' --exclude='*.vtr' --exclude='*.png' "$dir" 2>/dev/null
ls -la "$OUT"
