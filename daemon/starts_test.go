package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestStartAskedAgainAfterItsAnswerIsLost: a host starts three tasks and
// its connection to the master is cut before its answer goes. The master
// asks again with the same start once the host is back, and the host
// answers with the three tasks it started: the spawn succeeds, and no
// task is started twice.
func TestStartAskedAgainAfterItsAnswerIsLost(t *testing.T) {
	var vm *LocalVM
	var cut atomic.Int32
	hook := func(point string) {
		if point != "start:served" || !cut.CompareAndSwap(0, 1) {
			return
		}
		h2 := vm.Daemons[1]
		h2.nw.mu.Lock()
		p := h2.nw.peers[MasterID]
		h2.nw.mu.Unlock()
		p.close(errors.New("the test cuts the connection as the start is answered"))
		<-p.closed
	}
	vm = startMemVM(t, 2, &faults{}, Config{FaultHook: hook})
	m, h2 := vm.Master(), vm.Daemons[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	typ, state, err := task.EncodeState(fn(t, func(c *task.Ctx, _ int) error {
		_, err := c.Recv(task.AnyTask, 99, nil)
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	tids, err := m.spawnAnywhere(ctx, 0, 0, task.SpawnRequest{Type: typ, State: state, Count: 3, Host: h2.cfg.Name})
	if cut.Load() != 1 {
		t.Fatal("the start's answer was not cut off")
	}
	if err != nil || len(tids) != 3 {
		t.Fatalf("spawn of 3 on h2 whose answer was lost: %v %v", tids, err)
	}
	if n := h2.ht.count(); n != 3 {
		t.Errorf("h2 runs %d tasks, want the 3 started once", n)
	}
	for _, tid := range tids {
		if h2.ht.task(tid) == nil {
			t.Errorf("%v, named in the answer, does not run on h2", tid)
		}
	}
}
