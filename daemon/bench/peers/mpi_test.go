package peers

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMPIBenchCollectives builds the harness's Open MPI program and runs
// it on two ranks at the smallest scale: it checks every collective's
// result on both ranks (and exits non-zero on a wrong one), and its line
// has every collective of the table, each timed at least 10 times. It
// needs mpicc and mpirun (libopenmpi-dev and openmpi-bin, which CI
// installs).
func TestMPIBenchCollectives(t *testing.T) {
	mpicc, err := exec.LookPath("mpicc")
	if err != nil {
		t.Skip("no mpicc: install libopenmpi-dev")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun: install openmpi-bin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "mpi_bench")
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11",
		"-o", bin, filepath.Join("csrc", "mpi_bench.c")).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, mpirun, "-np", "2", bin, "-n", "mpi-shm", "-m", "local", "-s", "0.01")
	// Open MPI's: run as root in a container, more processes than cores.
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_rmaps_base_oversubscribe=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, stderr.String())
	}
	l, err := ParseLine([]byte(strings.TrimSpace(string(out))))
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if l.System != "mpi-shm" || l.CollNP != CollNP || len(l.Coll) != len(CollOps)*len(CollSizes) {
		t.Fatalf("line %+v", l)
	}
	for _, m := range Metrics {
		if strings.HasSuffix(m.Label, ", 2 tasks (µs)") {
			if _, ok := m.Value(l); !ok {
				t.Errorf("row %q has no value", m.Label)
			}
		}
	}
	for _, c := range l.Coll {
		if c.Reps < 10 || c.US <= 0 {
			t.Errorf("collective %+v: want at least 10 timed iterations", c)
		}
	}
}
