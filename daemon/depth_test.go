package daemon

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// nested is n one-element arrays around nil.
func nested(n int) []byte {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

func TestCheckDepth(t *testing.T) {
	ok := [][]byte{
		nested(maxMsgDepth),
		mustMarshal(t, &hello{Version: 1, HostList: []byte{1, 0}, Routes: []routing.Entry{{}}}),
		mustMarshal(t, map[string]any{"a": []any{1, "x", []byte("yz"), map[string]any{"b": 2.5}}, "c": nil}),
	}
	for i, b := range ok {
		var v any
		if err := decodeMsg(b, &v); err != nil {
			t.Errorf("%d: %v", i, err)
		}
	}
	bad := [][]byte{
		nested(maxMsgDepth + 1),
		nested(1 << 20),
		append(bytes.Repeat([]byte{0x81, 0xa1, 'k'}, maxMsgDepth+1), 0xc0),  // maps
		append(bytes.Repeat([]byte{0xdd, 0, 0, 0, 1}, maxMsgDepth+1), 0xc0), // array32
		{0xdc, 0xff, 0xff},                         // 65535 items in no bytes
		{0xdd, 0xdd, 0x70, 0xe8, 0x5a, 0x40, 0xb0}, // billions of items
		append([]byte{0x93, 0xc4, 3, 1, 2, 3, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, nested(maxMsgDepth)...), // deep after skipped items
		{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, // a string, truncated
		nil,
	}
	for i, b := range bad {
		var v any
		if err := decodeMsg(b, &v); !errors.Is(err, routing.ErrMalformed) {
			t.Errorf("%d: %v, want ErrMalformed", i, err)
		}
	}
	var c call
	if err := decodeMsg(nested(1<<20), &c); !errors.Is(err, routing.ErrMalformed) {
		t.Fatalf("a million nested arrays decoded: %v", err)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// panicCtx is a context whose Done panics: a handler that waits on it
// panics.
type panicCtx struct{ context.Context }

func (panicCtx) Done() <-chan struct{} { panic("injected: a handler's bug") }

// TestHandlerPanic: a panic in a control handler fails that call with
// ErrInternal, and the daemon serves the next.
func TestHandlerPanic(t *testing.T) {
	d := New(Config{})
	defer d.Halt(context.Background())
	block := make(chan struct{})
	defer close(block)
	tid, err := d.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
		<-block
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	body, err := encodeMsg(tidArgs{TID: tid})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.safeHandle(panicCtx{context.Background()}, nil, mWait, body); !errors.Is(err, ErrInternal) {
		t.Fatalf("a panicking handler: %v, want ErrInternal", err)
	}
	res, err := d.safeHandle(context.Background(), nil, mPS, mustMarshal(t, psArgs{}))
	if err != nil || len(res.(psReply).Tasks) != 1 {
		t.Fatalf("the daemon after a handler's panic: %v %v", res, err)
	}
}
