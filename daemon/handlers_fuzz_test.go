package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// controlMethods is every control method of the table, in the order the
// committed corpus of FuzzControlHandlers numbers them (a new method goes
// at the end: TestControlMethodsListed holds the list to the table).
var controlMethods = []string{
	mRun, mSpawn, mStart, mKill, mKillJob, mJoin, mLeave, mMembers, mBarrier, mLeaveAll,
	mNotify, mWatch, mPS, mWait, mSchedStatus, mInject, mInjectHere, mConf, mDelete, mHalt,
	mSendCheck, mCheckpoint,
	mMigrate, mMigInfo, mMigPrep, mMigSusp, mMigSend, mMigLoad, mMigDone, mMigBack, mMigDrop,
	mCkPause, mCkQuiet, mCkWrite, mCkResume, mCkKill, mCkLoad, mCkGo, mCkDrop, mCkFloor,
	mCancel,
	mSwimReport, mSwimCheckAck, mSwimCheck, mSwimGossip,
	mSiblings,
}

// TestControlMethodsListed: controlMethods and the table name the same
// methods, and an unknown one is refused.
func TestControlMethodsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, m := range controlMethods {
		listed[m] = true
		if methods[m] == nil {
			t.Errorf("method %q is not in the table", m)
		}
	}
	for _, m := range methodNames() {
		if !listed[m] {
			t.Errorf("method %q of the table is not in controlMethods", m)
		}
	}
	d := New(Config{Output: &syncBuffer{}})
	defer d.Halt(context.Background())
	if _, err := d.safeHandle(context.Background(), nil, "no.such.method", []byte{0x80}); err == nil {
		t.Fatal("an unknown method was served")
	}
}

// fuzzSeeds are well-formed bodies of the control messages, to start the
// fuzzer from inputs that reach deep into the handlers.
func fuzzSeeds() [][]byte {
	var out [][]byte
	for _, v := range []any{
		spawnArgs{Req: taskSpawnRequest()},
		tidArgs{TID: task.TID(1<<32 | 1)},
		groupArgs{Group: "g", TID: task.TID(1<<32 | 1)},
		notifyArgs{Kind: task.TaskExit, Watcher: task.TID(1<<32 | 1), TIDs: []task.TID{task.TID(1<<32 | 2)}},
		restoreArgs{Job: 1, Dir: "/nonexistent", Files: []string{"x"}, Want: []ckWant{{TID: "t1:1"}}},
		psArgs{Gather: true},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	return append(out, []byte{0x80}, []byte{0xc0}, nested(40))
}

// FuzzControlHandlers decodes arbitrary bytes as the body of each control
// method and runs its handler on a standalone daemon, as itself (every
// method allowed), as an admin and as a user: a handler returns a result
// or an error, and a panic (ErrInternal from safeHandle) fails the fuzz.
// Halt is decoded only: it would end the daemon the next inputs need.
func FuzzControlHandlers(f *testing.F) {
	for i := range controlMethods {
		for _, b := range fuzzSeeds() {
			f.Add(uint8(i), uint8(i%3), b)
		}
	}
	d := New(Config{Output: &syncBuffer{}, MaxSpawn: 4, MaxTasks: 32, MoveTimeout: 20 * time.Millisecond,
		SharedDir: f.TempDir()})
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Halt(ctx)
	})
	callers := []*peer{
		nil,
		{cert: pki.Peer{Role: pki.RoleAdmin, Name: "root"}, info: HostInfo{Name: "root"}},
		{cert: pki.Peer{Role: pki.RoleUser, Name: "alice"}, info: HostInfo{Name: "alice"}},
	}
	f.Fuzz(func(t *testing.T, m, who uint8, body []byte) {
		method := controlMethods[int(m)%len(controlMethods)]
		if method == mHalt {
			var a any
			_ = decodeMsg(body, &a)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := d.safeHandle(ctx, callers[int(who)%len(callers)], method, body)
		if errors.Is(err, ErrInternal) {
			t.Fatalf("%s on % x: %v", method, body, err)
		}
	})
}
