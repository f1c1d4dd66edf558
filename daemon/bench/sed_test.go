package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestSEDExperiment runs the Dynamic-SED experiment small: with the
// scheduler on, the task on the host where a user arrives is moved away,
// without it nothing moves, and the job's result is the same.
func TestSEDExperiment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// The user arrives as the job starts (the worker placed on h2 is slow
	// from its first sample), so the job outlasts the scheduler's
	// c²max·δT however fast the machine runs, and stays short under -race.
	r, err := SEDExperiment(ctx, SEDOptions{Samples: 150_000_000, After: time.Millisecond, Period: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Off.Migrations != 0 || r.On.Migrations < 1 || !r.Same {
		t.Fatalf("experiment: %+v", r)
	}
	var b bytes.Buffer
	if err := WriteSED(&b, r); err != nil || !strings.Contains(b.String(), "result the same") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
	t.Logf("\n%s", b.String())
}
