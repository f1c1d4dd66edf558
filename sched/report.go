package sched

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// num formats a figure for people: at most four decimals, no exponent for
// ordinary values.
func num(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	case math.IsNaN(x):
		return "nan"
	}
	return strconv.FormatFloat(math.Round(x*1e4)/1e4, 'f', -1, 64)
}

// mib formats an amount of memory in MiB.
func mib(x float64) string {
	if math.IsInf(x, 1) {
		return "unlimited"
	}
	return num(x) + " MiB"
}

// WritePlan prints m, the mapping Plan made of job on s, as tables for
// people: the delay classes with their availability and expected delay time,
// the decision, and the hosts with the processes placed on each.
func WritePlan(w io.Writer, s *Snapshot, job Job, m Mapping) error {
	var b strings.Builder
	maxs := "unbounded"
	if job.MaxSize > 0 {
		maxs = strconv.Itoa(job.MaxSize)
	}
	fmt.Fprintf(&b, "job: minsize %d, maxsize %s\n\n", job.minSize(), maxs)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tDELTA\tMIN\tMAX\tAVAILABLE\tSIZE\tEDT")
	for i, c := range s.Classes {
		a := m.Availability[i]
		if job.MaxSize > 0 && a > job.MaxSize {
			a = job.MaxSize
		}
		size, edt, mark := "-", "-", ""
		if a >= job.minSize() {
			size, edt = strconv.Itoa(a), num(c.Delta/float64(a))
		}
		if i+1 == m.Class {
			mark = "<- chosen"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", i+1, num(c.Delta), num(c.Min), num(c.Max), m.Availability[i], size, edt, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	if m.Class == 0 {
		fmt.Fprintf(&b, "no class offers %d virtual nodes: the job cannot be mapped now\n", job.minSize())
		return writeTrimmed(w, b.String())
	}
	fmt.Fprintf(&b, "mapped to class %d (delta %s): %d processes, expected delay time %s\n\n",
		m.Class, num(s.Classes[m.Class-1].Delta), m.Size, num(m.EDT))
	worst := map[string]float64{}
	for _, p := range m.Hosts {
		worst[p.Host] = p.Delay
	}
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tALPHA\tLOAD\tUSERS\tFREE\tDELAY\tCLASS\tPLACED\tDELAY AFTER")
	for _, h := range s.Hosts {
		placed, after := "-", "-"
		if n := m.Placement[h.Name]; n > 0 {
			placed, after = strconv.Itoa(n), num(worst[h.Name])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", h.Name, num(h.Alpha), num(h.Load), h.Users,
			mib(h.MemFree), num(h.Delay()), classString(ClassOf(s.Classes, h.Delay())), placed, after)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTrimmed(w, b.String())
}

func classString(c int) string {
	if c == 0 {
		return "none"
	}
	return strconv.Itoa(c)
}

// WriteStep prints r, the result of Step on s, as tables for people: one row
// per process with its candidate reason, counter, limit and decision, then
// the hosts' load and free memory before and after the moves.
func WriteStep(w io.Writer, s *Snapshot, r StepResult) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TID\tHOST\tCLASS\tREASON\tCOUNTER\tLIMIT\tDECISION")
	for _, d := range r.Decisions {
		what := "-"
		switch {
		case d.Selected:
			what = d.Location.String()
		case d.Reason != 0:
			what = "candidate, below limit"
		}
		class := d.Process.Class
		if class == 0 {
			class = len(s.Classes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d -> %d\t%d\t%s\n", d.Process.TID, d.Process.Host, class, d.Reason,
			d.Process.Counter, r.Counters[d.Process.TID], d.Limit, what)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n%d migration(s), %d stay", len(r.Migrations), len(r.Stay))
	if len(r.Stay) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.Stay, ", "))
	}
	b.WriteString("\n\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tALPHA\tUSERS\tLOAD\tFREE\tDELAY\tCLASS")
	for i, h0 := range s.Hosts {
		h1 := h0
		if r.After != nil && i < len(r.After.Hosts) {
			h1 = r.After.Hosts[i]
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", h0.Name, num(h0.Alpha), h0.Users,
			change(num(h0.Load), num(h1.Load)), change(mib(h0.MemFree), mib(h1.MemFree)),
			change(num(h0.Delay()), num(h1.Delay())),
			change(classString(ClassOf(s.Classes, h0.Delay())), classString(ClassOf(s.Classes, h1.Delay()))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTrimmed(w, b.String())
}

func change(before, after string) string {
	if before == after {
		return before
	}
	return before + " -> " + after
}

// writeTrimmed writes text with the padding tabwriter leaves at the end of
// lines removed.
func writeTrimmed(w io.Writer, text string) error {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}
