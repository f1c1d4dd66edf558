package examples_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/examples/pvm"
)

// The ports of PVM 3.4's examples (examples/pvm) against what the
// originals printed under PVM 3.4.6 (examples/pvm/testdata).

// pvmGolden reads a golden file of examples/pvm.
func pvmGolden(t *testing.T, c pvm.Capture) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "pvm", "testdata", c.Golden))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPVMPortsPrintWhatPVMPrints runs each port on an embedded virtual
// machine of one host, as the originals ran on one, and compares its
// normalised output with the original's.
func TestPVMPortsPrintWhatPVMPrints(t *testing.T) {
	for _, c := range pvm.Captures {
		t.Run(c.Golden, func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := daemon.Run(ctx, buildRoot(t, c.Program, c.Args...), daemon.RunOptions{Output: &out}); err != nil {
				t.Fatalf("%s %v: %v\noutput:\n%s", c.Program, c.Args, err, out.String())
			}
			if got, want := pvm.Normalise(out.String(), false), pvmGolden(t, c); got != want {
				t.Errorf("%s %v printed (normalised):\n%s\nPVM printed:\n%s", c.Program, c.Args, got, want)
			}
		})
	}
}

// TestPVMPortsUnderMigration runs the ports on three hosts while
// daemon.Shuffle keeps moving their tasks (the root excepted) at random
// moments, by both modes: the output still matches PVM's. master1 is left
// out: it spawns three slaves per host, so on three hosts it prints nine
// results where the capture, made on one host, has three.
func TestPVMPortsUnderMigration(t *testing.T) {
	for i, c := range pvm.Captures {
		if c.Program == "pvm.master1" {
			continue
		}
		t.Run(c.Golden, func(t *testing.T) {
			out, made := runMoving(t, uint64(i), c.Program, c.Args...)
			if got, want := pvm.Normalise(out, false), pvmGolden(t, c); got != want {
				t.Errorf("%s %v under migration printed (normalised):\n%s\nPVM printed:\n%s", c.Program, c.Args, got, want)
			}
			t.Logf("%s: %d moves", c.Program, made)
		})
	}
}
