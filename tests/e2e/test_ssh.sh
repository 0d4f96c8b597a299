#!/usr/bin/env bash
# test_ssh.sh -- a real ssh pipe: `ddsend store@a | ssh host ddrecv store2`
# for a full and an incremental stream, through an sshd started on
# 127.0.0.1 with a throwaway host key and user key.
#
# Installs openssh-server (apt-get, non-interactive) when sshd is missing
# and we are root.  When sshd cannot be started it prints SKIP with the
# reason and exits 0.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

skip() {
	echo "SKIP [$TEST_NAME]: $*" >&2
	exit 0
}

SSHD=$(command -v sshd || echo /usr/sbin/sshd)
if [ ! -x "$SSHD" ] || ! command -v ssh >/dev/null; then
	[ "$(id -u)" = 0 ] || skip "sshd is not installed and we are not root"
	note "installing openssh-server and openssh-client"
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get install -y -qq openssh-server openssh-client ||
		{ apt-get update -qq && apt-get install -y -qq openssh-server openssh-client; }
	} >"$T/apt.log" 2>&1 || skip "apt-get install openssh-server failed: $(tail -n 1 "$T/apt.log")"
	SSHD=$(command -v sshd || echo /usr/sbin/sshd)
fi
[ -x "$SSHD" ] || skip "no sshd after installing"
command -v ssh-keygen >/dev/null || skip "no ssh-keygen"

# ---- a private sshd ------------------------------------------------------------
K=$T/ssh
mkdir -p "$K"
chmod 700 "$K"
ssh-keygen -q -t ed25519 -N '' -f "$K/host_key" || skip "ssh-keygen (host key) failed"
ssh-keygen -q -t ed25519 -N '' -f "$K/user_key" || skip "ssh-keygen (user key) failed"
cp "$K/user_key.pub" "$K/authorized_keys"
chmod 600 "$K/authorized_keys"
USER_NAME=$(id -un)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd 2>/dev/null || true
cat >"$K/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $PORT
HostKey $K/host_key
PidFile $K/sshd.pid
AuthorizedKeysFile $K/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
AllowUsers $USER_NAME
LogLevel ERROR
EOF
"$SSHD" -t -f "$K/sshd_config" 2>"$T/sshd.check" || skip "sshd -t: $(head -n 1 "$T/sshd.check")"
"$SSHD" -D -e -f "$K/sshd_config" 2>"$T/sshd.log" &
SSHD_PID=$!
trap 'kill "$SSHD_PID" 2>/dev/null || true; wait "$SSHD_PID" 2>/dev/null || true; rm -rf "$T"' EXIT

SSH=(ssh -p "$PORT" -i "$K/user_key" -o StrictHostKeyChecking=no
     -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR
     -o ConnectTimeout=10 "$USER_NAME@127.0.0.1")
ok=0
for _ in $(seq 50); do
	if "${SSH[@]}" true 2>"$T/ssh.err"; then
		ok=1
		break
	fi
	kill -0 "$SSHD_PID" 2>/dev/null || break
	sleep 0.2
done
((ok)) || skip "cannot log in to the test sshd: $(head -n 1 "$T/ssh.err") $(head -n 1 "$T/sshd.log")"

# ---- streams over ssh ------------------------------------------------------------
note "full and incremental streams through ssh (port $PORT)"
BS=131072
S=$T/s S2=$T/s2
"$DEDUP" init --block-size $BS "$S" 2>"$T/err" || fail "init"
"$DEDUP" init --block-size $BS "$S2" 2>"$T/err" || fail "init s2"
gen_blocks "$T/a" $BS 0 1 2 3 z 4 1 5 6 7 t1234:1
gen_blocks "$T/b" $BS 0 1 9 3 z 4 1 5 8 7 t1234:1
"$DEDUP" put "$S@a" "$T/a" 2>"$T/err" || fail "put a"
"$DEDUP" put "$S@b" "$T/b" 2>"$T/err" || fail "put b"

set +e
"$DDSEND" "$S@a" | "${SSH[@]}" "$DD_BIN/ddrecv $S2" 2>"$T/err"
rcs=("${PIPESTATUS[@]}")
set -e
[ "${rcs[0]}" = 0 ] && [ "${rcs[1]}" = 0 ] || fail "full stream over ssh: exit ${rcs[*]}"
"$DEDUP" get "$S2@a" "$T/a.back" 2>"$T/err" || fail "get S2@a"
assert_same "$T/a" "$T/a.back" "full stream over ssh"

set +e
"$DDSEND" -i a "$S@b" | "${SSH[@]}" "$DD_BIN/ddrecv $S2" 2>"$T/err"
rcs=("${PIPESTATUS[@]}")
set -e
[ "${rcs[0]}" = 0 ] && [ "${rcs[1]}" = 0 ] || fail "incremental stream over ssh: exit ${rcs[*]}"
"$DEDUP" get "$S2@b" "$T/b.back" 2>"$T/err" || fail "get S2@b"
assert_same "$T/b" "$T/b.back" "incremental stream over ssh"

# A raw file too, and a remote failure reported as one line with exit 1.
set +e
"$DDSEND" -f "$T/a" | "${SSH[@]}" "$DD_BIN/ddrecv -o $T/a.raw" 2>"$T/err"
rcs=("${PIPESTATUS[@]}")
set -e
[ "${rcs[1]}" = 0 ] || fail "raw stream over ssh: exit ${rcs[*]}"
assert_same "$T/a" "$T/a.raw" "ddsend -f | ssh ddrecv -o"
set +e
head -c 1000 "$T/a.raw" | "${SSH[@]}" "$DD_BIN/ddrecv -n" >"$T/out" 2>"$T/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "remote ddrecv of junk: exit $rc"
assert_one_line "remote ddrecv of junk"

# The installed commands over ssh: the remote side runs ddrecv from a
# prefix with no LD_LIBRARY_PATH (the RUNPATH finds libdedup.so).
note "installed ddrecv over ssh, no LD_LIBRARY_PATH"
BUILD_DIR=$(cd "$DD_BIN/.." && pwd)
if cmake --install "$BUILD_DIR" --prefix "$T/inst" >"$T/install.log" 2>&1; then
	S3=$T/s3
	"$DEDUP" init --block-size $BS "$S3" 2>"$T/err" || fail "init s3"
	set +e
	env -u LD_LIBRARY_PATH "$T/inst/bin/ddsend" "$S@a" |
		"${SSH[@]}" "env -u LD_LIBRARY_PATH $T/inst/bin/ddrecv $S3" 2>"$T/err"
	rcs=("${PIPESTATUS[@]}")
	set -e
	[ "${rcs[0]}" = 0 ] && [ "${rcs[1]}" = 0 ] ||
		fail "installed ddsend | ssh installed ddrecv: exit ${rcs[*]}"
	"$DEDUP" get "$S3@a" "$T/a.inst" 2>"$T/err" || fail "get S3@a"
	assert_same "$T/a" "$T/a.inst" "installed commands over ssh"
else
	fail "cmake --install $BUILD_DIR: $(tail -n 1 "$T/install.log")"
fi

note "ok"
