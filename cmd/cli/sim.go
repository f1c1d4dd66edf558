package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/sched/sim"
)

// simCommand builds `dpvm sim`: the policy simulator, reproducing the load
// sharing, load index, WAL-FC and Dynamic-SED studies.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate scheduling policies (deterministic, seeded discrete-event simulation)",
		Subcommands: []*cli.Command{
			simLoadShareCommand(),
			simIndexCommand(),
			simWALCommand(),
			simSEDCommand(),
			simVMCommand(),
			simScaleCommand(),
		},
	}
}

func simLoadShareCommand() *cli.Command {
	d := sim.DefaultLoadShare()
	return &cli.Command{
		Name:      "loadshare",
		Usage:     "mean response time of load-sharing policies on N identical nodes (Dandamudi's model)",
		ArgsUsage: " ",
		Description: "Runs every combination of --policy, --sched, --util, --ca and --cs. Lists are\n" +
			"comma-separated; numbers may also be ranges start:stop:step. Defaults are\n" +
			"the paper's Appendix A: 32 nodes, mean service time 1, T=2, T_R=1, P_l=3,\n" +
			"T_probe=0.003, T_jx=0.02, transfer time U(0.009,0.011), Q=0.1, 1% context\n" +
			"switch, reinitiation period 1, 30 batches.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policy", Value: "nls,si,ri", Usage: "policies: nls, si, ri, ri-reinit, index"},
			&cli.StringFlag{Name: "sched", Value: "fcfs", Usage: "node scheduling: fcfs, rr (or both)"},
			&cli.IntFlag{Name: "nodes", Value: d.Nodes, Usage: "number of nodes"},
			&cli.StringFlag{Name: "util", Value: "0.1:0.9:0.1", Usage: "system utilizations λ/μ"},
			&cli.StringFlag{Name: "ca", Value: "1", Usage: "inter-arrival time coefficients of variation"},
			&cli.StringFlag{Name: "cs", Value: "1", Usage: "service time coefficients of variation"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "random seed"},
			&cli.IntFlag{Name: "batches", Value: d.Batches, Usage: "number of batches"},
			&cli.Float64Flag{Name: "batch-length", Value: d.BatchLength, Usage: "simulated time per batch"},
			&cli.Float64Flag{Name: "warmup", Value: d.Warmup, Usage: "simulated time discarded first"},
			&cli.IntFlag{Name: "threshold", Value: d.Threshold, Usage: "transfer threshold T (= T_S = T_M)"},
			&cli.IntFlag{Name: "receiver-threshold", Value: d.ReceiverThreshold, Usage: "receiver threshold T_R"},
			&cli.IntFlag{Name: "probe-limit", Value: d.ProbeLimit, Usage: "probe limit P_l"},
			&cli.Float64Flag{Name: "reinit", Value: d.Reinit, Usage: "reinitiation period δ of ri-reinit"},
			&cli.Float64Flag{Name: "quantum", Value: d.Quantum, Usage: "round-robin quantum Q"},
			&cli.Float64Flag{Name: "context-switch", Value: d.ContextSwitch, Usage: "round-robin context switch cost"},
			&cli.Float64Flag{Name: "probe-cost", Value: d.ProbeCost, Usage: "CPU cost of sending or receiving a probe"},
			&cli.Float64Flag{Name: "transfer-cost", Value: d.TransferCost, Usage: "CPU cost of sending or receiving a job"},
			&cli.IntFlag{Name: "parallel", Value: 0, Usage: "runs simulated at once (0: one per CPU)"},
			&cli.BoolFlag{Name: "json", Usage: "print {\"results\":[...]} as JSON"},
			&cli.BoolFlag{Name: "csv", Usage: "print CSV"},
			&cli.StringFlag{Name: "plot", Usage: "also write an SVG line chart to `FILE`"},
			&cli.StringFlag{Name: "title", Usage: "chart title"},
		},
		Action: simLoadShareAction,
	}
}

func simLoadShareAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("sim loadshare: unexpected argument %q", c.Args().First()), 2)
	}
	fail := func(err error) error { return simFail("sim loadshare", err) }
	var g sim.Grid
	for _, s := range splitList(c.String("policy")) {
		p, err := sim.ParsePolicy(s)
		if err != nil {
			return fail(err)
		}
		g.Policies = append(g.Policies, p)
	}
	for _, s := range splitList(c.String("sched")) {
		p, err := sim.ParseSched(s)
		if err != nil {
			return fail(err)
		}
		g.Scheds = append(g.Scheds, p)
	}
	if len(g.Policies) == 0 || len(g.Scheds) == 0 {
		return fail(fmt.Errorf("%w: no policy or scheduling discipline given", sim.ErrBadConfig))
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *[]float64
	}{{"util", &g.Utils}, {"ca", &g.CAs}, {"cs", &g.CSs}} {
		if *f.dst, err = sim.ParseValues(c.String(f.name)); err != nil {
			return fail(fmt.Errorf("--%s: %w", f.name, err))
		}
	}
	if c.Bool("json") && c.Bool("csv") {
		return cli.Exit("sim loadshare: --json and --csv exclude each other", 2)
	}
	base := sim.DefaultLoadShare()
	base.Nodes = c.Int("nodes")
	base.Seed = c.Uint64("seed")
	base.Batches = c.Int("batches")
	base.BatchLength = c.Float64("batch-length")
	base.Warmup = c.Float64("warmup")
	base.Threshold = c.Int("threshold")
	base.ReceiverThreshold = c.Int("receiver-threshold")
	base.ProbeLimit = c.Int("probe-limit")
	base.Reinit = c.Float64("reinit")
	base.Quantum = c.Float64("quantum")
	base.ContextSwitch = c.Float64("context-switch")
	base.ProbeCost = c.Float64("probe-cost")
	base.TransferCost = c.Float64("transfer-cost")
	cfgs := g.Configs(base)
	if len(cfgs) > 100000 {
		return fail(fmt.Errorf("%w: %d runs requested (at most 100000)", sim.ErrBadConfig, len(cfgs)))
	}
	rs, err := sim.Sweep(cfgs, c.Int("parallel"))
	if err != nil {
		return fail(err)
	}
	out := c.App.Writer
	if p := c.String("plot"); p != "" {
		title := c.String("title")
		if title == "" {
			title = fmt.Sprintf("Load sharing, %d nodes", base.Nodes)
		}
		ch, err := sim.ChartFor(g, rs, title)
		if err != nil {
			return fail(err)
		}
		if err := writeSVGFile(p, ch); err != nil {
			return fail(err)
		}
	}
	switch {
	case c.Bool("json"):
		for i := range rs {
			rs[i].Batches = nil
		}
		return writeJSON(out, map[string]any{"results": rs})
	case c.Bool("csv"):
		return sim.WriteCSV(out, rs)
	}
	if err := sim.WriteTable(out, rs); err != nil {
		return err
	}
	for _, s := range sim.Crossovers(rs) {
		fmt.Fprintln(out, s)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeSVGFile draws ch into the file at path.
func writeSVGFile(path string, ch sim.Chart) error {
	var b bytes.Buffer
	if err := sim.WriteSVG(&b, ch); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

func simIndexCommand() *cli.Command {
	d := sim.DefaultIndex()
	return &cli.Command{
		Name:      "index",
		Usage:     "load acceptance index on a heterogeneous cluster against an even static distribution (Bosque et al.)",
		ArgsUsage: " ",
		Description: "Runs Table 1's 10-node cluster (or --nodes name:power:cores,...) with --tasks\n" +
			"tasks submitted to --origin, balanced by the load index policy, and the same\n" +
			"tasks spread evenly with no balancing; prints tasks per node, both makespans\n" +
			"and the speedup. --seeds N repeats with seeds seed..seed+N-1 and reports the\n" +
			"mean speedup.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "nodes", Usage: "cluster as name:power:cores,... (default: the paper's Table 1)"},
			&cli.StringFlag{Name: "origin", Value: strings.Join(d.Origins, ","), Usage: "nodes the tasks are submitted to (split evenly)"},
			&cli.IntFlag{Name: "tasks", Value: d.Tasks, Usage: "number of tasks"},
			&cli.Float64Flag{Name: "task-mean", Value: d.TaskMean, Usage: "mean task work, in seconds on the most powerful core"},
			&cli.Float64Flag{Name: "task-spread", Value: d.TaskSpread, Usage: "task works are uniform in mean·[1-spread, 1+spread]"},
			&cli.Float64Flag{Name: "spacing", Value: d.Spacing, Usage: "seconds between two submissions at an origin"},
			&cli.Float64Flag{Name: "interval", Value: d.Interval, Usage: "load measurement interval in seconds"},
			&cli.Float64Flag{Name: "recipient", Value: d.Policy.RecipientThreshold, Usage: "recipient↔neutral threshold"},
			&cli.Float64Flag{Name: "emitter", Value: d.Policy.EmitterThreshold, Usage: "neutral↔emitter threshold"},
			&cli.IntFlag{Name: "candidates", Value: d.Policy.Candidates, Usage: "recipients asked per balancing operation"},
			&cli.Float64Flag{Name: "transfer-delay", Value: d.TransferDelay, Usage: "seconds a task takes to reach a remote node"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "random seed"},
			&cli.IntFlag{Name: "seeds", Value: 1, Usage: "repeat with this many consecutive seeds"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.StringFlag{Name: "plot", Usage: "write the load indexes of the balanced run over time as SVG to `FILE`"},
		},
		Action: simIndexAction,
	}
}

func parseNodes(s string) ([]sim.Node, error) {
	var out []sim.Node
	for _, f := range splitList(s) {
		p := strings.Split(f, ":")
		if len(p) != 3 {
			return nil, fmt.Errorf("%w: node %q is not name:power:cores", sim.ErrBadConfig, f)
		}
		var n sim.Node
		n.Name = p[0]
		if _, err := fmt.Sscanf(p[1]+" "+p[2], "%g %d", &n.Power, &n.Cores); err != nil {
			return nil, fmt.Errorf("%w: node %q: %v", sim.ErrBadConfig, f, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func simIndexAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("sim index: unexpected argument %q", c.Args().First()), 2)
	}
	fail := func(err error) error { return simFail("sim index", err) }
	cfg := sim.DefaultIndex()
	if s := c.String("nodes"); s != "" {
		nodes, err := parseNodes(s)
		if err != nil {
			return fail(err)
		}
		cfg.Nodes = nodes
	}
	cfg.Origins = splitList(c.String("origin"))
	cfg.Tasks = c.Int("tasks")
	cfg.TaskMean = c.Float64("task-mean")
	cfg.TaskSpread = c.Float64("task-spread")
	cfg.Spacing = c.Float64("spacing")
	cfg.Interval = c.Float64("interval")
	cfg.Policy.RecipientThreshold = c.Float64("recipient")
	cfg.Policy.EmitterThreshold = c.Float64("emitter")
	cfg.Policy.Candidates = c.Int("candidates")
	cfg.TransferDelay = c.Float64("transfer-delay")
	cfg.Seed = c.Uint64("seed")
	seeds := c.Int("seeds")
	if seeds < 1 || seeds > 10000 {
		return fail(fmt.Errorf("%w: --seeds %d (1..10000)", sim.ErrBadConfig, seeds))
	}
	var runs []sim.IndexResult
	for k := 0; k < seeds; k++ {
		cc := cfg
		cc.Seed = cfg.Seed + uint64(k)
		r, err := sim.RunIndex(cc)
		if err != nil {
			return fail(err)
		}
		runs = append(runs, r)
	}
	r := runs[0]
	speedups := make([]float64, len(runs))
	for i, x := range runs {
		speedups[i] = x.Speedup
	}
	mean, ci := sim.BatchMeans(speedups)
	if p := c.String("plot"); p != "" {
		ch := sim.Chart{Title: fmt.Sprintf("Load index per node, %d tasks on %s (thresholds %g/%g)", cfg.Tasks, strings.Join(cfg.Origins, ","), cfg.Policy.RecipientThreshold, cfg.Policy.EmitterThreshold),
			XLabel: "time (s)", YLabel: "load index", YMin: 0, YMax: 1}
		for i, n := range r.Nodes {
			ch.Series = append(ch.Series, sim.Series{Name: n.Name, X: r.Dynamic.Times, Y: r.Dynamic.Index[i]})
		}
		if err := writeSVGFile(p, ch); err != nil {
			return fail(err)
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		doc := map[string]any{"result": r, "speedups": speedups, "mean_speedup": mean}
		if len(runs) > 1 {
			doc["ci95"] = ci
		}
		return writeJSON(out, doc)
	}
	fmt.Fprintf(out, "%-8s %5s %9s %8s %7s %8s\n", "node", "cores", "power", "P/Pmax", "static", "balanced")
	pmax := 0.0
	for _, n := range r.Nodes {
		pmax = max(pmax, n.Power)
	}
	for i, n := range r.Nodes {
		fmt.Fprintf(out, "%-8s %5d %9.2f %8.3f %7d %8d\n", n.Name, n.Cores, n.Power, n.Power/pmax, r.Static.TasksPerNode[i], r.Dynamic.TasksPerNode[i])
	}
	fmt.Fprintf(out, "makespan: even static distribution %.1f s, load index %.1f s: speedup %.2f\n", r.Static.Makespan, r.Dynamic.Makespan, r.Speedup)
	fmt.Fprintf(out, "balancing: %d operations, %d messages, %d tasks sent away from their origin\n", r.Dynamic.Operations, r.Dynamic.Messages, r.Dynamic.Remote)
	if len(runs) > 1 {
		lo, hi := speedups[0], speedups[0]
		for _, s := range speedups {
			lo, hi = min(lo, s), max(hi, s)
		}
		fmt.Fprintf(out, "over %d seeds: mean speedup %.2f ± %.2f (95%%), range %.2f..%.2f\n", len(runs), mean, ci, lo, hi)
	}
	return nil
}

func simWALCommand() *cli.Command {
	d := sim.DefaultWAL()
	return &cli.Command{
		Name:      "wal",
		Usage:     "WAL and WAL-FC on a memory- and I/O-intensive cluster (Qin et al.)",
		ArgsUsage: " ",
		Description: "Simulates six nodes with 640 MB of RAM, a shared I/O buffer (initially\n" +
			"160 MB) and one disk each, under every --policy and page-fault rate (--pf,\n" +
			"page faults per CPU second of a job on a fully over-committed node), and\n" +
			"prints the mean job slowdown. With both wal and wal-fc, it reports how much\n" +
			"the feedback controller reduces WAL's slowdown at each rate. --seeds N runs\n" +
			"seeds seed..seed+N-1 and averages.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policy", Value: "nlb,wal,wal-fc", Usage: "policies: nlb, nlb-fc, cpu, io, io-fc, wal, wal-fc"},
			&cli.StringFlag{Name: "pf", Value: "30,60,120,180,240", Usage: "page-fault rates"},
			&cli.IntFlag{Name: "nodes", Value: d.Nodes, Usage: "number of nodes"},
			&cli.Float64Flag{Name: "arrival-rate", Value: d.ArrivalRate, Usage: "jobs per second per node"},
			&cli.Float64Flag{Name: "io-rate", Value: d.IORate, Usage: "mean explicit I/O accesses per CPU second"},
			&cli.Float64Flag{Name: "buffer", Value: d.Buffer, Usage: "initial buffer share of memory"},
			&cli.Float64Flag{Name: "wio", Value: d.WIO, Usage: "W_IO of wal (wal-fc's starting weight)"},
			&cli.Float64Flag{Name: "overload", Value: d.Overload, Usage: "WAL load above which new jobs move"},
			&cli.IntFlag{Name: "history", Value: 20, Usage: "controller: slowdowns averaged into s_avg"},
			&cli.IntFlag{Name: "recent", Value: 1, Usage: "controller: jobs per control step (1: the paper's rule)"},
			&cli.IntFlag{Name: "jobs", Value: d.Jobs, Usage: "jobs simulated"},
			&cli.IntFlag{Name: "warmup", Value: d.Warmup, Usage: "first jobs not counted"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "random seed"},
			&cli.IntFlag{Name: "seeds", Value: 1, Usage: "average over this many consecutive seeds"},
			&cli.BoolFlag{Name: "json", Usage: "print {\"results\":[...]} as JSON"},
			&cli.StringFlag{Name: "plot", Usage: "write mean slowdown against page-fault rate as SVG to `FILE`"},
		},
		Action: simWALAction,
	}
}

func simWALAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("sim wal: unexpected argument %q", c.Args().First()), 2)
	}
	fail := func(err error) error { return simFail("sim wal", err) }
	var pols []sim.WALPolicy
	for _, s := range splitList(c.String("policy")) {
		p, err := sim.ParseWALPolicy(s)
		if err != nil {
			return fail(err)
		}
		pols = append(pols, p)
	}
	if len(pols) == 0 {
		return fail(fmt.Errorf("%w: no policy given", sim.ErrBadConfig))
	}
	pfs, err := sim.ParseValues(c.String("pf"))
	if err != nil {
		return fail(fmt.Errorf("--pf: %w", err))
	}
	seeds := c.Int("seeds")
	if seeds < 1 || seeds > 1000 || len(pols)*len(pfs)*seeds > 100000 {
		return fail(fmt.Errorf("%w: --seeds %d (1..1000, at most 100000 runs)", sim.ErrBadConfig, seeds))
	}
	base := sim.DefaultWAL()
	base.Nodes = c.Int("nodes")
	base.ArrivalRate = c.Float64("arrival-rate")
	base.IORate = c.Float64("io-rate")
	base.Buffer = c.Float64("buffer")
	base.WIO = c.Float64("wio")
	base.Overload = c.Float64("overload")
	base.Controller.History = c.Int("history")
	base.Controller.Recent = c.Int("recent")
	base.Jobs = c.Int("jobs")
	base.Warmup = c.Int("warmup")
	var results []sim.WALResult
	for _, p := range pols {
		for _, pf := range pfs {
			var agg sim.WALResult
			var means []float64
			for k := 0; k < seeds; k++ {
				cfg := base
				cfg.Policy, cfg.PageFaultRate, cfg.Seed = p, pf, c.Uint64("seed")+uint64(k)
				r, err := sim.RunWAL(cfg)
				if err != nil {
					return fail(err)
				}
				means = append(means, r.MeanSlowdown)
				agg.Migrations += r.Migrations / float64(seeds)
				agg.HitRate += r.HitRate / float64(seeds)
				agg.WIO += r.WIO / float64(seeds)
				agg.Buffer += r.Buffer / float64(seeds)
				if seeds == 1 {
					agg.CI95 = r.CI95
				}
			}
			agg.Policy, agg.PageFaultRate = p, pf
			if seeds == 1 {
				agg.MeanSlowdown = means[0]
			} else {
				agg.MeanSlowdown, agg.CI95 = sim.BatchMeans(means)
			}
			results = append(results, agg)
		}
	}
	if p := c.String("plot"); p != "" {
		ch := sim.Chart{Title: fmt.Sprintf("Mean slowdown, %d nodes, memory- and I/O-intensive", base.Nodes),
			XLabel: "page faults per CPU second (memory fully over-committed)", YLabel: "mean slowdown", LogY: true}
		idx := map[sim.WALPolicy]int{}
		for _, r := range results {
			i, ok := idx[r.Policy]
			if !ok {
				i = len(ch.Series)
				idx[r.Policy] = i
				ch.Series = append(ch.Series, sim.Series{Name: strings.ToUpper(string(r.Policy))})
			}
			ch.Series[i].X = append(ch.Series[i].X, r.PageFaultRate)
			ch.Series[i].Y = append(ch.Series[i].Y, r.MeanSlowdown)
			ch.Series[i].Err = append(ch.Series[i].Err, r.CI95)
		}
		if err := writeSVGFile(p, ch); err != nil {
			return fail(err)
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		return writeJSON(out, map[string]any{"results": results})
	}
	fmt.Fprintf(out, "%-7s %6s %13s %8s %10s %8s %6s %6s\n", "policy", "pf", "mean slowdown", "±95%", "migrations", "hit rate", "W_IO", "buffer")
	for _, r := range results {
		fmt.Fprintf(out, "%-7s %6g %13.3f %8.3f %10.3f %8.3f %6.2f %6.2f\n", r.Policy, r.PageFaultRate, r.MeanSlowdown, r.CI95, r.Migrations, r.HitRate, r.WIO, r.Buffer)
	}
	for _, pair := range [][2]sim.WALPolicy{{sim.WALP, sim.WALFC}, {sim.IO, sim.IOFC}, {sim.NLB, sim.NLBFC}} {
		for _, a := range results {
			if a.Policy != pair[0] {
				continue
			}
			for _, b := range results {
				if b.Policy == pair[1] && b.PageFaultRate == a.PageFaultRate {
					fmt.Fprintf(out, "pf %g: %s reduces the slowdown of %s by %.1f%%\n", a.PageFaultRate, b.Policy, a.Policy, 100*(a.MeanSlowdown-b.MeanSlowdown)/a.MeanSlowdown)
				}
			}
		}
	}
	return nil
}

func simSEDCommand() *cli.Command {
	d := sim.DefaultSynthetic()
	return &cli.Command{
		Name:      "sed",
		Usage:     "trace-driven Dynamic-SED: applications A_greedy, A_70, A_50 on a workstation pool (Schnor and Gehrke)",
		ArgsUsage: " ",
		Description: "Replays a trace (per host and time step: load, free memory, interactive\n" +
			"users) or a synthetic pool with day/night and weekday patterns, maps each\n" +
			"application with SED at the start and runs Dynamic-SED's check every δT\n" +
			"(3 min) for --hours hours. The night experiment starts at the trace's first\n" +
			"00:00, the day experiment at its first 16:00. Prints the rows of the paper's\n" +
			"Tables 2 and 3 (size, MDC, MDT, EDT, slowdown) and migrations per hour.\n" +
			"Trace format: see --write-trace, or the package documentation of sched/sim.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "read the trace from `FILE` (- for standard input)"},
			&cli.BoolFlag{Name: "synthetic", Usage: "use a synthetic workstation pool (the default without --trace)"},
			&cli.IntFlag{Name: "hosts", Value: d.Hosts, Usage: "synthetic pool: workstations"},
			&cli.IntFlag{Name: "days", Value: d.Days, Usage: "synthetic pool: days sampled"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "synthetic pool: random seed"},
			&cli.StringFlag{Name: "write-trace", Usage: "also write the trace used to `FILE`"},
			&cli.StringFlag{Name: "experiment", Value: "night,day", Usage: "night (start 00:00), day (start 16:00), or HH:MM"},
			&cli.Float64Flag{Name: "hours", Value: 96, Usage: "hours each application is followed"},
			&cli.BoolFlag{Name: "json", Usage: "print {\"experiments\":[...]} as JSON"},
			&cli.StringFlag{Name: "plot", Usage: "write migrations per hour as SVG to `FILE`"},
		},
		Action: simSEDAction,
	}
}

func simSEDAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("sim sed: unexpected argument %q", c.Args().First()), 2)
	}
	fail := func(err error) error { return simFail("sim sed", err) }
	path := c.String("trace")
	if path != "" && c.Bool("synthetic") {
		return cli.Exit("sim sed: --trace and --synthetic exclude each other", 2)
	}
	var tr *sim.Trace
	var err error
	if path != "" {
		var r io.Reader = os.Stdin
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return fail(fmt.Errorf("trace: %w", err))
			}
			defer f.Close()
			r = f
		}
		if tr, err = sim.ReadTrace(r); err != nil {
			return fail(fmt.Errorf("%s: %w", path, err))
		}
	} else {
		sc := sim.DefaultSynthetic()
		sc.Hosts, sc.Days, sc.Seed = c.Int("hosts"), c.Int("days"), c.Uint64("seed")
		if tr, err = sim.SyntheticTrace(sc); err != nil {
			return fail(err)
		}
	}
	if p := c.String("write-trace"); p != "" {
		var b bytes.Buffer
		if err := sim.WriteTrace(&b, tr); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			return fail(fmt.Errorf("write trace: %w", err))
		}
	}
	hours := c.Float64("hours")
	if !(hours > 0) || hours > 1e6 {
		return fail(fmt.Errorf("%w: --hours %g (> 0)", sim.ErrBadConfig, hours))
	}
	var results []sim.SEDResult
	for _, e := range splitList(c.String("experiment")) {
		var h float64
		switch e {
		case "night":
			h = 0
		case "day":
			h = 16
		default:
			var hh, mm int
			if n, err := fmt.Sscanf(e, "%d:%d", &hh, &mm); err != nil || n != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
				return fail(fmt.Errorf("%w: experiment %q is not night, day or HH:MM", sim.ErrBadConfig, e))
			}
			h = float64(hh) + float64(mm)/60
		}
		start := sim.StartAt(tr, h)
		if start < 0 {
			return fail(fmt.Errorf("%w: the trace has no step at %s", sim.ErrBadConfig, e))
		}
		cfg := sim.DefaultSEDConfig(e, start, tr.Step)
		cfg.Steps = max(1, int(hours*3600/tr.Step))
		r, err := sim.RunSED(tr, cfg)
		if err != nil {
			return fail(err)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return fail(fmt.Errorf("%w: no experiment given", sim.ErrBadConfig))
	}
	if p := c.String("plot"); p != "" {
		ch := sim.Chart{Title: "Dynamic-SED: migrations per hour", XLabel: "hours since the start", YLabel: "migrations per hour"}
		for _, r := range results {
			for _, a := range r.Apps {
				s := sim.Series{Name: a.App.Name + " (" + r.Name + ")"}
				for i, n := range a.PerHour {
					s.X = append(s.X, float64(i))
					s.Y = append(s.Y, float64(n))
				}
				ch.Series = append(ch.Series, s)
			}
		}
		if err := writeSVGFile(p, ch); err != nil {
			return fail(err)
		}
	}
	out := c.App.Writer
	if c.Bool("json") {
		return writeJSON(out, map[string]any{"hosts": len(tr.Hosts), "experiments": results})
	}
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "%s experiment: %d hosts, start %s, %.0f hours\n", r.Name, len(tr.Hosts), r.Start, r.Hours)
		fmt.Fprintf(out, "%-9s %5s %5s %7s %7s %7s %7s %8s %10s %10s %6s\n", "appl.", "size", "class", "MDC", "MDT", "EDT", "sd %", "in class", "max mig/h", "mean mig/h", "stays")
		for _, a := range r.Apps {
			fmt.Fprintf(out, "%-9s %5d %5d %7.2f %7.3f %7.3f %7.0f %8.2f %10d %10.2f %6d\n",
				a.App.Name, a.Size, a.Class, a.MDC, a.MDT, a.EDT, a.Slowdown, a.InClass, a.MaxPerHour, a.MeanPerHour, a.Stays)
		}
	}
	return nil
}

// simFail is a simulation command's error: a bad configuration is a usage
// error (status 2), anything else a failure (status 1).
func simFail(what string, err error) error {
	if errors.Is(err, sim.ErrBadConfig) {
		return cli.Exit(fmt.Sprintf("%s: %v (see 'dpvm %s --help')", what, err, what), exitUsage)
	}
	return cli.Exit(fmt.Sprintf("%s: %v", what, err), exitFailed)
}
