package npb

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

// TestKernelsVerifyUnderMigration runs every kernel on a virtual machine of
// three daemons while a seeded mover migrates their worker tasks among the
// hosts, directly and indirectly: the results must still verify.
func TestKernelsVerifyUnderMigration(t *testing.T) {
	for i, kernel := range kernelsUnderTest() {
		root, err := NewRoot(kernel, "S", 4)
		if err != nil {
			t.Fatal(err)
		}
		root.Lines = true
		sink := &lineSink{}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{Output: sink, SharedDir: t.TempDir(), MoveTimeout: 5 * time.Second, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		m := vm.Master()
		rootTID, err := m.SpawnTask(root)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		moves := make(chan int, 1)
		go func() { moves <- m.Shuffle(ctx, done, uint64(i), daemon.KeepTask(rootTID)) }()
		info, err := m.Wait(ctx, rootTID)
		if err != nil {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			ts, _ := m.AllTasks(sctx, false)
			scancel()
			for _, ti := range ts {
				t.Logf("%v %s on %s %v queued %d", ti.TID, ti.Type, ti.Host, ti.State, ti.Queued)
			}
		}
		close(done)
		made := <-moves
		vm.Halt(10 * time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := daemon.ExitError(info); err != nil {
			t.Fatalf("%s: %v", kernel, err)
		}
		if sink.report == nil || sink.report.Verified != Successful {
			t.Fatalf("%s under migration: report %+v", kernel, sink.report)
		}
		// Bit for bit the result of a run where nothing moves.
		still, err := Run(context.Background(), kernel, "S", 4, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		moved, _ := json.Marshal(sink.report.Values)
		unmoved, _ := json.Marshal(still.Values)
		if string(moved) != string(unmoved) {
			t.Fatalf("%s: values under migration %s differ from a run without moves %s", kernel, moved, unmoved)
		}
		// EP, FT and IS at class S can finish before the mover catches a
		// worker on a fast machine; CG and MG run long enough.
		if made == 0 && (kernel == "cg" || kernel == "mg") {
			t.Errorf("%s: no worker was moved while it ran", kernel)
		}
		t.Logf("%s class S np 4: %s with %d moves", kernel, sink.report.Verified, made)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("NPB_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func kernelsUnderTest() []string {
	if k := os.Getenv("NPB_KERNELS"); k != "" {
		return strings.Split(k, ",")
	}
	return []string{"cg", "mg", "ep", "ft", "is"}
}
