#!/usr/bin/env bash
# netns_hosts.sh: test "cluster nodes" made of Linux network namespaces, each running a real OpenSSH sshd.
#
#   tools/netns_hosts.sh up N DIR     create N hosts sskjnode601.. (names 601..), start sshd in each, write a client
#                                     key, known_hosts and an ssh_config under DIR, print the ssh_config on stdout
#   tools/netns_hosts.sh down [DIR]   stop every process in those namespaces, delete namespaces, veths and the
#                                     bridge; remove DIR when given
#   tools/netns_hosts.sh status       list the namespaces, their addresses and sshd pids
#
# Both `up` and `down` are idempotent: `up` twice gives the same hosts (sshd restarted only when not running),
# `down` on nothing succeeds.  Needs root, iproute2 (`ip`) and openssh-server (`/usr/sbin/sshd`), `ssh-keygen`.
# Network: bridge sskjbr0 = ${NET}.1/24 in the root namespace; host k (name FIRST+k-1) = ${NET}.(100+k) on a veth
# pair (sskjv<name> on the bridge, eth0 inside).  Only addresses inside this private /24 are used.
#
# Environment: SSKJ_NETNS_FIRST (default 601), SSKJ_NETNS_NET (default 10.213.41), SSKJ_NETNS_BRIDGE (sskjbr0).
# Use from ssh:   ssh -F DIR/ssh_config 601 hostname
# Use from pytest: --launcher ssh --nodes 601-604 --sskj-ssh-config DIR/ssh_config
set -euo pipefail

FIRST=${SSKJ_NETNS_FIRST:-601}
NET=${SSKJ_NETNS_NET:-10.213.41}
BR=${SSKJ_NETNS_BRIDGE:-sskjbr0}
PREFIX=sskjnode
SSHD=${SSKJ_SSHD:-/usr/sbin/sshd}

die() { echo "netns_hosts.sh: $*" >&2; exit 1; }
log() { echo "netns_hosts.sh: $*" >&2; }

need() {
    [ "$(id -u)" = 0 ] || die "must run as root (network namespaces and sshd need it)"
    command -v ip >/dev/null || die "'ip' not found: apt-get install -y iproute2"
    [ -x "$SSHD" ] || die "$SSHD not found: apt-get install -y openssh-server"
    command -v ssh-keygen >/dev/null || die "ssh-keygen not found: apt-get install -y openssh-client"
}

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

sshd_running() {  # $1 pidfile, $2 namespace
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null || return 1
    ip netns pids "$2" 2>/dev/null | grep -qx "$pid"
}

host_up() {  # $1 index k (1-based), $2 DIR
    local k=$1 dir=$2
    local name=$((FIRST + k - 1))
    local ns=$PREFIX$name veth=sskjv$name addr=$NET.$((100 + k))
    local hd=$dir/hosts/$name pid
    ns_exists "$ns" || ip netns add "$ns"
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip link add "$veth" type veth peer name "sskjp$name"
        ip link set "sskjp$name" netns "$ns"
        ip -n "$ns" link set "sskjp$name" name eth0
    fi
    ip link set "$veth" master "$BR"
    ip link set "$veth" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" addr replace "$addr/24" dev eth0
    ip -n "$ns" route replace default via "$NET.1" dev eth0
    mkdir -p "$hd"
    [ -f "$hd/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "sskj-test-host-$name" \
        -f "$hd/ssh_host_ed25519_key"
    cat >"$hd/sshd_config" <<EOF
# sshd of test host $name (namespace $ns), written by tools/netns_hosts.sh
ListenAddress $addr
Port 22
HostKey $hd/ssh_host_ed25519_key
PidFile $hd/sshd.pid
AuthorizedKeysFile $dir/client/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
StrictModes no
PrintMotd no
X11Forwarding no
MaxStartups 64:30:128
MaxSessions 64
LogLevel INFO
EOF
    if ! sshd_running "$hd/sshd.pid" "$ns"; then
        # an sshd of an earlier `up` with another DIR holds port 22 here: the namespace is ours, clear it
        for pid in $(ip netns pids "$ns"); do kill -TERM "$pid" 2>/dev/null || true; done
        for _ in $(seq 30); do [ -z "$(ip netns pids "$ns")" ] && break; sleep 0.1; done
        ip netns exec "$ns" "$SSHD" -f "$hd/sshd_config" -E "$hd/sshd.log"
        for _ in $(seq 50); do sshd_running "$hd/sshd.pid" "$ns" && break; sleep 0.1; done
        sshd_running "$hd/sshd.pid" "$ns" || die "sshd of $name did not start; see $hd/sshd.log"
    fi
    echo "$addr ssh-ed25519 $(awk '{print $2}' "$hd/ssh_host_ed25519_key.pub")" >>"$dir/client/known_hosts.new"
    cat >>"$dir/ssh_config.new" <<EOF
Host $name $ns
    HostName $addr
    User root
    Port 22
    IdentityFile $dir/client/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $dir/client/known_hosts
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR

EOF
}

cmd_up() {
    local n=${1:-} dir=${2:-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 99 ] || die "usage: $0 up N DIR   (N = 1..99 hosts)"
    [ -n "$dir" ] || die "usage: $0 up N DIR   (DIR receives the client key and ssh_config)"
    need
    mkdir -p "$dir/client" /run/sshd
    dir=$(cd "$dir" && pwd)
    chmod 700 "$dir/client"
    [ -f "$dir/client/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C sskj-test-client -f "$dir/client/id_ed25519"
    cp "$dir/client/id_ed25519.pub" "$dir/client/authorized_keys"
    if ! ip link show "$BR" >/dev/null 2>&1; then
        ip link add "$BR" type bridge
    fi
    ip addr replace "$NET.1/24" dev "$BR"
    ip link set "$BR" up
    : >"$dir/client/known_hosts.new"
    echo "# generated by tools/netns_hosts.sh: test hosts in network namespaces" >"$dir/ssh_config.new"
    local k
    for k in $(seq "$n"); do host_up "$k" "$dir"; done
    # the same settings when a node is named by its address (e.g. --nodes 10.213.41.101,...)
    cat >>"$dir/ssh_config.new" <<EOF
Host $NET.*
    User root
    Port 22
    IdentityFile $dir/client/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $dir/client/known_hosts
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF
    mv "$dir/client/known_hosts.new" "$dir/client/known_hosts"
    mv "$dir/ssh_config.new" "$dir/ssh_config"
    log "$n host(s) up: $(seq -s ' ' "$FIRST" $((FIRST + n - 1))); ssh -F $dir/ssh_config $FIRST true"
    cat "$dir/ssh_config"
}

cmd_down() {
    local dir=${1:-} ns pid
    [ "$(id -u)" = 0 ] || die "must run as root"
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]*$" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
        for _ in $(seq 30); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$ns"
    done
    for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^sskjv[0-9]*$' || true); do
        ip link del "$v" 2>/dev/null || true
    done
    if ip link show "$BR" >/dev/null 2>&1; then ip link del "$BR"; fi
    if [ -n "$dir" ] && [ -d "$dir" ]; then rm -rf "$dir"; fi
    log "down: no $PREFIX* namespaces, no $BR bridge"
}

cmd_status() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]*$" || true); do
        echo "$ns $(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}') pids: $(ip netns pids "$ns" | tr '\n' ' ')"
    done
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    status) cmd_status ;;
    *) die "usage: $0 up N DIR | down [DIR] | status" ;;
esac
