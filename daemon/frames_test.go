package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/task"
)

// rawClient opens a client-role connection to addr and completes the
// handshake, returning the stream to write raw frames on.
func rawClient(t *testing.T, ctx context.Context, addr string, id *pki.Credential) (transport.Conn, transport.Stream) {
	t.Helper()
	tr, err := transport.Dialer(transport.LocalFor(addr), id, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	conn, err := tr.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeHello(st, &hello{Name: "raw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := readHello(ctx, routing.NewReader(st, 0)); err != nil {
		t.Fatal(err)
	}
	return conn, st
}

// TestMalformedFramesCloseTheConnection sends an oversized frame, an
// unknown frame kind, malformed msgpack and a frame a client may not send:
// each closes that connection, and the daemon goes on serving others.
func TestMalformedFramesCloseTheConnection(t *testing.T) {
	vm := startVM(t, 1, Config{MaxFrame: 1 << 16})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := map[string][]byte{
		"oversized":         routing.AppendFrame(nil, routing.KindCall, make([]byte, 1<<16+1)),
		"unknown kind":      routing.AppendFrame(nil, routing.Kind(77), []byte{1}),
		"malformed msgpack": routing.AppendFrame(nil, routing.KindCall, []byte{0xc1, 0xff}),
		"forbidden kind":    routing.AppendFrame(nil, routing.KindEvent, []byte{0x80}),
		"second hello":      routing.AppendFrame(nil, routing.KindHello, []byte{0x80}),
		"truncated length":  {0xff, 0xff},
	}
	for name, frame := range cases {
		conn, st := rawClient(t, ctx, m.Addr(), vm.Cluster.Admin)
		// The write may fail part-way: the daemon hangs up as soon as it
		// has read enough to refuse the frame.
		_, _ = st.Write(frame)
		if name == "truncated length" {
			st.Close()
		}
		select {
		case <-conn.Done():
		case <-ctx.Done():
			t.Fatalf("%s: the connection stayed open", name)
		}
	}
	// A well-formed call still works on a new connection.
	cl := adminClient(t, ctx, vm)
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("the daemon stopped serving: %v", err)
	}
}

// FuzzControlDecode feeds arbitrary bytes to the decoders of every msgpack
// control message: they must return a value or an error, never panic.
func FuzzControlDecode(f *testing.F) {
	for _, v := range []any{
		&hello{Version: 1, Host: 2, Name: "h2", HostList: hostlist.AppendSnapshot(nil, 1, []hostlist.Entry{{ID: 1, Name: "h1"}})},
		&call{ID: 1, Method: mSpawn, Body: msgpack.RawMessage{0x80}},
		&reply{ID: 1, Err: "x", Code: "no-such-task"},
		&event{Kind: evHosts, Deltas: hostlist.AppendDeltas(nil, []hostlist.Delta{{Seq: 2, Op: hostlist.OpAdd, Entry: hostlist.Entry{ID: 3}}})},
		&spawnArgs{Req: taskSpawnRequest()},
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var (
			h  hello
			c  call
			r  reply
			e  event
			sa spawnArgs
			ga groupArgs
			na notifyArgs
			ps psReply
		)
		for _, v := range []any{&h, &c, &r, &e, &sa, &ga, &na, &ps} {
			_ = decodeMsg(b, v)
		}
		_ = replyError(&r)
	})
}

func taskSpawnRequest() task.SpawnRequest {
	return task.SpawnRequest{Type: "daemon.test.fn", State: []byte{0x80}, Count: 2, Host: "h1"}
}
