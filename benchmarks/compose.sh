#!/usr/bin/env bash
# Composition overhead, harness against LangGraph, side by side in one run:
# a map-reduce of 1 000 trivial branches (LangGraph: `Send`) and a loop
# whose step is a one-step sub-agent (LangGraph: a compiled subgraph as a
# node), both in memory. Prints a table with the ratios.
#
#   benchmarks/compose.sh [LANGGRAPH_RUNS]
#
# harness: the criterion benchmark harness/benches/compose.rs (release).
# LangGraph: benchmarks/compose_langgraph.py, in a venv under target/
# (target/compose-venv) into which this script installs LangGraph if it is
# missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/compose-venv"
runs="${1:-10}"

if ! "$venv/bin/python" -c 'import langgraph' 2>/dev/null; then
    echo "installing LangGraph into $venv" >&2
    mkdir -p "$root/target"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet langgraph
fi

echo "harness: cargo bench -p harness --bench compose" >&2
ours="$(cd "$root" && cargo bench --quiet -p harness --bench compose -- --output-format bencher 2>/dev/null |
    sed -n 's|^test compose/\([a-z_0-9]*\) \.\.\. bench: *\([0-9,]*\) ns/iter.*|\1 \2|p' | tr -d ,)"
echo "LangGraph: benchmarks/compose_langgraph.py ($runs runs each)" >&2
theirs="$("$venv/bin/python" "$root/benchmarks/compose_langgraph.py" "$runs")"

for name in fan_out_1000 sub_agent_loop_1000 plain_loop_1000; do
    grep -q "^$name " <<<"$ours" || { echo "no harness figure for $name in:"$'\n'"$ours" >&2; exit 1; }
    grep -q "^$name " <<<"$theirs" || { echo "no LangGraph figure for $name in:"$'\n'"$theirs" >&2; exit 1; }
done

# harness: ns per run of 1 000 items; LangGraph: µs per item.
awk -v ours="$ours" -v theirs="$theirs" 'BEGIN {
    n = split(ours, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], f, " "); h[f[1]] = f[2] / 1000 / 1000 }
    n = split(theirs, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], f, " "); l[f[1]] = f[2] }
    printf "| figure (in memory) | harness | LangGraph %s | ratio |\n", l["langgraph"]
    printf "|---|---|---|---|\n"
    row("map-reduce of 1 000 branches, per branch", h["fan_out_1000"], l["fan_out_1000"])
    row("sub-agent step (a 1-step child loop)", h["sub_agent_loop_1000"], l["sub_agent_loop_1000"])
    row("plain step, same loop", h["plain_loop_1000"], l["plain_loop_1000"])
    row("nesting alone (sub-agent step - plain step)", h["sub_agent_loop_1000"] - h["plain_loop_1000"], l["sub_agent_loop_1000"] - l["plain_loop_1000"])
}
function us(x) { return x < 1 ? sprintf("%.0f ns", x * 1000) : sprintf("%.2f µs", x) }
function row(what, ours, theirs) {
    printf "| %s | %s | %s | **%.0f×** less |\n", what, us(ours), us(theirs), theirs / ours
}'
