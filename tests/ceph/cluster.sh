#!/usr/bin/env bash
# cluster.sh -- a one-node Ceph cluster of the tests' own, for RADOS stores.
#
#   cluster.sh up DIR         start one mon and one OSD under DIR (object
#                             store memstore, in RAM), print DIR/ceph.conf
#   cluster.sh down DIR       stop them (the OSD first) and remove DIR
#   cluster.sh osd-stop DIR   stop the OSD (SIGTERM, as a shutdown: memstore
#                             keeps its objects in DIR/osd0 for a restart)
#   cluster.sh osd-start DIR  start it again and wait until it is up
#
# What it is: a monitor and an OSD bound to 127.0.0.1, authentication off,
# no manager daemon (object I/O does not need one), pools of size 1.  The
# monitor's port is picked from a range at random among the ports nobody
# listens on, so that clusters started at the same time (several ctest
# builds, other engineers' test runs on the machine) do not collide; a
# port taken between the check and the monitor's bind is caught (the
# monitor exits) and another one tried.  The OSD binds its own free ports
# (Ceph's ms_bind_port_min..max).
#
# Exit status 0 with the conf path on stdout, or non-zero with one line on
# stderr saying what failed and where its log is.  `up` on a DIR that
# holds a running cluster stops it first, so a run that was interrupted
# before its `down` leaves nothing running after the next one.
set -euo pipefail

PORT_MIN=${DD_CEPH_PORT_MIN:-41000}
PORT_MAX=${DD_CEPH_PORT_MAX:-48999}
UP_WAIT=60           # seconds for the OSD to be reported up

die() { echo "cluster.sh: $*" >&2; exit 1; }

# die, quoting the last line of log $1 (what the daemon said).
die_log() {
	local log=$1 last=
	shift
	[ -s "$log" ] && last=$(grep -v '^\s*$' "$log" | tail -n 1)
	die "$* (see $log)${last:+: $last}"
}

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0" >&2; exit 2; }

[ $# -eq 2 ] || usage
cmd=$1
D=$2

need() {
	command -v "$1" >/dev/null 2>&1 ||
		die "$1 not found: install ceph-mon ceph-osd ceph-common (scripts/setup.sh)"
}

# Whether anything listens on TCP port $1 (IPv4 or IPv6), from /proc: no
# dependence on ss or netstat being installed.
port_busy() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 }
		END { exit f ? 0 : 1 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {
	local i p
	for i in $(seq 1 50); do
		p=$((PORT_MIN + RANDOM % (PORT_MAX - PORT_MIN + 1)))
		port_busy "$p" || { echo "$p"; return 0; }
	done
	die "no free port in $PORT_MIN-$PORT_MAX after 50 tries"
}

# Stops daemon $1 (osd.0, mon.a) of the cluster in $D: SIGTERM, then
# SIGKILL after 10 s.  The pid file names it; a pid that is no longer a
# ceph daemon (reused) is left alone.
stop_daemon() {
	local f=$D/run/$1.pid p i
	[ -f "$f" ] || return 0
	p=$(cat "$f")
	if [ -n "$p" ] && grep -q ceph "/proc/$p/comm" 2>/dev/null; then
		kill "$p" 2>/dev/null || true
		for i in $(seq 1 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$p" 2>/dev/null || true
	fi
	rm -f "$f"
}

write_conf() {
	local port=$1 fsid=$2
	cat >"$D/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd objectstore = memstore
memstore device bytes = 2147483648
run dir = $D/run
log file = $D/\$name.log
pid file = $D/run/\$name.pid
ms bind ipv6 = false
public addr = 127.0.0.1
# a stopped OSD unmounts its store, and memstore then saves its objects
# in osd data for the restart (fast shutdown would skip that)
osd fast shutdown = false
[mon.a]
mon data = $D/mon
admin socket = $D/run/\$name.asok
[osd.0]
osd data = $D/osd0
admin socket = $D/run/\$name.asok
EOF
}

# One mon on a fresh port; 0 when it runs, 1 when its port was taken.
start_mon() {
	local port fsid i
	port=$(pick_port) || exit 1
	fsid=$(cat /proc/sys/kernel/random/uuid)
	rm -rf "$D/mon" "$D/monmap"
	mkdir -p "$D/mon"
	write_conf "$port" "$fsid"
	monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" \
		"$D/monmap" >/dev/null
	ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. \
		--cap mon 'allow *' >/dev/null
	ceph-mon -c "$D/ceph.conf" --mkfs -i a --monmap "$D/monmap" \
		--keyring "$D/keyring" >>"$D/setup.log" 2>&1 ||
		die_log "$D/setup.log" "ceph-mon --mkfs failed"
	# ceph-mon binds (retrying for about 10 s) before it daemonizes:
	# a port taken since pick_port makes it exit "unable to bind"
	: >"$D/mon-start.log"
	if ! ceph-mon -c "$D/ceph.conf" -i a >"$D/mon-start.log" 2>&1; then
		cat "$D/mon-start.log" >>"$D/setup.log"
		grep -q "unable to bind" "$D/mon-start.log" && return 1
		die_log "$D/mon-start.log" "ceph-mon did not start"
	fi
	for i in $(seq 1 50); do
		[ -s "$D/run/mon.a.pid" ] && return 0
		sleep 0.1
	done
	die_log "$D/mon.a.log" "ceph-mon started but wrote no pid file"
}

osd_up() {
	timeout 10 ceph -c "$D/ceph.conf" --connect-timeout 5 osd stat \
		2>/dev/null | grep -q " 1 up"
}

start_osd() {
	local i
	ceph-osd -c "$D/ceph.conf" -i 0 >>"$D/setup.log" 2>&1 ||
		die_log "$D/setup.log" "ceph-osd did not start"
	for i in $(seq 1 "$UP_WAIT"); do
		osd_up && return 0
		sleep 1
	done
	die_log "$D/osd.0.log" "osd.0 not up after ${UP_WAIT} s"
}

case $cmd in
up)
	need ceph-mon; need ceph-osd; need ceph; need monmaptool
	need ceph-authtool
	if [ -d "$D" ]; then
		stop_daemon osd.0
		stop_daemon mon.a
	fi
	rm -rf "$D"
	mkdir -p "$D/run" "$D/osd0"
	D=$(cd "$D" && pwd)
	tries=0
	until start_mon; do
		tries=$((tries + 1))
		[ "$tries" -lt 5 ] || die_log "$D/setup.log" "ceph-mon could not bind a port in 5 tries"
	done
	id=$(timeout 60 ceph -c "$D/ceph.conf" --connect-timeout 30 osd create) ||
		die "'ceph osd create' failed: the monitor does not answer (see $D/mon.a.log)"
	[ "$id" = 0 ] || die "'ceph osd create' gave id '$id', not 0"
	ceph-osd -c "$D/ceph.conf" -i 0 --mkfs >>"$D/setup.log" 2>&1 ||
		die_log "$D/setup.log" "ceph-osd --mkfs failed"
	start_osd
	echo "$D/ceph.conf"
	;;
down)
	stop_daemon osd.0
	stop_daemon mon.a
	rm -rf "$D"
	;;
osd-stop)
	[ -s "$D/run/osd.0.pid" ] || die "no OSD runs in $D"
	stop_daemon osd.0
	;;
osd-start)
	[ -f "$D/ceph.conf" ] || die "no cluster in $D"
	[ -s "$D/run/osd.0.pid" ] && kill -0 "$(cat "$D/run/osd.0.pid")" \
		2>/dev/null && die "the OSD already runs"
	start_osd
	;;
*)
	usage
	;;
esac
