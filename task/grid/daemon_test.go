package grid_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
	"github.com/dpvm/dpvm/task/grid"
)

// haloProbe checks a block's halo exchanges and gather: the interior
// point at (y, x) of the array holds value(y, x, round); after each
// exchange every ghost point inside the array holds its owner's value and
// those on the array's edge the value FillBoundary gave them.
type haloProbe struct {
	Tasks, N0, N1, Rounds int
	C                     task.Comm
	B                     grid.Block
	Round                 int
}

func init() { task.Register("grid.test.halo", &haloProbe{}) }

func value(y, x, round int) float64 { return float64(y*1000 + x + round*1000000) }

// edgeValues are the values FillBoundary gives each side.
var edgeValues = [4]float64{-1, -2, -3, -4}

func (p *haloProbe) Run(c *task.Ctx) error {
	if err := c.World(&p.C, p.Tasks); err != nil {
		return err
	}
	if err := p.B.Create(c, &p.C, p.N0, p.N1); err != nil {
		return err
	}
	b := &p.B
	for s, v := range edgeValues {
		b.FillBoundary(grid.Side(s), v)
	}
	w := b.Stride()
	for p.Round < p.Rounds {
		for y := range b.Rows {
			for x := range b.Cols {
				b.Data[(y+1)*w+x+1] = value(b.Y0+y, b.X0+x, p.Round)
			}
		}
		if err := b.StartHalo(c); err != nil {
			return err
		}
		if err := b.FinishHalo(c); err != nil {
			return err
		}
		for y := -1; y <= b.Rows; y++ {
			for x := -1; x <= b.Cols; x++ {
				gy, gx := b.Y0+y, b.X0+x
				inY, inX := y >= 0 && y < b.Rows, x >= 0 && x < b.Cols
				if inY == inX {
					continue // the interior, or a corner of the ring
				}
				want := value(gy, gx, p.Round)
				switch {
				case gy < 0:
					want = edgeValues[grid.Top]
				case gy >= b.N0:
					want = edgeValues[grid.Bottom]
				case gx < 0:
					want = edgeValues[grid.Left]
				case gx >= b.N1:
					want = edgeValues[grid.Right]
				}
				if got := b.Data[(y+1)*w+x+1]; got != want {
					return fmt.Errorf("rank %d round %d: ghost point (%d, %d) of the array holds %g, want %g", b.G.Rank, p.Round, gy, gx, got, want)
				}
			}
		}
		p.Round++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	all, err := b.Gather(c, 0)
	if err != nil || b.G.Rank != 0 {
		return err
	}
	for i, v := range all {
		if y, x := i/b.N1, i%b.N1; v != value(y, x, p.Rounds-1) {
			return fmt.Errorf("gathered (%d, %d) = %g, want %g", y, x, v, value(y, x, p.Rounds-1))
		}
	}
	c.Printf("%dx%d in %dx%d blocks: ok", b.N0, b.N1, b.G.Dims[0], b.G.Dims[1])
	return nil
}

// TestBlockHaloThroughDaemons runs the probe on 1 to 6 tasks placed on
// three daemons, on the largest grid with a job checkpoint asked for
// every 2 ms besides, and checks every exchange and the gather.
func TestBlockHaloThroughDaemons(t *testing.T) {
	for _, c := range []struct {
		tasks, n0, n1 int
		want          string
		every         time.Duration
	}{
		{1, 3, 4, "3x4 in 1x1 blocks: ok", 0},
		{2, 5, 3, "5x3 in 2x1 blocks: ok", 0},
		{4, 4, 4, "4x4 in 2x2 blocks: ok", 0},
		{6, 7, 5, "7x5 in 3x2 blocks: ok", 0},
		{6, 9, 8, "9x8 in 3x2 blocks: ok", 2 * time.Millisecond},
	} {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := daemon.Run(ctx, &haloProbe{Tasks: c.tasks, N0: c.n0, N1: c.n1, Rounds: 40}, daemon.RunOptions{
			Hosts: 3, Output: &out, Job: daemon.JobOptions{CheckpointEvery: c.every}})
		cancel()
		if err != nil || strings.TrimSpace(out.String()) != c.want {
			t.Errorf("%+v: %v, output %q", c, err, out.String())
		}
	}
}

// TestBlockRefusesEmptyBlocks: more blocks along a dimension than the
// array has points fails every task, with a clear error.
func TestBlockRefusesEmptyBlocks(t *testing.T) {
	var out strings.Builder
	err := daemon.Run(context.Background(), &haloProbe{Tasks: 5, N0: 4, N1: 4, Rounds: 1}, daemon.RunOptions{Output: &out})
	if err == nil || !strings.Contains(err.Error(), "leaves blocks empty") {
		t.Errorf("5 blocks of a 4×4 array: %v", err)
	}
}
