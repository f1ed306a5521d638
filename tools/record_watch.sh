#!/usr/bin/env bash
# Record `unicron tasks watch` through a fault: run it in a detached tmux session against a running
# control plane (make demo, or any server unicron is logged in to), trigger a fault drill on one of the
# task's nodes with `unicron nodes drill`, and save snapshots of the pane (tmux capture-pane) before the
# fault, every few seconds while the task recovers, and after; then the task's last transitions.
#
#   tools/record_watch.sh TASK_ID [FAULT]        FAULT: crash (default), exception, hang, straggler,
#                                                network_error (node_loss takes a whole agent down)
#
# Environment: UNICRON_SERVER / UNICRON_TOKEN / UNICRON_CONFIG as for unicron (else its config file);
# RECORD_OUT (default docs/cli-watch-through-a-fault.txt), RECORD_SECONDS (60: how long to follow the
# recovery), RECORD_EVERY (3: seconds between snapshots), UNICRON (default .venv/bin/unicron).
# Exit: 0 recorded; 2 usage; 1 the task is not running or the drill was refused; 3/4 as unicron.
set -euo pipefail

usage() { echo "usage: $0 TASK_ID [crash|exception|hang|straggler|network_error|node_loss]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && $1 =~ ^[0-9]+$ ]] || usage
task=$1
fault=${2:-crash}
case $fault in crash | exception | hang | straggler | network_error | node_loss) ;; *) usage ;; esac

cd "$(dirname "$0")/.."
unicron=${UNICRON:-.venv/bin/unicron}
out=${RECORD_OUT:-docs/cli-watch-through-a-fault.txt}
seconds=${RECORD_SECONDS:-60}
every=${RECORD_EVERY:-3}
command -v tmux > /dev/null || { echo "$0: tmux is needed" >&2; exit 2; }
[[ -x $unicron ]] || { echo "$0: $unicron not found (make install)" >&2; exit 2; }

# The node that holds the task's rank 0, and that rank: the drill's target.
task_json=$("$unicron" tasks show "$task" --output json) # not found / not logged in: unicron says so
read -r node rank < <(printf '%s' "$task_json" | python3 -c '
import json, sys
task = json.load(sys.stdin)
ranks = sorted(task.get("allocations") or [], key=lambda a: a["rank"])
print(ranks[0]["node"], ranks[0]["rank"]) if task["state"] == "running" and ranks else print("", "")
')
if [[ -z $node ]]; then
    echo "$0: task $task is not running on any node (see: $unicron tasks show $task)" >&2
    exit 1
fi

session="unicron-watch-$$"
record=$(mktemp)
trap 'tmux kill-session -t "$session" 2> /dev/null || true; rm -f "$record"' EXIT

# The pane gets the caller's credentials through tmux's environment, not its command line; the watch
# sizes itself to the pane (not to a COLUMNS inherited by the tmux server).
tmux_env=()
for name in UNICRON_SERVER UNICRON_TOKEN UNICRON_CONFIG HOME; do
    [[ -n ${!name:-} ]] && tmux_env+=(-e "$name=${!name}")
done
tmux new-session -d -s "$session" -x 110 -y 14 "${tmux_env[@]}" \
    "env -u COLUMNS -u LINES $unicron tasks watch $task; echo \"unicron tasks watch exited with code \$?\"; sleep 3600"

snapshot() {
    {
        echo "──── $(date +%H:%M:%S)  $1"
        # trailing spaces and the pane's blank lines above and below the display dropped
        tmux capture-pane -p -t "$session" | sed -e 's/[[:space:]]*$//' |
            awk 'NF { if (seen) for (; blank > 0; blank--) print ""; blank = 0; seen = 1; print; next } { blank++ }'
        echo
    } >> "$record"
}

{
    echo "unicron tasks watch $task through a $fault drill on node $node (rank $rank)"
    echo "recorded $(date -u +%Y-%m-%dT%H:%M:%SZ) by tools/record_watch.sh"
    echo
} > "$record"
sleep 5
snapshot "before the fault"

drill=(--fault "$fault")
[[ $fault == node_loss ]] || drill+=(--task "$task" --rank "$rank")
echo "\$ unicron nodes drill $node ${drill[*]}" >> "$record"
"$unicron" nodes drill "$node" "${drill[@]}" | tee -a "$record"
echo >> "$record"

started=$SECONDS
while ((SECONDS - started < seconds)); do
    sleep "$every"
    snapshot "t+$((SECONDS - started)) s after the drill"
    if tmux capture-pane -p -t "$session" | grep -q "exited with code"; then
        break
    fi
done

{
    echo "\$ unicron transitions list --task $task --limit 3"
    COLUMNS=110 "$unicron" transitions list --task "$task" --limit 3
} >> "$record" 2>&1

mkdir -p "$(dirname "$out")"
cp "$record" "$out"
echo "saved $(grep -c '^────' "$out") snapshots to $out"
