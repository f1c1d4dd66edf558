package npb

import "testing"

// TestSerialS runs every kernel's serial reference form on class S and
// checks it against the official verification values.
func TestSerialS(t *testing.T) {
	for _, k := range Kernels {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			r, err := RunSerial(k, "S", nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != Successful {
				t.Fatalf("%s class S: %s, values %+v", k, r.Verified, r.Values)
			}
		})
	}
}
