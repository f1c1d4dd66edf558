#!/usr/bin/env bash
# CRIU's same-host dump+restore of a process holding as much memory as the
# task `dpvm bench migrate` moves, so that application-level migration can
# be seen next to transparent process checkpointing.
#
#   integration/criu/run.sh [--sizes 0,16,256,1024] [--reps 3] [--dir DIR]
#                           [--out FILE] [--criu-home DIR] [--system]
#
#   --sizes LIST     state sizes in MiB (0,16,256,1024)
#   --reps N         dump+restore repetitions per size, medians printed (3)
#   --dir DIR        where CRIU's images go (a new directory under $TMPDIR);
#                    give the file system dpvm's shared directory is on
#   --out FILE       also write the JSON lines to FILE, for
#                    `dpvm bench migrate --criu FILE`
#   --criu-home DIR  where CRIU is unpacked (/var/tmp/dpvm-criu)
#   --system         use the system's criu (apt-get install criu) instead
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
# Prints one JSON line per size (see main.go) on stdout; progress on stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

sizes=0,16,256,1024
reps=3
dir=
out=
home=/var/tmp/dpvm-criu
system=0
while [ $# -gt 0 ]; do
	case $1 in
	--sizes) sizes=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--criu-home) home=$2; shift 2 ;;
	--system) system=1; shift ;;
	-h | --help) sed -n '2,30p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

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
	pkgs=$(apt-cache "${o[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances --no-pre-depends criu | grep -v '^ ' | grep -v '<' | sort -u)
	(cd "$home/debs" && apt-get "${o[@]}" download $pkgs >&2)
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

bin=$home/criubench
(cd "$repo" && go build -o "$bin" ./integration/criu)
args=(-criu "${criu[*]}" -sizes "$sizes" -reps "$reps")
[ -n "$dir" ] && args+=(-dir "$dir")
log "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$out" ]; then
	"$bin" "${args[@]}" | tee "$out"
else
	"$bin" "${args[@]}"
fi
