package cli

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/task"
)

// FuzzSpawnState feeds `dpvm spawn TYPE JSON` arbitrary JSON for task types
// with numbers, slices and TIDs in their state: it never panics, and what
// it accepts encodes a state that decodes into the type again.
func FuzzSpawnState(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"Workers":3,"Samples":1000}`, `{"Lo":1,"Hi":5,"Next":2,"Hits":0,"Joined":true}`,
		`{"Workers":-1}`, `{"Nope":1}`, `[1,2]`, `{"Workers":"3"}`, `{"Hits":1e400}`, ``, `{`, `null`,
	} {
		f.Add("examples.pi", s)
		f.Add("examples.pi.worker", s)
	}
	f.Fuzz(func(t *testing.T, typ, state string) {
		if typ != "examples.pi" && typ != "examples.pi.worker" {
			typ = "examples.pi"
		}
		name, b, err := spawnState(typ, []string{state})
		if err != nil {
			return
		}
		got, err := task.New(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(b, got); err != nil {
			t.Fatalf("accepted %q as a %s state that does not decode: %v", state, typ, err)
		}
	})
}
