#!/usr/bin/env bash
# Peer benchmark harness: PVM 3.4 and Open MPI on this host, measured the way
# `dpvm bench pingpong` measures dpvm, so that the figures can stand side by
# side.
#
#   daemon/bench/peers/run.sh [--rounds N] [--scale S] [--only LIST]
#                            [--out DIR] [--dpvm FILE] [--dpvm-bin PATH]
#                            [--no-install] [--no-table]
#                            [--pvm-fragsize BYTES]
#
#   --rounds N    rounds over all systems, alternating their order (3)
#   --scale S     repetitions and time caps multiplied by S (1; 0.1 is quick)
#   --only LIST   comma-separated systems among raw-tcp, pvm-daemon,
#                 pvm-direct, mpi-tcp, mpi-shm, and with --dpvm-bin
#                 dpvm-local, dpvm-remote, quic-go (all)
#   --out DIR     where results.jsonl and table.md go (./peers-results)
#   --dpvm FILE   also put the JSON lines of `dpvm bench pingpong --json`
#                 in FILE into the table
#   --dpvm-bin PATH
#                 also measure dpvm in the same rounds, alternating with the
#                 peers: PATH is a dpvm binary, run as
#                 `PATH bench peers --line MODE --scale S` for the systems
#                 dpvm-local (two tasks on one daemon, spawn, collectives),
#                 dpvm-remote (two daemons over QUIC on loopback) and
#                 quic-go (raw quic-go); `dpvm bench peers` passes itself
#   --no-install  fail instead of installing missing packages
#   --no-table    do not print the table at the end (`dpvm bench peers`
#                 prints its own)
#   --pvm-fragsize BYTES
#                 also run PVM with this PvmFragSize (PVM's default is
#                 4080 bytes); those runs are named pvm-daemon-fragBYTES and
#                 pvm-direct-fragBYTES
#
# It installs PVM (pvm, pvm-dev), Open MPI (openmpi-bin, libopenmpi-dev) and
# a C compiler with apt-get when they are missing, builds its C programs into
# a private work directory, starts a private PVM virtual machine on this host
# (PVM_TMP in the work directory, so another pvmd of the same user is left
# alone), runs every configuration, and halts the virtual machine on exit or
# failure. Every configuration prints one JSON line; results.jsonl collects
# them with their round, machine.txt describes the machine and its load, and
# table.md is the summary: for every figure the median of the rounds with
# their range (min-max) in parentheses.
#
# Everything runs on this host: PVM with one pvmd and no remote hosts, Open
# MPI with its TCP interfaces restricted to loopback.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The repository, when run from a checkout (the table is built with Go there).
repo=$(cd "$here/../../.." && pwd)

rounds=3
scale=1
only="raw-tcp,pvm-daemon,pvm-direct,mpi-tcp,mpi-shm"
out=$PWD/peers-results
dpvm_file=
dpvm_bin=
table=1
install=1
fragsize=0
# Seconds one configuration may take before it is stopped (at scale 1).
per_run_timeout=300

die() {
	echo "peers: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--rounds)
		rounds=${2:?--rounds needs a number}
		shift 2
		;;
	--scale)
		scale=${2:?--scale needs a number}
		shift 2
		;;
	--only)
		only=${2:?--only needs a list}
		shift 2
		;;
	--out)
		out=${2:?--out needs a directory}
		shift 2
		;;
	--dpvm)
		dpvm_file=${2:?--dpvm needs a file}
		shift 2
		;;
	--dpvm-bin)
		dpvm_bin=${2:?--dpvm-bin needs a path}
		shift 2
		;;
	--no-install)
		install=0
		shift
		;;
	--no-table)
		table=0
		shift
		;;
	--pvm-fragsize)
		fragsize=${2:?--pvm-fragsize needs a number of bytes}
		shift 2
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		die "unknown argument $1 (see --help)"
		;;
	esac
done

[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] && [ "$rounds" -le 50 ] ||
	die "--rounds must be an integer in [1, 50], not $rounds"
[[ $scale =~ ^[0-9]*\.?[0-9]+$ ]] || die "--scale must be a positive number, not $scale"
awk -v s="$scale" 'BEGIN { exit !(s > 0 && s <= 10) }' || die "--scale must be in (0, 10], not $scale"
for s in ${only//,/ }; do
	case "$s" in
	raw-tcp | pvm-daemon | pvm-direct | mpi-tcp | mpi-shm) ;;
	dpvm-local | dpvm-remote | quic-go)
		[ -n "$dpvm_bin" ] || die "--only: $s needs --dpvm-bin"
		;;
	*) die "--only: unknown system $s" ;;
	esac
done
[[ $fragsize =~ ^[0-9]+$ ]] && [ "$fragsize" -le 16777216 ] ||
	die "--pvm-fragsize must be an integer in [0, 16777216], not $fragsize"
if [ -n "$dpvm_bin" ]; then
	[ -x "$dpvm_bin" ] || die "--dpvm-bin: $dpvm_bin is not an executable"
	[ "$only" = "raw-tcp,pvm-daemon,pvm-direct,mpi-tcp,mpi-shm" ] && only="$only,dpvm-local,dpvm-remote,quic-go"
fi
if [ -n "$dpvm_file" ] && [ ! -r "$dpvm_file" ]; then
	die "--dpvm: cannot read $dpvm_file"
fi
want() { [[ ",$only," == *",$1,"* ]]; }

# ---- packages ----

need_pkgs=()
command -v gcc >/dev/null 2>&1 || need_pkgs+=(gcc libc6-dev)
if want pvm-daemon || want pvm-direct; then
	{ command -v pvmd >/dev/null 2>&1 || [ -x /usr/lib/pvm3/lib/pvmd ]; } || need_pkgs+=(pvm)
	[ -r /usr/include/pvm3.h ] || need_pkgs+=(pvm-dev)
fi
if want mpi-tcp || want mpi-shm; then
	command -v mpirun >/dev/null 2>&1 || need_pkgs+=(openmpi-bin)
	command -v mpicc >/dev/null 2>&1 || need_pkgs+=(libopenmpi-dev)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
	[ "$install" = 1 ] || die "missing packages: ${need_pkgs[*]} (run without --no-install, or apt-get install them)"
	sudo=
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "missing packages ${need_pkgs[*]} and not root: install them first"
		sudo=sudo
	fi
	echo "peers: installing ${need_pkgs[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
		"${need_pkgs[@]}" >&2
fi

# ---- work directory, cleanup ----

work=$(mktemp -d "${TMPDIR:-/tmp}/dpvm-peers.XXXXXX")
pvmd_pid=
export PVM_ROOT=/usr/lib/pvm3
export PVM_TMP=$work/pvmtmp

pvm_halt() {
	[ -n "$pvmd_pid" ] || return 0
	# The console finds this pvmd through PVM_TMP; halt stops it and its tasks.
	# (In a subshell: halt kills the console too, and bash would say so.)
	(echo halt | timeout 10 pvm) >/dev/null 2>&1 || true
	for _ in $(seq 50); do
		kill -0 "$pvmd_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pvmd_pid" 2>/dev/null; then
		echo "peers: pvmd $pvmd_pid did not halt; killing it" >&2
		kill "$pvmd_pid" 2>/dev/null || true
	fi
	wait "$pvmd_pid" 2>/dev/null || true
	pvmd_pid=
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	pvm_halt
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- build ----

bin=$work/bin
mkdir -p "$bin" "$PVM_TMP" "$out"
cflags=(-O2 -Wall -Wextra -Werror -std=gnu11)
gcc "${cflags[@]}" -o "$bin/raw_bench" "$here/csrc/raw_bench.c"
if want pvm-daemon || want pvm-direct; then
	gcc "${cflags[@]}" -o "$bin/pvm_bench" "$here/csrc/pvm_bench.c" -lgpvm3 -lpvm3
fi
if want mpi-tcp || want mpi-shm; then
	mpicc "${cflags[@]}" -o "$bin/mpi_bench" "$here/csrc/mpi_bench.c"
fi

# ---- PVM virtual machine ----

pvmd_bin=/usr/lib/pvm3/lib/pvmd
[ -x "$pvmd_bin" ] || pvmd_bin=$(command -v pvmd || true)

pvm_start() {
	[ -n "$pvmd_bin" ] || die "pvmd not found"
	PVM_ARCH=$(pvmgetarch 2>/dev/null || echo LINUX64)
	export PVM_ARCH
	# PVM refuses to run as root unless told that the user means it.
	if [ "$(id -u)" = 0 ]; then
		export PVM_ALLOW_ROOT=yes
	fi
	# The host file names no host: the virtual machine is this host alone.
	# ep: where pvm_spawn finds the benchmark and the group server (pvmgs).
	local pvmgs_dir=/usr/lib/pvm3/lib
	[ -x "$pvmgs_dir/pvmgs" ] || pvmgs_dir=$(dirname "$(command -v pvmgs)")
	printf '* ep=%s:%s wd=%s\n' "$bin" "$pvmgs_dir" "$work" >"$work/hostfile"
	# pvmd closes every descriptor below the soft limit in each task it
	# forks; run it with the usual Linux default so that spawn measures
	# PVM and not 20000 close() calls on a container's raised limit.
	(
		ulimit -n 1024
		exec "$pvmd_bin" "$work/hostfile" </dev/null >"$work/pvmd.out" 2>&1
	) &
	pvmd_pid=$!
	for _ in $(seq 100); do
		[ -e "$PVM_TMP/pvmd.$(id -u)" ] && break
		kill -0 "$pvmd_pid" 2>/dev/null || break
		sleep 0.1
	done
	if [ ! -e "$PVM_TMP/pvmd.$(id -u)" ]; then
		cat "$work/pvmd.out" >&2 || true
		die "pvmd did not start"
	fi
	echo "peers: pvmd $pvmd_pid up ($(head -1 "$work/pvmd.out"))" >&2
}

# ---- MPI ----

mpi_shm_btl=
mpirun_args=()
mpi_setup() {
	local btls
	btls=$(ompi_info 2>/dev/null | sed -n 's/^ *MCA btl: \([a-z0-9_]*\) .*/\1/p' | tr '\n' ' ')
	# Open MPI 1.8-4.x call the shared-memory transport vader; 5.x call it sm.
	if [[ " $btls " == *" vader "* ]]; then
		mpi_shm_btl=vader
	elif [[ " $btls " == *" sm "* ]]; then
		mpi_shm_btl=sm
	else
		die "no shared-memory btl in Open MPI (found: $btls)"
	fi
	# Open MPI binds each of the two ranks to its own core by default; left
	# unbound, two polling ranks on two shared cores often meet on one.
	mpirun_args=(-np 2 --oversubscribe
		--mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)
	if [ "$(id -u)" = 0 ]; then
		mpirun_args+=(--allow-run-as-root)
	fi
	echo "peers: Open MPI $(ompi_info --version 2>/dev/null | head -1 | awk '{print $NF}'), shared memory btl: $mpi_shm_btl" >&2
}

# ---- runs ----

results=$out/results.jsonl
: >"$results"
timeout_s=$(awk -v s="$scale" -v t="$per_run_timeout" 'BEGIN { x = int(t * s); if (x < 60) x = 60; print x }')
failed=0

run_one() { # system round
	local sys=$1 round=$2 line rc=0
	rm -f "$work/mpi.err"
	if [[ $sys == pvm-* ]] && ! kill -0 "$pvmd_pid" 2>/dev/null; then
		echo "peers: $sys round $round not run: pvmd is no longer running" >&2
		failed=$((failed + 1))
		return 0
	fi
	case "$sys" in
	raw-tcp)
		line=$(timeout "$timeout_s" "$bin/raw_bench" -s "$scale") || rc=$?
		;;
	pvm-daemon)
		line=$(timeout "$timeout_s" "$bin/pvm_bench" -r daemon -s "$scale" -t 60) || rc=$?
		;;
	pvm-direct)
		line=$(timeout "$timeout_s" "$bin/pvm_bench" -r direct -s "$scale" -t 60) || rc=$?
		;;
	pvm-daemon-frag)
		line=$(timeout "$timeout_s" "$bin/pvm_bench" -r daemon -f "$fragsize" -s "$scale" -t 60) || rc=$?
		;;
	pvm-direct-frag)
		line=$(timeout "$timeout_s" "$bin/pvm_bench" -r direct -f "$fragsize" -s "$scale" -t 60) || rc=$?
		;;
	mpi-tcp)
		line=$(timeout "$timeout_s" mpirun "${mpirun_args[@]}" --mca btl tcp,self \
			"$bin/mpi_bench" -n mpi-tcp -m remote -s "$scale" 2>"$work/mpi.err") || rc=$?
		;;
	mpi-shm)
		line=$(timeout "$timeout_s" mpirun "${mpirun_args[@]}" --mca btl "$mpi_shm_btl,self" \
			"$bin/mpi_bench" -n mpi-shm -m local -s "$scale" 2>"$work/mpi.err") || rc=$?
		;;
	dpvm-local | dpvm-remote | quic-go)
		local mode=${sys#dpvm-}
		[ "$sys" = quic-go ] && mode=quic
		line=$(timeout "$timeout_s" "$dpvm_bin" bench peers --line "$mode" --scale "$scale") || rc=$?
		;;
	esac
	line=$(printf '%s\n' "$line" | grep '^{' | tail -1 || true)
	if [ "$rc" != 0 ] || [ -z "$line" ]; then
		echo "peers: $sys round $round failed (exit $rc)" >&2
		[ -s "$work/mpi.err" ] && sed 's/^/  mpirun: /' "$work/mpi.err" | head -20 >&2
		failed=$((failed + 1))
		return 0
	fi
	printf '{"round":%d,%s\n' "$round" "${line#\{}" >>"$results"
	echo "$line"
}

systems=()
for s in raw-tcp pvm-daemon dpvm-local pvm-direct mpi-tcp dpvm-remote mpi-shm quic-go; do
	want "$s" && systems+=("$s")
	if [ "$fragsize" -gt 0 ] && [[ $s == pvm-* ]] && want "$s"; then
		systems+=("$s-frag")
	fi
done
if want pvm-daemon || want pvm-direct; then pvm_start; fi
if want mpi-tcp || want mpi-shm; then mpi_setup; fi

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "PVM $(dpkg-query -W -f '${Version}' pvm 2>/dev/null || echo '?'), Open MPI $(dpkg-query -W -f '${Version}' openmpi-bin 2>/dev/null || echo '?'), rounds $rounds, scale $scale"
	[ -z "$dpvm_bin" ] || echo "dpvm: $dpvm_bin ($(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
} >"$out/machine.txt"
cat "$out/machine.txt" >&2

n=${#systems[@]}
for ((r = 1; r <= rounds; r++)); do
	# Alternate: each round starts one system later, and odd rounds go
	# backwards, so no system always runs first or after the same one.
	for ((i = 0; i < n; i++)); do
		if ((r % 2)); then j=$(((i + r - 1) % n)); else j=$(((n - 1 - i + r - 1) % n)); fi
		run_one "${systems[$j]}" "$r"
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# ---- table ----

table_inputs=("$results")
[ -n "$dpvm_file" ] && table_inputs+=("$dpvm_file")
if [ "$table" = 0 ]; then
	:
elif command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
	(cd "$repo" && go run ./daemon/bench/peers/cmd/peertable "${table_inputs[@]}") >"$out/table.md"
	{
		echo
		cat "$out/machine.txt"
		echo
		cat "$out/table.md"
	}
else
	echo "peers: go not found; raw results are in $results" >&2
fi
if [ "$failed" -gt 0 ]; then
	die "$failed run(s) failed; see the messages above"
fi
