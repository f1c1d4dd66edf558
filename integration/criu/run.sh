#!/usr/bin/env bash
# CRIU's dump+restore of a process holding as much memory as the task
# `dpvm bench migrate` moves, so that application-level migration can be
# seen next to transparent process checkpointing: on the same host, and
# between hosts (dump, an encrypted copy of the images to the other host
# with ssh, restore there).
#
#   integration/criu/run.sh [--sizes 0,16,256,1024] [--reps 3] [--dir DIR]
#                           [--out FILE] [--criu-home DIR] [--system]
#                           [--copy tar|scp] [--ssh-port 2222] [--same-host]
#
#   --sizes LIST     state sizes in MiB (0,16,256,1024)
#   --reps N         repetitions per size, medians printed (3)
#   --dir DIR        where CRIU's images go (a new directory under $TMPDIR);
#                    give the file system dpvm's shared directory is on
#   --out FILE       also write the JSON lines to FILE, for
#                    `dpvm bench migrate --criu FILE`
#   --criu-home DIR  where CRIU is unpacked (/var/tmp/dpvm-criu)
#   --system         use the system's criu (apt-get install criu) instead
#   --copy HOW       how the images go to the other host: scp (the default:
#                    scp -r, which is SFTP in OpenSSH 9) or tar
#                    (tar -cf - . | ssh HOST 'tar -xf -')
#   --ssh-port N     the loopback port of the other host's sshd (2222)
#   --same-host      only the same-host dump+restore: no sshd, no copy
#
# Run by hand as root, not in CI. Debian 12's criu 3.17 fails `criu check`
# on this machine's kernel (a vDSO error), so by default the script fetches
# Debian 13's (trixie) criu and the libraries it needs as .deb files with
# apt-get (a private apt configuration: the system's sources and package
# state are untouched), unpacks them under --criu-home and runs criu with
# trixie's own loader and libraries. The machine's VM does not deliver
# hardware breakpoints (debug registers) to ptrace: criu dump then waits
# forever for the breakpoint trap at the end of its parasite code, so the
# script sets CRIU_FAULT=130, CRIU's switch that makes it stop the parasite
# with PTRACE_SYSCALL instead of a breakpoint.
#
# Between hosts, "the other host" is this machine reached over loopback, as
# an administrator moving a process with CRIU alone would reach a real one:
# the script installs openssh-server if sshd is missing (apt-get install -y,
# with the package kept from starting the system's sshd), makes a private
# directory under /run (0700, removed at exit) holding a new host key, a new
# key pair for root, an authorized_keys file that accepts that key from
# 127.0.0.1 only, a known_hosts file with the host key and an ssh_config
# (StrictHostKeyChecking yes, BatchMode, no agent, no compression, default
# ciphers), and starts its own sshd on 127.0.0.1:--ssh-port with its own
# sshd_config, stopped at exit. The system's sshd configuration and root's
# ~/.ssh are not touched; only /run/sshd, sshd's privilege separation
# directory, is made if missing. The directory is under /run rather than
# /tmp because sshd's StrictModes refuses an authorized_keys file below a
# world-writable directory. The sshd serves SFTP with internal-sftp, inside
# sshd, so scp starts no shell on the other host; `tar | ssh` runs its tar
# through root's login shell, which sources ~/.bashrc (on the machine these
# figures were measured on, 1.2 s of pyenv set-up per connection), which is
# why scp is the default.
#
# Prints one JSON line per size (see main.go for the fields: dump_s,
# restore_s, seconds on the same host; remote_dump_s, copy_s,
# remote_restore_s, remote_s, copy_via, cipher between hosts) on stdout;
# progress on stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

sizes=0,16,256,1024
reps=3
dir=
out=
home=/var/tmp/dpvm-criu
system=0
copy=scp
ssh_port=2222
remote=1
while [ $# -gt 0 ]; do
	case $1 in
	--sizes) sizes=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--criu-home) home=$2; shift 2 ;;
	--system) system=1; shift ;;
	--copy) copy=$2; shift 2 ;;
	--ssh-port) ssh_port=$2; shift 2 ;;
	--same-host) remote=0; shift ;;
	-h | --help) sed -n '2,55p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

case $copy in tar | scp) ;; *) echo "run.sh: --copy $copy: want tar or scp" >&2; exit 2 ;; esac
case $ssh_port in '' | *[!0-9]*) echo "run.sh: --ssh-port $ssh_port: want a port number" >&2; exit 2 ;; esac

if [ "$(id -u)" != 0 ]; then
	echo "run.sh: CRIU needs root" >&2
	exit 1
fi

log() { echo "criu: $*" >&2; }

# install_trixie fetches criu 4.x and its libraries from Debian 13 and
# unpacks them under $home/root.
install_trixie() {
	local apt=$home/apt lib=$home/root/usr/lib/x86_64-linux-gnu
	if [ -x "$lib/ld-linux-x86-64.so.2" ] && [ -x "$home/root/usr/sbin/criu" ]; then
		return
	fi
	log "fetching Debian 13's criu into $home"
	mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$home/debs" "$home/root"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$apt/sources.list"
	: >"$apt/status"
	local o=(-o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=$apt/status")
	apt-get "${o[@]}" update >&2
	# criu and everything it depends on, recursively.
	local pkgs
	mapfile -t pkgs < <(apt-cache "${o[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances --no-pre-depends criu | grep -v '^ ' | grep -v '<' | sort -u)
	(cd "$home/debs" && apt-get "${o[@]}" download "${pkgs[@]}" >&2)
	for f in "$home"/debs/*.deb; do
		dpkg-deb -x "$f" "$home/root"
	done
}

if [ "$system" = 1 ]; then
	command -v criu >/dev/null || apt-get install -y criu >&2
	criu=(criu)
else
	install_trixie
	lib=$home/root/usr/lib/x86_64-linux-gnu
	criu=("$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$home/root/usr/sbin/criu")
fi
export CRIU_FAULT=130

log "$("${criu[@]}" --version | head -1)"
if ! "${criu[@]}" check >&2; then
	log "criu check failed on $(uname -r): see above"
	exit 1
fi

# install_sshd installs openssh-server if there is no sshd, keeping the
# package from starting the system's sshd (a policy-rc.d that refuses, only
# if there is none already, removed right after).
install_sshd() {
	[ -x /usr/sbin/sshd ] && return
	log "installing openssh-server"
	local policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy=1
	fi
	local rc=0
	apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y openssh-server >&2 || rc=$?
	if [ -n "$policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
	if [ "$rc" != 0 ] || [ ! -x /usr/sbin/sshd ]; then
		log "could not install openssh-server"
		exit 1
	fi
}

peer_dir=
sshd_pid=
stop_peer() {
	if [ -n "$sshd_pid" ]; then
		kill "$sshd_pid" 2>/dev/null || true
		wait "$sshd_pid" 2>/dev/null || true
	fi
	if [ -n "$peer_dir" ]; then rm -rf "$peer_dir"; fi
}

# start_peer makes the private ssh directory and starts the other host's
# sshd on 127.0.0.1:$ssh_port.
start_peer() {
	install_sshd
	peer_dir=$(mktemp -d /run/dpvm-criu-ssh.XXXXXX)
	trap stop_peer EXIT
	local d=$peer_dir
	ssh-keygen -q -t ed25519 -N '' -C dpvm-criu-host -f "$d/host_ed25519"
	ssh-keygen -q -t ed25519 -N '' -C dpvm-criu-root -f "$d/id_ed25519"
	echo "from=\"127.0.0.1\" $(cat "$d/id_ed25519.pub")" >"$d/authorized_keys"
	echo "[127.0.0.1]:$ssh_port $(cut -d' ' -f1,2 "$d/host_ed25519.pub")" >"$d/known_hosts"
	cat >"$d/sshd_config" <<-EOF
		ListenAddress 127.0.0.1:$ssh_port
		HostKey $d/host_ed25519
		PidFile $d/sshd.pid
		AuthorizedKeysFile $d/authorized_keys
		AllowUsers root
		PermitRootLogin prohibit-password
		PubkeyAuthentication yes
		PasswordAuthentication no
		KbdInteractiveAuthentication no
		UsePAM no
		AllowAgentForwarding no
		AllowTcpForwarding no
		X11Forwarding no
		PermitTTY no
		Subsystem sftp internal-sftp
	EOF
	cat >"$d/ssh_config" <<-EOF
		Host dpvm-criu-peer
		    HostName 127.0.0.1
		    Port $ssh_port
		    User root
		    IdentityFile $d/id_ed25519
		    IdentitiesOnly yes
		    IdentityAgent none
		    UserKnownHostsFile $d/known_hosts
		    GlobalKnownHostsFile /dev/null
		    StrictHostKeyChecking yes
		    UpdateHostKeys no
		    BatchMode yes
		    Compression no
		    ControlMaster no
		    ControlPath none
	EOF
	mkdir -p /run/sshd
	chmod 755 /run/sshd
	/usr/sbin/sshd -t -f "$d/sshd_config"
	/usr/sbin/sshd -D -e -f "$d/sshd_config" </dev/null >/dev/null 2>"$d/sshd.log" &
	sshd_pid=$!
	for _ in $(seq 100); do
		if ssh -F "$d/ssh_config" dpvm-criu-peer true 2>/dev/null; then
			log "the other host: sshd on 127.0.0.1:$ssh_port ($(ssh -V 2>&1))"
			return
		fi
		if ! kill -0 "$sshd_pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	log "the other host's sshd did not answer on 127.0.0.1:$ssh_port:"
	cat "$d/sshd.log" >&2
	ssh -F "$d/ssh_config" dpvm-criu-peer true || true
	exit 1
}

bin=$home/criubench
(cd "$repo" && go build -o "$bin" ./integration/criu)
args=(-criu "${criu[*]}" -sizes "$sizes" -reps "$reps")
[ -n "$dir" ] && args+=(-dir "$dir")
if [ "$remote" = 1 ]; then
	start_peer
	args+=(-ssh-config "$peer_dir/ssh_config" -peer dpvm-criu-peer -copy "$copy")
fi
log "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$out" ]; then
	"$bin" "${args[@]}" | tee "$out"
else
	"$bin" "${args[@]}"
fi
