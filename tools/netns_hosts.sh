#!/usr/bin/env bash
# netns_hosts.sh: test "cluster nodes" made of Linux network namespaces, each running a real OpenSSH sshd.
#
#   tools/netns_hosts.sh up N DIR     create N hosts sskjnode<FIRST>.. (names FIRST..FIRST+N-1), start sshd in
#                                     each, write a client key, known_hosts and an ssh_config under DIR, print the
#                                     ssh_config on stdout
#   tools/netns_hosts.sh down DIR     stop every process in the namespaces made by `up ... DIR`, delete those
#                                     namespaces, their veths and their bridge, and remove DIR
#   tools/netns_hosts.sh status [DIR] list the namespaces (of DIR's instance, or of every instance) and sshd pids
#
# One *instance* = one DIR and one SSKJ_NETNS_FIRST.  Everything an instance makes is named after FIRST (its
# bridge sskjbr<FIRST>, its /24, its host names) and recorded in DIR/instance, so several instances live side by
# side (two CI runs at once with different SSKJ_NETNS_FIRST) and `down` removes only its own.  `up` never
# touches a namespace whose sshd belongs to another DIR (it stops, saying so); an empty leftover namespace is
# reused.  Both `up` and `down` are idempotent.  No lock files are left: callers that serialize keep their
# locks inside DIR, which `down` removes.
# Needs root, iproute2 (`ip`) and openssh-server (`/usr/sbin/sshd`), `ssh-keygen`.
# Network: bridge sskjbr<FIRST> = ${NET}.1/24 in the root namespace, NET = 10.213.((FIRST + 190) % 250)
# (FIRST 601 -> 10.213.41); host k (name FIRST+k-1) = ${NET}.(100+k) on a veth pair (sskjv<name> on the bridge,
# eth0 inside).  Only addresses inside this private /24 are used.
#
# Environment: SSKJ_NETNS_FIRST (default 601), SSKJ_NETNS_NET, SSKJ_NETNS_BRIDGE override the derived values.
# Use from ssh:   ssh -F DIR/ssh_config 601 hostname
# Use from pytest: --launcher ssh --nodes 601-604 --sskj-ssh-config DIR/ssh_config
set -euo pipefail

FIRST=${SSKJ_NETNS_FIRST:-601}
[[ "$FIRST" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "netns_hosts.sh: SSKJ_NETNS_FIRST=$FIRST is not a number 1-999999" >&2; exit 1; }
NET=${SSKJ_NETNS_NET:-10.213.$(((FIRST + 190) % 250))}
BR=${SSKJ_NETNS_BRIDGE:-sskjbr$FIRST}
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

ns_owner() {  # $1 namespace: the DIR of the sshd running in it ("" when none); foreign processes print "?"
    local pid cfg
    for pid in $(ip netns pids "$1" 2>/dev/null); do
        # sshd retitles itself ("sshd: /usr/sbin/sshd -f CONFIG [listener] ..."): read -f CONFIG from either form
        cfg=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -o -- '-f [^ ]*/hosts/[^ ]*/sshd_config' | head -n 1 || true)
        cfg=${cfg#-f }
        case "$cfg" in
            */hosts/*/sshd_config) echo "${cfg%/hosts/*/sshd_config}"; return ;;
        esac
    done
}

host_up() {  # $1 index k (1-based), $2 DIR
    local k=$1 dir=$2
    local name=$((FIRST + k - 1))
    local ns=$PREFIX$name veth=sskjv$name addr=$NET.$((100 + k))
    local hd=$dir/hosts/$name pid
    if ns_exists "$ns"; then
        local owner
        owner=$(ns_owner "$ns")
        if [ -n "$owner" ] && [ "$owner" != "$dir" ]; then
            die "namespace $ns (host $name) belongs to the instance in $owner; use another SSKJ_NETNS_FIRST, or run: $0 down $owner"
        fi
    else
        ip netns add "$ns"
    fi
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
        # our own sshd died (its pid file is stale): stop what is left of it in our namespace, then start anew
        [ "$(ns_owner "$ns")" = "$dir" ] && for pid in $(ip netns pids "$ns"); do kill -TERM "$pid" 2>/dev/null || true; done
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
    local other
    other=$(ip -o -4 addr show to "$NET.0/24" 2>/dev/null | awk '{print $2}' | grep -vx "$BR" | head -n 1 || true)
    [ -z "$other" ] || die "$NET.0/24 is already used by $other (another instance?); pick another SSKJ_NETNS_FIRST or SSKJ_NETNS_NET"
    if ! ip link show "$BR" >/dev/null 2>&1; then
        ip link add "$BR" type bridge
    fi
    printf 'FIRST=%s\nNET=%s\nBR=%s\n' "$FIRST" "$NET" "$BR" >"$dir/instance"
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
    local dir=${1:-} ns pid name owner
    [ -n "$dir" ] || die "usage: $0 down DIR   (the DIR given to up: only that instance's hosts are removed)"
    [ "$(id -u)" = 0 ] || die "must run as root"
    if [ ! -d "$dir" ]; then log "down: $dir does not exist, nothing to do"; return 0; fi
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/instance" ]; then
        BR=$(sed -n 's/^BR=//p' "$dir/instance")
    fi
    for name in $(ls "$dir/hosts" 2>/dev/null || true); do
        ns=$PREFIX$name
        if ns_exists "$ns"; then
            owner=$(ns_owner "$ns")
            if [ -n "$owner" ] && [ "$owner" != "$dir" ]; then
                log "down: $ns belongs to $owner, left alone"
                continue
            fi
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
            for _ in $(seq 30); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns del "$ns"
        fi
        ip link del "sskjv$name" 2>/dev/null || true
    done
    if [ -n "$BR" ] && ip link show "$BR" >/dev/null 2>&1 && [ -z "$(ls "/sys/class/net/$BR/brif" 2>/dev/null)" ]; then
        ip link del "$BR"
    fi
    rm -rf "$dir"
    log "down: the hosts of $dir are gone (bridge $BR)"
}

cmd_status() {
    local dir=${1:-} ns names
    if [ -n "$dir" ]; then
        names=$(ls "$dir/hosts" 2>/dev/null | sed "s/^/$PREFIX/" || true)
    else
        names=$(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]*$" || true)
    fi
    for ns in $names; do
        ns_exists "$ns" || continue
        echo "$ns $(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}') owner: $(ns_owner "$ns") pids: $(ip netns pids "$ns" | tr '\n' ' ')"
    done
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    status) shift; cmd_status "$@" ;;
    *) die "usage: $0 up N DIR | down DIR | status [DIR]" ;;
esac
