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
	r, err := SEDExperiment(ctx, SEDOptions{Samples: 400_000_000, After: 500 * time.Millisecond, Period: 100 * time.Millisecond})
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
