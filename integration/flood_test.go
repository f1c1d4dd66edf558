package integration

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// buildFlood builds dpvm with the flood program (testdata/flood).
func buildFlood(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flood")
	build := exec.Command("go", "build", "-o", bin, "./testdata/flood")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/flood: %v\n%s", err, out)
	}
	return bin
}

var floodSent = regexp.MustCompile(`flood: sent (\d+)`)

// floodCase runs the flood program of bin on a master (h1) and a host (h2)
// with its source on source and its sink on sink: the source tries to send
// n messages of 1 MiB, the sink never receives. It watches both daemons'
// resident memory while the source sends (for at most 10 s, or until it
// has sent everything) and fails if either exceeds budget MiB or the
// source sent everything. It returns how many messages the source sent
// and the most memory seen.
func floodCase(t *testing.T, bin, source, sink string, n, budget int) (sent, peak int) {
	c := newCreds(t)
	common := []string{"--listen", "127.0.0.1:0", "--heartbeat", "100ms", "--dead-after", "2s"}
	master := startCmd(t, "master", exec.Command(bin, append(append([]string{"daemon", "--master"}, c.master()...), common...)...))
	addr := master.waitFor(listening, true)[1]
	host := startCmd(t, "host", exec.Command(bin, append(append([]string{"daemon", "--join", addr}, c.host("h2")...), common...)...))
	host.waitFor(listening, true)
	base := max(rssMiB(t, master), rssMiB(t, host))
	run := startCmd(t, "flood run", exec.Command(bin, append(append([]string{"run", "--master", addr}, c.client()...),
		"flood", "-source", source, "-sink", sink, "-size", strconv.Itoa(1<<20), "-n", strconv.Itoa(n))...))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		peak = max(peak, rssMiB(t, master), rssMiB(t, host))
		if peak > budget {
			break
		}
		if ms := floodSent.FindAllStringSubmatch(run.out.String(), -1); len(ms) > 0 {
			sent, _ = strconv.Atoi(ms[len(ms)-1][1])
		}
		if sent >= n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("source on %s, sink on %s: sent %d of %d messages of 1 MiB; daemons' resident memory %d MiB at start, at most %d MiB seen (budget %d)",
		source, sink, sent, n, base, peak, budget)
	if peak > budget {
		t.Errorf("a daemon holds %d MiB, budget %d", peak, budget)
	}
	if sent >= n {
		t.Errorf("the source sent all %d MiB to a sink that never receives: they are buffered somewhere", n)
	}
	if sent == 0 {
		t.Errorf("the source sent nothing:\n%s\n%s", run.out.String(), run.err.String())
	}
	return sent, peak
}

// TestSendForeverOfProcesses: a task sends 1 MiB messages without end to a
// task on another daemon that never receives. The receiving daemon stops
// acknowledging past its mailbox budget (MailboxHigh, 32 MiB) and the
// sender's daemon holds at most its window (8 MiB) unacknowledged, so Send
// blocks: the source gets nowhere near its 384 messages and neither
// daemon's memory passes 200 MiB. Then the same with both tasks on one
// daemon: the local Send blocks once the sink's mailbox holds MailboxHigh.
func TestSendForeverOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary")
	}
	bin := buildFlood(t)
	t.Run("remote", func(t *testing.T) { floodCase(t, bin, "h1", "h2", 384, 200) })
	t.Run("local", func(t *testing.T) { floodCase(t, bin, "h2", "h2", 384, 200) })
}
