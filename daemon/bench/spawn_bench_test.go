package bench

import (
	"context"
	"testing"

	"github.com/dpvm/dpvm/daemon"
)

// BenchmarkSpawnLocal spawns SpawnTasks tasks on one daemon and hears
// from each, as `dpvm bench pingpong --local` times it; its CPU profile
// shows what a task's start and end cost (a machine step that grows a
// task's small stack shows as runtime.newstack).
func BenchmarkSpawnLocal(b *testing.B) {
	ctx := context.Background()
	p, err := startPair(ctx, ModeLocal, daemon.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := p.Spawn(ctx, SpawnTasks); err != nil {
			b.Fatal(err)
		}
	}
}
