#!/usr/bin/env bash
# The bundled example, end to end, on real links and without a VM: a throwaway network
# namespace stands in for the guest. Its veth links carry the MACs the example metadata
# describes; kvdev-agent --once matches and configures them; we show the agent's status and
# what the kernel now has; the namespace is deleted on exit, whatever happens.
#
# Usage (as root): packaging/demo/netns-demo.sh [path/to/kvdev-agent]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
agent=${1:-$here/.venv/bin/kvdev-agent}
examples=$here/packaging/examples
ns=kvdev-demo-$$
work=$(mktemp -d)

if [[ $(id -u) -ne 0 ]]; then
    echo "netns-demo: run as root (it creates a network namespace)" >&2
    exit 2
fi
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

ip netns add "$ns"
# name in the "guest"  MAC from the example metadata   peer (the "other side")
while read -r name mac peer; do
    ip -n "$ns" link add "$name" address "$mac" type veth peer name "$peer"
    ip -n "$ns" link set "$peer" up
done <<'LINKS'
eth1 02:00:00:3b:02:01 peer1
eth2 02:00:00:3b:02:02 peer2
eth3 0c:42:a1:5e:00:01 peer3
LINKS

echo "== before: ip -br link (namespace $ns)"
ip -n "$ns" -br link show
echo
echo "== kvdev-agent --once"
status=0
ip netns exec "$ns" "$agent" --once \
    --metadata-root "$examples/dra-device-attributes" \
    --config-drive "$examples/config-drive/openstack/latest/meta_data.json" \
    --link-dir "$work/network" --state-dir "$work/state" --config /dev/null \
    --match-kind veth || status=$?
echo
echo "== after: ip -br addr"
ip -n "$ns" -br addr show
echo
echo "== after: ip -d link (altnames, MTU)"
ip -n "$ns" -d link show | grep -E '^[0-9]+:|altname' | grep -vE '^[0-9]+: (lo|peer)' \
    | sed -E 's/ qdisc.*//' 
echo
echo "== routes kvdev added (protocol 75)"
ip -n "$ns" route show proto 75
echo
echo "== link wishes written (root's kvdev-udev-marks renders them as .link files)"
for f in "$work"/network/*.wish; do
    [[ -e $f ]] || { echo "(none)"; break; }
    echo "--- ${f##*/}"; cat "$f"
done
if [[ $status -eq 1 ]]; then
    # kvdev-agent --once exits 1 when a described device is not configured: here the GPU,
    # which a network namespace cannot have. That is the expected outcome of the demo.
    echo
    echo "(the agent exited 1: the GPU is missing, as it must be in a network namespace)"
    status=0
fi
exit "$status"
