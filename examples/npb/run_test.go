package npb

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestRunS runs every kernel's class S through the task runtime at np = 1,
// 2 and 4 and checks the reports.
func TestRunS(t *testing.T) {
	for _, k := range Kernels {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", k, np), func(t *testing.T) {
				t.Parallel()
				var prog []Progress
				r, err := Run(context.Background(), k, "S", np, RunOptions{Progress: func(p Progress) { prog = append(prog, p) }})
				if err != nil {
					t.Fatal(err)
				}
				if r.Verified != Successful || r.Kernel != k || r.Class != "S" || r.NP != np || r.Hosts != 1 {
					t.Fatalf("report %+v", r)
				}
				if len(prog) == 0 || prog[len(prog)-1].Done != prog[len(prog)-1].Total {
					t.Fatalf("progress %v does not end complete", prog)
				}
			})
		}
	}
}

// TestRunW runs class W of every kernel on two tasks.
func TestRunW(t *testing.T) {
	for _, k := range Kernels {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			r, err := Run(context.Background(), k, "W", 2, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != Successful {
				t.Fatalf("%s class W np 2: %s, values %+v", k, r.Verified, r.Values)
			}
		})
	}
}

func TestRunBadParameters(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		kernel, class string
		np            int
		want          error
	}{
		{"xx", "S", 1, ErrUnknownKernel},
		{"ep", "Q", 1, ErrUnknownClass},
		{"ep", "S", 0, ErrBadNP},
		{"mg", "S", 3, ErrBadNP},
		{"mg", "S", 32, ErrBadNP},
		{"ft", "S", 6, ErrBadNP},
		{"is", "S", 5, ErrBadNP},
		{"cg", "S", 1401, ErrBadNP},
	}
	for _, c := range cases {
		if _, err := Run(ctx, c.kernel, c.class, c.np, RunOptions{}); !errors.Is(err, c.want) {
			t.Errorf("Run(%s, %s, %d) = %v, want %v", c.kernel, c.class, c.np, err, c.want)
		}
	}
}

// TestRunTwoHosts spreads class S over a two-host embedded machine, so the
// kernels' messages cross hosts.
func TestRunTwoHosts(t *testing.T) {
	for _, k := range Kernels {
		t.Run(k, func(t *testing.T) {
			r, err := Run(context.Background(), k, "S", 4, RunOptions{Hosts: 2})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != Successful || r.Hosts != 2 {
				t.Fatalf("%s class S np 4 on 2 hosts: %s, hosts %d, values %+v", k, r.Verified, r.Hosts, r.Values)
			}
		})
	}
}

// TestRunOddNP runs the kernels whose decomposition takes any np on three
// tasks.
func TestRunOddNP(t *testing.T) {
	for _, k := range []string{"ep", "cg"} {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			r, err := Run(context.Background(), k, "S", 3, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verified != Successful || r.NP != 3 {
				t.Fatalf("%s class S np 3: %+v", k, r)
			}
		})
	}
}
