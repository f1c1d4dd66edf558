package route

import (
	"errors"
	"slices"
	"testing"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

func TestAsksRoundTrip(t *testing.T) {
	want := []task.TID{task.NewTID(1, 1), task.NewTID(4096, 1<<31), task.NewTID(7, 0)}
	var b []byte
	for _, tid := range want {
		b = AppendAsk(b, tid)
	}
	if len(b) != len(want)*AskSize {
		t.Fatalf("%d bytes for %d queries", len(b), len(want))
	}
	var got []task.TID
	if err := DecodeAsks(b, func(tid task.TID) { got = append(got, tid) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	called := false
	err := DecodeAsks(b[:len(b)-1], func(task.TID) { called = true })
	if !errors.Is(err, routing.ErrMalformed) || called {
		t.Fatalf("a truncated batch: %v (fn called %v), want ErrMalformed before any query", err, called)
	}
}

// FuzzDecodeAsks: any body decodes or is refused, and what decodes
// encodes back to the same bytes.
func FuzzDecodeAsks(f *testing.F) {
	f.Add(AppendAsk(nil, task.NewTID(3, 9)))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out []byte
		err := DecodeAsks(b, func(tid task.TID) { out = AppendAsk(out, tid) })
		if err != nil {
			if !errors.Is(err, routing.ErrMalformed) || len(out) != 0 {
				t.Fatalf("%v after %d bytes decoded", err, len(out))
			}
			return
		}
		if !slices.Equal(out, b) && len(b) != 0 {
			t.Fatalf("re-encoded %x, want %x", out, b)
		}
	})
}
