package peers

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpvm/dpvm/sched/sim"
)

// ReadFile reads the result lines of one file (results.jsonl).
func ReadFile(name string) ([]Line, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	defer f.Close()
	ls, err := ParseLines(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ls, nil
}

// WriteSideBySide prints the summaries as one Markdown table with dpvm
// beside each peer of its mode and, after every peer, dpvm's advantage
// over it (peer ÷ dpvm for times, dpvm ÷ peer for bandwidth and rate:
// above 1, dpvm is better). The first block of rows is the same host
// (dpvm-local against PVM and Open MPI's shared memory), the second
// between daemons (dpvm-remote against raw quic-go, Open MPI over TCP and
// raw TCP). Cells are medians with the range over the rounds in
// parentheses. A block without dpvm, or without peers, is left out.
func WriteSideBySide(w io.Writer, sums []Summary) error {
	type block struct {
		title string
		dpvm  *Summary
		peers []Summary
	}
	blocks := []*block{{title: "same host"}, {title: "between daemons"}}
	for i := range sums {
		s := sums[i]
		b := blocks[0]
		if s.Mode == ModeRemote {
			b = blocks[1]
		}
		if strings.HasPrefix(s.System, "dpvm-") {
			b.dpvm = &sums[i]
		} else {
			b.peers = append(b.peers, s)
		}
	}
	var use []*block
	width := 0
	for _, b := range blocks {
		if b.dpvm != nil && len(b.peers) > 0 {
			use = append(use, b)
			width = max(width, len(b.peers))
		}
	}
	if len(use) == 0 {
		return fmt.Errorf("peers: no dpvm results beside a peer of the same mode")
	}
	var sb strings.Builder
	row := func(cells []string) {
		for len(cells) < 2+2*width {
			cells = append(cells, "")
		}
		sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	for bi, b := range use {
		head := []string{b.title, fmt.Sprintf("%s (%d)", b.dpvm.System, b.dpvm.Rounds)}
		for _, p := range b.peers {
			head = append(head, fmt.Sprintf("%s (%d)", p.System, p.Rounds), "×")
		}
		if bi == 0 {
			row(head)
			sep := make([]string, 2+2*width)
			for i := range sep {
				sep[i] = "---"
			}
			row(sep)
		} else {
			for i := range head {
				if head[i] != "" && head[i] != "×" {
					head[i] = "**" + head[i] + "**"
				} else if head[i] == "×" {
					head[i] = "**×**"
				}
			}
			row(head)
		}
		for _, m := range Metrics {
			d, okd := b.dpvm.Stats[m.Key]
			cells := []string{m.Label, cell(d, okd)}
			has := okd
			for _, p := range b.peers {
				ps, okp := p.Stats[m.Key]
				has = has || okp
				r := "–"
				if okd && okp && d.Median > 0 && ps.Median > 0 {
					r = FormatValue(Ratio(m, d, ps)) + "×"
				}
				cells = append(cells, cell(ps, okp), r)
			}
			if has {
				row(cells)
			}
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// plotOrder is the order of the lines in the plots: dpvm first.
var plotOrder = []string{"dpvm-local", "dpvm-remote", "pvm-daemon", "pvm-direct", "mpi-shm", "mpi-tcp", SystemQUIC, "raw-tcp"}

// Charts returns the latency and bandwidth charts of the summaries: the
// median one-way latency (log scale) and the bandwidth it implies against
// the message size, one line per system that measured at least two sizes.
// The x axis is log₂ of the size in bytes, since the chart writer's x
// axis is linear.
func Charts(sums []Summary, title string) (latency, bandwidth sim.Chart) {
	xlabel := "message size, log₂ bytes (3 = 8 B, 10 = 1 KiB, 16 = 64 KiB, 20 = 1 MiB)"
	latency = sim.Chart{Title: "One-way latency: " + title, XLabel: xlabel, YLabel: "one-way latency (µs, log scale)", LogY: true, Width: 820}
	bandwidth = sim.Chart{Title: "Bandwidth: " + title, XLabel: xlabel, YLabel: "bandwidth (MB/s, log scale)", LogY: true, Width: 820}
	by := map[string]Summary{}
	for _, s := range sums {
		by[s.System] = s
	}
	var names []string
	for _, n := range plotOrder {
		if _, ok := by[n]; ok {
			names = append(names, n)
		}
	}
	for _, s := range sums {
		if !contains(plotOrder, s.System) {
			names = append(names, s.System)
		}
	}
	for _, n := range names {
		s := by[n]
		var lat, bw sim.Series
		lat.Name, bw.Name = n, n
		for _, size := range []int{8, 1 << 10, 64 << 10, 1 << 20} {
			st, ok := s.Stats[onewayKey(size)]
			if !ok || st.Median <= 0 {
				continue
			}
			x := math.Log2(float64(size))
			lat.X, lat.Y = append(lat.X, x), append(lat.Y, st.Median)
			bw.X, bw.Y = append(bw.X, x), append(bw.Y, float64(size)/st.Median)
		}
		if len(lat.X) >= 2 {
			latency.Series = append(latency.Series, lat)
			bandwidth.Series = append(bandwidth.Series, bw)
		}
	}
	return latency, bandwidth
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// onewayKey is the Metric key of the one-way latency of size.
func onewayKey(size int) string {
	switch size {
	case 8:
		return "oneway_8"
	case 1 << 10:
		return "oneway_1k"
	case 64 << 10:
		return "oneway_64k"
	}
	return "oneway_1m"
}

// BandwidthPath is the file the bandwidth chart goes to when the latency
// chart goes to path: "-bandwidth" before the extension.
func BandwidthPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-bandwidth" + ext
}

// WritePlots writes the latency chart to path and the bandwidth chart to
// BandwidthPath(path), as SVG.
func WritePlots(path string, sums []Summary, title string) error {
	lat, bw := Charts(sums, title)
	if len(lat.Series) == 0 {
		return fmt.Errorf("peers: plot: no system measured two message sizes or more")
	}
	for _, f := range []struct {
		path  string
		chart sim.Chart
	}{{path, lat}, {BandwidthPath(path), bw}} {
		var b strings.Builder
		if err := sim.WriteSVG(&b, f.chart); err != nil {
			return fmt.Errorf("peers: plot: %w", err)
		}
		if err := os.WriteFile(f.path, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("peers: plot: %w", err)
		}
	}
	return nil
}
