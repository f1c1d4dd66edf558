package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/sched/sim"
)

// Table2 is DynamicPVM's Table 2 (1995): the seconds a direct and an
// indirect (NFS) migration took on Sun SPARCs, by data size in MB.
var Table2 = map[float64][2]float64{
	0: {0.1, 0.3}, 0.5: {0.6, 1.0}, 1: {1.1, 1.6}, 2: {2.1, 2.9},
	4: {4.1, 5.8}, 8: {7.9, 12.5}, 12: {11.9, 19.8}, 16: {15.9, 29.0},
}

// criuSeconds are the feature's figures for CRIU's same-host dump and
// restore of the same amount of memory, by size in MiB: used for sizes the
// run was given no measured CRIU figure for (integration/criu/run.sh
// measures them; `dpvm bench migrate --criu FILE` reads them).
var criuSeconds = map[float64]float64{16: 0.13, 256: 0.4, 1024: 2.8}

// Target thresholds.
const (
	minVsBaseline = 0.8 // a move's throughput over its baseline's
	maxEmptyMS    = 5.0 // the freeze of a task with empty state
	throughputMiB = 16  // sizes from which the throughput targets apply
)

// MigrateTargets lists the targets that apply to r: each mode's
// throughput at least 0.8× its baseline's from 16 MiB up (at the largest
// size if none is that large), the freeze of a task with empty state under
// 5 ms, and, from 256 MiB up, indirect faster than CRIU's same-host
// dump+restore of the same size (measured, r.CRIU, where given, else the
// feature's figure) and direct faster than CRIU's move between hosts (dump,
// ssh copy of the images, restore), where r.CRIU has that measured.
func MigrateTargets(r *MigrateReport) []MigrateTarget {
	var ts []MigrateTarget
	sizes := r.Sizes()
	var big []float64
	for _, s := range sizes {
		if s >= throughputMiB {
			big = append(big, s)
		}
	}
	if len(big) == 0 && len(sizes) > 0 && slices.Max(sizes) > 0 {
		big = []float64{slices.Max(sizes)}
	}
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		for _, s := range big {
			row, ok := r.Row(s, via)
			if !ok || row.Baseline == "" {
				continue
			}
			name := "raw quic-go"
			if row.Baseline == BaselineFile {
				name = "write+fsync+read"
			}
			ts = append(ts, MigrateTarget{
				What: fmt.Sprintf("%s %s throughput / %s", via, formatMiB(s), name),
				Want: fmt.Sprintf("≥ %.2f×", minVsBaseline),
				Got:  fmt.Sprintf("%.2f×", row.VsBaseline),
				Met:  row.VsBaseline >= minVsBaseline,
			})
		}
	}
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		if row, ok := r.Row(0, via); ok {
			ts = append(ts, MigrateTarget{
				What: fmt.Sprintf("%s freeze, empty state", via),
				Want: fmt.Sprintf("< %g ms", maxEmptyMS),
				Got:  fmt.Sprintf("%.2f ms", row.FreezeMS),
				Met:  row.FreezeMS < maxEmptyMS,
			})
		}
	}
	for _, s := range sizes {
		row, found := r.Row(s, daemon.Indirect)
		if !found || s < 256 {
			continue
		}
		c, ok := criuSeconds[s]
		src := "feature's figure"
		if m, measured := r.CRIUAt(s); measured {
			c, ok, src = m.Seconds, true, m.source()
		}
		if ok {
			ts = append(ts, MigrateTarget{
				What: fmt.Sprintf("indirect %s / CRIU dump+restore (%s)", formatMiB(s), src),
				Want: fmt.Sprintf("< %.3g s", c),
				Got:  fmt.Sprintf("%.3f s", row.Seconds),
				Met:  row.Seconds < c,
			})
		}
	}
	for _, s := range sizes {
		row, found := r.Row(s, daemon.Direct)
		m, measured := r.CRIUAt(s)
		if !found || s < 256 || !measured || !m.Remote() {
			continue
		}
		ts = append(ts, MigrateTarget{
			What: fmt.Sprintf("direct %s / CRIU between hosts: dump+ssh copy+restore (%s)", formatMiB(s), m.source()),
			Want: fmt.Sprintf("< %.3g s", m.RemoteS),
			Got:  fmt.Sprintf("%.3f s", row.Seconds),
			Met:  row.Seconds < m.RemoteS,
		})
	}
	return ts
}

func formatMiB(s float64) string { return strconv.FormatFloat(s, 'g', -1, 64) + " MiB" }

func fmtOr(ok bool, format string, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// WriteMigrateText prints r: the Table 2 of today beside DynamicPVM's,
// each mode against its baseline, and the targets.
func WriteMigrateText(w io.Writer, r *MigrateReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "migration of a task holding a []float64 between two daemons (QUIC over loopback; shared directory %s)\n", r.Dir)
	fmt.Fprintf(&b, "medians of %d timed rounds after %d untimed; moves and baselines alternate; state verified after the moves\n", r.Reps, r.Warmup)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "state\tdirect s\tindirect s\tindirect/direct\tfreeze direct\tfreeze indirect\t1995 direct s\t1995 indirect s\t")
	for _, s := range r.Sizes() {
		d, dok := r.Row(s, daemon.Direct)
		i, iok := r.Row(s, daemon.Indirect)
		p, pok := Table2[s]
		ratio := 0.0
		if dok && iok && d.Seconds > 0 {
			ratio = i.Seconds / d.Seconds
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", formatMiB(s),
			fmtOr(dok, "%.4f", d.Seconds), fmtOr(iok, "%.4f", i.Seconds), fmtOr(dok && iok, "%.2f×", ratio),
			fmtOr(dok, "%.2f ms", d.FreezeMS), fmtOr(iok, "%.2f ms", i.FreezeMS),
			fmtOr(pok, "%.1f", p[0]), fmtOr(pok, "%.1f", p[1]))
	}
	tw.Flush()
	if len(r.Baselines) > 0 {
		b.WriteString("against the baselines (the same bytes as the checkpoint, in the same run):\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "state\tcheckpoint\tdirect\traw quic-go\tdirect/quic\tindirect\twrite+fsync+read\tindirect/file\t")
		for _, s := range r.Sizes() {
			d, dok := r.Row(s, daemon.Direct)
			i, iok := r.Row(s, daemon.Indirect)
			q, qok := r.Baseline(s, BaselineQUIC)
			f, fok := r.Baseline(s, BaselineFile)
			ck := d.CheckpointBytes
			if !dok {
				ck = i.CheckpointBytes
			}
			fmt.Fprintf(tw, "%s\t%d B\t%s\t%s\t%s\t%s\t%s\t%s\t\n", formatMiB(s), ck,
				bwOr(dok, d.MBps), bwOr(qok, q.MBps), fmtOr(dok && qok, "%.2f×", d.VsBaseline),
				bwOr(iok, i.MBps), bwOr(fok, f.MBps), fmtOr(iok && fok, "%.2f×", i.VsBaseline))
		}
		tw.Flush()
	}
	if len(r.CRIU) > 0 {
		b.WriteString("CRIU's same-host dump+restore of a process holding the same state (integration/criu/run.sh):\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "state\tcriu dump s\tcriu restore s\tcriu total s\timages\tindirect s\tindirect/criu\t")
		for _, c := range r.CRIU {
			i, iok := r.Row(c.SizeMiB, daemon.Indirect)
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%d B\t%s\t%s\t\n", formatMiB(c.SizeMiB), c.DumpS, c.RestoreS, c.Seconds,
				c.ImageBytes, fmtOr(iok, "%.3f", i.Seconds), fmtOr(iok && c.Seconds > 0, "%.2f×", i.Seconds/c.Seconds))
		}
		tw.Flush()
	}
	if r.criuRemote() {
		fmt.Fprintf(&b, "CRIU between hosts: dump, encrypted copy of the images to the other host (%s), restore there:\n", criuCopies(r.CRIU))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "state\tdump s\tcopy s\tcopy\trestore s\ttotal s\tdirect s\tdirect/criu\t")
		for _, c := range r.CRIU {
			if !c.Remote() {
				continue
			}
			d, dok := r.Row(c.SizeMiB, daemon.Direct)
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%s\t%s\t\n", formatMiB(c.SizeMiB), c.RemoteDumpS, c.CopyS,
				formatBW(float64(c.ImageBytes)/c.CopyS/1e6), c.RemoteRestoreS, c.RemoteS,
				fmtOr(dok, "%.3f", d.Seconds), fmtOr(dok, "%.2f×", d.Seconds/c.RemoteS))
		}
		tw.Flush()
	}
	if len(r.Targets) > 0 {
		b.WriteString("targets:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, t := range r.Targets {
			mark := "missed"
			if t.Met {
				mark = "met"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.What, t.Want, t.Got, mark)
		}
		tw.Flush()
	}
	fmt.Fprintf(&b, "run took %.1f s\n", r.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}

func bwOr(ok bool, mbps float64) string {
	if !ok {
		return "-"
	}
	return formatBW(mbps)
}

// migrateCSVHeader is the header row of WriteMigrateCSV.
var migrateCSVHeader = []string{"size_mib", "via", "seconds", "freeze_ms", "checkpoint_bytes", "mbps", "reps", "verified",
	"baseline", "baseline_seconds", "baseline_mbps", "vs_baseline"}

// CSV "via" of CRIU's rows.
const (
	csvCRIU       = "criu"        // same-host dump+restore
	csvCRIURemote = "criu-remote" // between hosts: dump, ssh copy, restore
)

// criuCopies names how the images went to the other host and under which
// cipher, e.g. "scp, chacha20-poly1305@openssh.com", once per distinct
// pair.
func criuCopies(rows []CRIURow) string {
	var seen []string
	for _, c := range rows {
		if !c.Remote() {
			continue
		}
		k := c.CopyVia
		if c.Cipher != "" {
			k += ", " + c.Cipher
		}
		if !slices.Contains(seen, k) {
			seen = append(seen, k)
		}
	}
	return strings.Join(seen, "; ")
}

// WriteMigrateCSV prints r as CSV: a header, then a row per size and mode
// with its baseline's figures beside it (empty when not measured), then,
// with measured CRIU figures, a row per size for CRIU's same-host
// dump+restore (via "criu") and one for its move between hosts (via
// "criu-remote": dump, ssh copy, restore), with the image bytes as the
// checkpoint and no freeze or baseline.
func WriteMigrateCSV(w io.Writer, r *MigrateReport) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(migrateCSVHeader); err != nil {
		return err
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, x := range r.Results {
		rec := []string{strconv.FormatFloat(x.SizeMiB, 'g', -1, 64), x.Via, g(x.Seconds), g(x.FreezeMS),
			strconv.FormatInt(x.CheckpointBytes, 10), g(x.MBps), strconv.Itoa(x.Reps), strconv.FormatBool(x.Verified),
			x.Baseline, "", "", ""}
		if bl, ok := r.Baseline(x.SizeMiB, x.Baseline); ok {
			rec[9], rec[10], rec[11] = g(bl.Seconds), g(bl.MBps), g(x.VsBaseline)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	for _, c := range r.CRIU {
		add := func(via string, secs float64) error {
			return cw.Write([]string{strconv.FormatFloat(c.SizeMiB, 'g', -1, 64), via, g(secs), "",
				strconv.FormatInt(c.ImageBytes, 10), g(float64(c.ImageBytes) / secs / 1e6), strconv.Itoa(c.Reps), "true",
				"", "", "", ""})
		}
		if err := add(csvCRIU, c.Seconds); err != nil {
			return err
		}
		if c.Remote() {
			if err := add(csvCRIURemote, c.RemoteS); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// MigrateChart is r drawn as DynamicPVM's Figure 1: the median seconds of
// each mode against the state size, with the baselines as further lines,
// and CRIU's same-host dump+restore and its move between hosts where r has
// them.
func MigrateChart(r *MigrateReport) sim.Chart {
	c := sim.Chart{
		Title:  "Migration time against state size (dpvm bench migrate)",
		XLabel: "state (MiB)",
		YLabel: "seconds (median)",
	}
	names := map[string]string{
		string(daemon.Direct):   "direct (QUIC stream)",
		string(daemon.Indirect): "indirect (shared dir)",
		BaselineQUIC:            "raw quic-go",
		BaselineFile:            "write+fsync+read",
		csvCRIU:                 "CRIU same host",
		csvCRIURemote:           "CRIU between hosts",
	}
	add := func(key string, x, y []float64) {
		if len(x) > 0 {
			c.Series = append(c.Series, sim.Series{Name: names[key], X: x, Y: y})
		}
	}
	for _, via := range []daemon.Via{daemon.Direct, daemon.Indirect} {
		var x, y []float64
		for _, row := range r.Results {
			if row.Via == string(via) {
				x, y = append(x, row.SizeMiB), append(y, row.Seconds)
			}
		}
		add(string(via), x, y)
	}
	for _, kind := range []string{BaselineQUIC, BaselineFile} {
		var x, y []float64
		for _, bl := range r.Baselines {
			if bl.Kind == kind {
				x, y = append(x, bl.SizeMiB), append(y, bl.Seconds)
			}
		}
		add(kind, x, y)
	}
	var x, y, rx, ry []float64
	for _, m := range r.CRIU {
		x, y = append(x, m.SizeMiB), append(y, m.Seconds)
		if m.Remote() {
			rx, ry = append(rx, m.SizeMiB), append(ry, m.RemoteS)
		}
	}
	add(csvCRIU, x, y)
	add(csvCRIURemote, rx, ry)
	return c
}

// WriteMigrateSVG draws MigrateChart(r) as an SVG document.
func WriteMigrateSVG(w io.Writer, r *MigrateReport) error {
	if err := sim.WriteSVG(w, MigrateChart(r)); err != nil {
		return fmt.Errorf("bench migrate: plot: %w", err)
	}
	return nil
}
