#!/usr/bin/env bash
# NPB comparison harness: the official NPB 3.4 kernels (serial and MPI)
# beside `dpvm npb`, measured in alternating rounds on this host.
#
#   daemon/bench/npbofficial/run.sh --src DIR --dpvm-bin PATH
#                                  [--class A] [--rounds 3]
#                                  [--kernels ep,cg,mg,ft,is] [--out DIR]
#                                  [--omp [--threads 1,2]] [--no-install]
#
#   --src DIR       the official NPB 3.4 source: a directory holding
#                   NPB3.4-OMP and NPB3.4-MPI (and NPB3.4-SER if present),
#                   or one of its parents down to two levels (dpvm does not
#                   ship it)
#   --dpvm-bin PATH the dpvm binary to measure (`PATH npb K --json`)
#   --class C       the NPB class, S, W, A, B, C or D (A)
#   --rounds N      rounds over all runs (3)
#   --kernels LIST  comma-separated kernels among ep, cg, mg, ft, is (all)
#   --out DIR       where the builds, results.jsonl and machine.txt go
#                   (./npb-official-results)
#   --omp           also build the OpenMP suite and run it at each thread
#                   count N beside `dpvm npb K --np N`
#   --threads LIST  comma-separated thread counts for --omp (1,2)
#   --no-install    fail instead of installing missing packages
#
# It installs gfortran, gcc, make and Open MPI with apt-get when they are
# missing, copies the suites into DIR/build, writes each suite's make.def
# from its own template with -O3 (serial: the NPB3.4-SER suite when present,
# else the OpenMP suite without -fopenmp, so one thread), builds the kernels
# of the class, and then, round after round, runs for every kernel the
# official serial binary, `dpvm npb K --np 1`, `mpirun -np 2` of the MPI
# binary and `dpvm npb K --np 2`. The order of the official and dpvm runs
# alternates from one round to the next. With --omp, the OpenMP suite is
# built with -fopenmp too, and every round then runs, for each thread count
# N, the OpenMP binary with OMP_NUM_THREADS=N beside `dpvm npb K --np N`.
# Every run is one JSON line in results.jsonl, whose suite is the official
# suite of the run or of its partner (serial, mpi or omp):
#
#   {"round":1,"kernel":"ep","class":"A","system":"official","suite":"serial",
#    "np":1,"time_s":…,"mops":…,"verified":true,"maxrss_kib":[…]}
#
# maxrss_kib holds the peak resident set of every process of the run (one
# per MPI rank, from /usr/bin/time around each rank; dpvm's tasks share one
# process). A run that fails or does not verify still gets its line, with
# "verified":false, and the script exits 1 at the end.
set -euo pipefail

src=
dpvm_bin=
class=A
rounds=3
kernels=ep,cg,mg,ft,is
out=$PWD/npb-official-results
install=1
omp=0
threads=
# Seconds one run may take before it is stopped.
per_run_timeout=1800

die() {
	echo "npb-official: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--src) src=${2:?--src needs a directory}; shift 2 ;;
	--dpvm-bin) dpvm_bin=${2:?--dpvm-bin needs a path}; shift 2 ;;
	--class) class=${2:?--class needs a class}; shift 2 ;;
	--rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
	--kernels) kernels=${2:?--kernels needs a list}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--omp) omp=1; shift ;;
	--threads) threads=${2:?--threads needs a list}; shift 2 ;;
	--no-install) install=0; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
done

[ -n "$src" ] || die "--src DIR is required (the official NPB 3.4 source)"
[ -n "$dpvm_bin" ] || die "--dpvm-bin PATH is required"
[ -x "$dpvm_bin" ] || die "--dpvm-bin $dpvm_bin: not an executable"
case "$class" in S | W | A | B | C | D) ;; *) die "--class $class: want S, W, A, B, C or D" ;; esac
case "$rounds" in '' | *[!0-9]*) die "--rounds $rounds: not a number" ;; esac
[ "$rounds" -ge 1 ] && [ "$rounds" -le 50 ] || die "--rounds $rounds is outside 1..50"
IFS=, read -r -a klist <<<"$kernels"
[ ${#klist[@]} -gt 0 ] || die "--kernels is empty"
for k in "${klist[@]}"; do
	case "$k" in ep | cg | mg | ft | is) ;; *) die "--kernels: unknown kernel $k" ;; esac
done
tlist=()
if [ "$omp" = 1 ]; then
	IFS=, read -r -a tlist <<<"${threads:-1,2}"
	[ ${#tlist[@]} -gt 0 ] || die "--threads is empty"
	for n in "${tlist[@]}"; do
		case "$n" in '' | *[!0-9]* | 0*) die "--threads: $n is not a thread count" ;; esac
		[ "$n" -le 1024 ] || die "--threads: $n is above 1024"
	done
elif [ -n "$threads" ]; then
	die "--threads needs --omp"
fi

# Find the suites: DIR itself, or one or two levels below it.
root=
for d in "$src" "$src"/* "$src"/*/*; do
	if [ -d "$d/NPB3.4-MPI" ] && { [ -d "$d/NPB3.4-OMP" ] || [ -d "$d/NPB3.4-SER" ]; }; then
		root=$(cd "$d" && pwd)
		break
	fi
done
[ -n "$root" ] || die "--src $src: no NPB3.4-MPI beside NPB3.4-OMP or NPB3.4-SER in it or two levels below"
[ "$omp" = 0 ] || [ -d "$root/NPB3.4-OMP" ] || die "--omp: no NPB3.4-OMP in $root"

need=()
command -v gfortran >/dev/null || need+=(gfortran)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpif90 >/dev/null || need+=(libopenmpi-dev)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
	[ "$install" = 1 ] || die "missing packages: ${need[*]} (run without --no-install to install them)"
	echo "npb-official: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y "${need[@]}" >&2 || { apt-get update >&2 && apt-get install -y "${need[@]}" >&2; } ||
		die "apt-get install ${need[*]} failed"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
build=$out/build
mkdir -p "$build"
results=$out/results.jsonl
: >"$results"

{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "official: NPB 3.4 from $root; $(gfortran --version | head -1); $(mpirun --version 2>/dev/null | head -1)"
	echo "dpvm: $dpvm_bin"
	echo "class $class, $rounds rounds, kernels ${klist[*]}${tlist[*]:+, OpenMP at ${tlist[*]} threads}"
} >"$out/machine.txt"

# build_suite SUITE DIR FLAGS [EXTRA]: copy the suite into DIR, write make.def and
# suite.def from its templates (FFLAGS and CFLAGS set to FLAGS, plus EXTRA
# for Fortran), and build the kernels of the class.
build_suite() {
	local suite=$1 dir=$2 fflags=$3 extra=${4:-}
	rm -rf "$dir"
	cp -r "$root/$suite" "$dir"
	mkdir -p "$dir/bin"
	sed -e "s/^FFLAGS[[:space:]]*=.*/FFLAGS	= $fflags $extra/" \
		-e "s/^CFLAGS[[:space:]]*=.*/CFLAGS	= $fflags/" \
		"$dir/config/make.def.template" >"$dir/config/make.def"
	for k in "${klist[@]}"; do
		echo "npb-official: building $suite $k class $class" >&2
		make -C "$dir" "${k^^}" CLASS="$class" >"$dir/build-$k.log" 2>&1 ||
			die "building $suite $k class $class failed; see $dir/build-$k.log"
	done
}

if [ -d "$root/NPB3.4-SER" ]; then
	build_suite NPB3.4-SER "$build/ser" "-O3"
else
	build_suite NPB3.4-OMP "$build/ser" "-O3"
fi
# gfortran 10 and later reject the MPI suite's calls that pass scalars and
# arrays to the same MPI routine unless told to allow it.
mpiextra=
if [ "$(gfortran -dumpversion | cut -d. -f1)" -ge 10 ]; then
	mpiextra=-fallow-argument-mismatch
fi
build_suite NPB3.4-MPI "$build/mpi" "-O3" "$mpiextra"
[ "$omp" = 0 ] || build_suite NPB3.4-OMP "$build/omp" "-O3 -fopenmp"

mpiflags=(-np 2)
[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)
# Two ranks on a machine that may report fewer slots.
mpiflags+=(--oversubscribe)

failed=0

# official SUITE NP ROUND K: run the official binary of SUITE (serial, mpi
# or omp) and print its line.
official() {
	local suite=$1 np=$2 r=$3 k=$4 bin log
	log=$out/logs/official-$suite-$k-np$np-r$r
	mkdir -p "$out/logs"
	rm -f "$log".rss.*
	export OMP_NUM_THREADS=1
	if [ "$suite" = omp ]; then
		bin=$build/omp/bin/$k.$class.x
		(cd "$build/omp/bin" && OMP_NUM_THREADS=$np timeout "$per_run_timeout" /usr/bin/time -f %M -o "$log.rss.0" "$bin") >"$log.out" 2>&1 || true
	elif [ "$suite" = serial ]; then
		bin=$build/ser/bin/$k.$class.x
		(cd "$build/ser/bin" && timeout "$per_run_timeout" /usr/bin/time -f %M -o "$log.rss.0" "$bin") >"$log.out" 2>&1 || true
	else
		bin=$build/mpi/bin/$k.$class.x
		(cd "$build/mpi/bin" && timeout "$per_run_timeout" mpirun "${mpiflags[@]}" \
			sh -c 'exec /usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$1"' "$log" "$bin") >"$log.out" 2>&1 || true
	fi
	local t m v rss
	t=$(sed -n 's/^ *Time in seconds *= *//p' "$log.out" | head -1)
	m=$(sed -n 's/^ *Mop\/s total *= *//p' "$log.out" | head -1)
	v=false
	grep -q '^ *Verification *= *SUCCESSFUL' "$log.out" && v=true
	rss=$(cat "$log".rss.* 2>/dev/null | grep -E '^[0-9]+$' | paste -sd, -)
	[ "$v" = true ] || { failed=1; echo "npb-official: official $suite $k np $np round $r did not verify; see $log.out" >&2; }
	printf '{"round":%d,"kernel":"%s","class":"%s","system":"official","suite":"%s","np":%d,"time_s":%s,"mops":%s,"verified":%s,"maxrss_kib":[%s]}\n' \
		"$r" "$k" "$class" "$suite" "$np" "${t:-0}" "${m:-0}" "$v" "$rss" | tee -a "$results" >&2
}

# dpvm SUITE NP ROUND K: run `dpvm npb` beside SUITE's run and print its line.
dpvm() {
	local suite=$1 np=$2 r=$3 k=$4 log
	log=$out/logs/dpvm-$suite-$k-np$np-r$r
	mkdir -p "$out/logs"
	timeout "$per_run_timeout" /usr/bin/time -f %M -o "$log.rss" \
		"$dpvm_bin" npb "$k" --class "$class" --np "$np" --json >"$log.out" 2>"$log.err" || true
	local t m v rss
	t=$(sed -n 's/.*"time_s":\([0-9.eE+-]*\).*/\1/p' "$log.out" | head -1)
	m=$(sed -n 's/.*"mops":\([0-9.eE+-]*\).*/\1/p' "$log.out" | head -1)
	v=false
	grep -q '"verified":"SUCCESSFUL"' "$log.out" && v=true
	rss=$(grep -E '^[0-9]+$' "$log.rss" 2>/dev/null | paste -sd, -)
	[ "$v" = true ] || { failed=1; echo "npb-official: dpvm $k np $np ($suite) round $r did not verify; see $log.out and $log.err" >&2; }
	printf '{"round":%d,"kernel":"%s","class":"%s","system":"dpvm","suite":"%s","np":%d,"time_s":%s,"mops":%s,"verified":%s,"maxrss_kib":[%s]}\n' \
		"$r" "$k" "$class" "$suite" "$np" "${t:-0}" "${m:-0}" "$v" "$rss" | tee -a "$results" >&2
}

# pair SUITE NP ROUND K: the official run and dpvm's, in the round's order.
pair() {
	if [ $(($3 % 2)) = 1 ]; then
		official "$@"
		dpvm "$@"
	else
		dpvm "$@"
		official "$@"
	fi
}

for r in $(seq 1 "$rounds"); do
	for k in "${klist[@]}"; do
		pair serial 1 "$r" "$k"
		pair mpi 2 "$r" "$k"
		for n in "${tlist[@]}"; do
			pair omp "$n" "$r" "$k"
		done
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
exit "$failed"
