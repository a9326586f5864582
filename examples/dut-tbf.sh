#!/bin/sh
# A device under test for `weir lab ... --dut cmd:examples/dut-tbf.sh`: the Linux bridge with
# a token bucket filter (tbf) shaping each direction to the lab's rate, the way a plain
# router's egress shaper does. The lab runs it inside the DUT's namespace as
#   dut-tbf.sh LAN WAN start    (WEIR_ACTION=start)   and later
#   dut-tbf.sh LAN WAN stop     (WEIR_ACTION=stop)
# with WEIR_LINK_RATE (bit/s) set. The bucket holds 10 ms of the rate (at least ten full
# frames: a smaller one loses tokens whenever the CPU wakes tbf late) and the queue up to
# 50 ms of it, then tbf drops.
set -eu
lan=${1:?usage: dut-tbf.sh LAN WAN [start|stop]}
wan=${2:?usage: dut-tbf.sh LAN WAN [start|stop]}
action=${3:-${WEIR_ACTION:-start}}
rate=${WEIR_LINK_RATE:?WEIR_LINK_RATE (bit/s) is not set}

case "$action" in
start)
    burst=$((rate / 8 / 100))
    [ "$burst" -ge 15140 ] || burst=15140
    ip link add br-tbf type bridge
    ip link set "$lan" master br-tbf
    ip link set "$wan" master br-tbf
    ip link set br-tbf up
    for dev in "$lan" "$wan"; do
        tc qdisc replace dev "$dev" root tbf rate "${rate}bit" burst "$burst" latency 50ms
    done
    ;;
stop)
    for dev in "$lan" "$wan"; do
        tc qdisc del dev "$dev" root 2>/dev/null || true
    done
    ip link del br-tbf 2>/dev/null || true
    ;;
*)
    echo "dut-tbf.sh: unknown action '$action' (start or stop)" >&2
    exit 2
    ;;
esac
