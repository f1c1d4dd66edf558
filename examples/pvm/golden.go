package pvm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A Capture is a run of one of PVM 3.4.6's original programs, recorded
// under testdata/pvm3, and the run of its port that must print the same:
// the tests compare both outputs, normalised, with the golden file.
type Capture struct {
	Program string   // the port's registered name
	Args    []string // the port's flags
	File    string   // under testdata/pvm3: the original's output
	Console bool     // File is PVM's console output (spawn -> …)
	Golden  string   // under testdata: File normalised
}

// Captures lists the recorded runs of the originals (README.md says how
// they were made).
var Captures = []Capture{
	{"pvm.hello", nil, "hello.txt", false, "hello.golden"},
	{"pvm.master1", nil, "master1.txt", false, "master1.golden"},
	{"pvm.spmd", []string{"-n", "4"}, "spmd.txt", true, "spmd.golden"},
	{"pvm.gexample", nil, "gex1.txt", true, "gexample.golden"},
	{"pvm.gexample", []string{"-dimension", "100", "-nproc", "4"}, "gexi.txt", false, "gexample-nproc4.golden"},
	{"pvm.timing", nil, "timing.txt", false, "timing.golden"},
}

var (
	// consoleLine is a line of a task's output on PVM's console:
	// "[job:tid] text", after the prompt on the first one.
	consoleLine = regexp.MustCompile(`^(?:pvm> )?\[\d+:t[0-9a-f]+\] (.*)$`)
	// tidToken is a task ID: PVM's (t40002) or dpvm's (t1:2).
	tidToken = regexp.MustCompile(`\bt[0-9a-f]{5,}\b|\bt\d+:\d+\b`)
	// decimalTID is a task ID printed as a number (spmd's ring).
	decimalTID = regexp.MustCompile(`\b\d{6,}\b`)
	hostName   = regexp.MustCompile(`(hello, world from )\S+`)
	// timingRow is a sample of timing: "%2d %8d" or "%2d   %8d   %8d".
	timingRow = regexp.MustCompile(`^([ \d]\d)((?: +\d+)+)$`)
	// timingAvg is a line of averages: "     %8d   %8d" or "     %8f   %8f".
	timingAvg = regexp.MustCompile(`^ +[\d.]+(?: +[\d.]+)*$`)
	rttAvg    = regexp.MustCompile(`^(RTT Avg uSec) \d+$`)
	number    = regexp.MustCompile(`[\d.]+`)
)

// gexamplePrompt is what gexample.c prints when it reads its input; the
// port takes flags instead.
const gexamplePrompt = " Input dimension ( >0 ) of matrix:  Input number of tasks (1-32): "

// Normalise makes the output of an original or of a port comparable
// across runs and systems: from a console capture, the tasks' lines only;
// task IDs named T1, T2, … in order of first appearance; the host name
// hello_other prints as HOST; timing's measures as <n>; gexample.c's input
// prompt removed; master1's results, which come in any order, sorted.
func Normalise(out string, console bool) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if console {
		var kept []string
		for _, l := range lines {
			if m := consoleLine.FindStringSubmatch(l); m != nil && m[1] != "EOF" {
				kept = append(kept, m[1])
			}
		}
		lines = kept
	}
	names := map[string]string{}
	name := func(tid string) string {
		if n, ok := names[tid]; ok {
			return n
		}
		n := fmt.Sprintf("T%d", len(names)+1)
		names[tid] = n
		return n
	}
	var norm, results []string
	flush := func() {
		slices.Sort(results)
		norm = append(norm, results...)
		results = nil
	}
	for _, l := range lines {
		l = strings.ReplaceAll(l, gexamplePrompt, "")
		if strings.Contains(l, " -> ") {
			l = decimalTID.ReplaceAllStringFunc(l, name)
		}
		l = tidToken.ReplaceAllStringFunc(l, name)
		l = hostName.ReplaceAllString(l, "${1}HOST")
		l = rttAvg.ReplaceAllString(l, "$1 <n>")
		if m := timingRow.FindStringSubmatch(l); m != nil {
			l = m[1] + strings.Repeat(" <n>", len(strings.Fields(m[2])))
		} else if timingAvg.MatchString(l) {
			l = "    " + number.ReplaceAllString(strings.Join(strings.Fields(l), " "), "<n>")
		}
		if strings.HasPrefix(l, "I got ") {
			results = append(results, l)
			continue
		}
		flush()
		norm = append(norm, l)
	}
	flush()
	return strings.Join(norm, "\n") + "\n"
}
