package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
// n messages of size bytes, the sink never receives. It watches both
// daemons' resident memory while the source sends (for at most watch, or
// until it has sent everything) and fails if either exceeds budget MiB or
// the source sent everything; then the machine must still run a program.
// It returns how many messages the source sent and the most memory seen.
func floodCase(t *testing.T, bin, source, sink string, n, size, budget int, watch time.Duration) (sent, peak int) {
	c, master, host, addr := binVM(t, bin)
	base := max(rssMiB(t, master), rssMiB(t, host))
	run := startCmd(t, "flood run", exec.Command(bin, append(append([]string{"run", "--master", addr}, c.client()...),
		"flood", "-source", source, "-sink", sink, "-size", strconv.Itoa(size), "-n", strconv.Itoa(n))...))
	deadline := time.Now().Add(watch)
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
	t.Logf("source on %s, sink on %s: sent %d of %d messages of %d MiB; daemons' resident memory %d MiB at start, at most %d MiB seen (budget %d)",
		source, sink, sent, n, size>>20, base, peak, budget)
	if peak > budget {
		t.Errorf("a daemon holds %d MiB, budget %d", peak, budget)
	}
	if sent >= n {
		t.Errorf("the source sent all %d messages to a sink that never receives: they are buffered somewhere", n)
	}
	if sent == 0 {
		t.Errorf("the source sent nothing:\n%s\n%s", run.out.String(), run.err.String())
	}
	// The machine serves on, the flood still blocked.
	binServes(t, bin, c, addr)
	return sent, peak
}

// binVM starts a master (h1) and a host (h2) of bin, a dpvm binary.
func binVM(t *testing.T, bin string) (c *creds, master, host *proc, addr string) {
	t.Helper()
	c = newCreds(t)
	common := []string{"--listen", "127.0.0.1:0", "--heartbeat", "100ms", "--dead-after", "2s"}
	master = startCmd(t, "master", exec.Command(bin, append(append([]string{"daemon", "--master"}, c.master()...), common...)...))
	addr = master.waitFor(listening, true)[1]
	host = startCmd(t, "host", exec.Command(bin, append(append([]string{"daemon", "--join", addr}, c.host("h2")...), common...)...))
	host.waitFor(listening, true)
	return c, master, host, addr
}

// binServes fails the test unless the machine at addr runs hello across
// its hosts, as run by bin.
func binServes(t *testing.T, bin string, c *creds, addr string) {
	t.Helper()
	hello := startCmd(t, "hello", exec.Command(bin, append(append([]string{"run", "--master", addr}, c.client()...), "hello", "-n", "2")...))
	if code := hello.wait(); code != 0 || !strings.Contains(hello.out.String(), "2 children said hello") {
		t.Errorf("the machine does not serve: hello's status %d\n%s\n%s", code, hello.out.String(), hello.err.String())
	}
}

// TestSendForeverOfProcesses: a task sends 1 MiB messages without end to a
// task on another daemon that never receives. The receiving daemon stops
// acknowledging past its mailbox budget (MailboxHigh, 32 MiB) and the
// sender's daemon holds at most its window (8 MiB) unacknowledged, so Send
// blocks: the source gets nowhere near its 384 messages and neither
// daemon's memory passes 200 MiB. Then the same with both tasks on one
// daemon: the local Send blocks once the sink's mailbox holds MailboxHigh.
// Then 60 MiB messages (under MaxFrame, over every window and mailbox
// bound): the first goes alone into the sink's empty mailbox, the next
// waits for it; neither daemon passes 300 MiB (145 MiB at most, load average 7, 2026-11-29; both reached 1.1-1.2 GiB
// once, the sender resending its unacknowledged message every 2.5 s).
// Each time the machine still runs a program.
func TestSendForeverOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary")
	}
	bin := buildFlood(t)
	t.Run("remote", func(t *testing.T) { floodCase(t, bin, "h1", "h2", 384, 1<<20, 200, 10*time.Second) })
	t.Run("local", func(t *testing.T) { floodCase(t, bin, "h2", "h2", 384, 1<<20, 200, 10*time.Second) })
	t.Run("60MiB", func(t *testing.T) { floodCase(t, bin, "h1", "h2", 6, 60<<20, 300, 6*time.Second) })
}

// TestSpawnLoopOfProcesses: a job's root spawns tasks that never end, 1024
// at a time, in a loop (spawnloop of testdata/flood, as the admin, whom
// users' quotas do not hold). Its job's quota of live tasks
// (MaxJobTasks, 32768 with the root) refuses the spawn that would pass
// it with ErrLimit; the task hears why. The master's memory stays under
// 1 GiB, and the machine serves on while the job holds its tasks.
func TestSpawnLoopOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a second binary")
	}
	bin := buildFlood(t)
	c, master, host, addr := binVM(t, bin)
	began := time.Now()
	run := startCmd(t, "spawnloop", exec.Command(bin, append(append([]string{"run", "--master", addr}, c.client()...), "spawnloop", "-batch", "1024")...))
	m := run.waitFor(regexp.MustCompile(`spawnloop: (\d+) tasks spawned, then: (.*)`), false)
	n, _ := strconv.Atoi(m[1])
	const quota, batch = 32768, 1024
	if n != (quota/batch-1)*batch || !strings.Contains(m[2], fmt.Sprintf("at most %d tasks in one job", quota)) || !strings.Contains(m[2], "over a configured limit") {
		t.Fatalf("the loop spawned %d tasks, then: %s; want %d, then the job's quota (ErrLimit)", n, m[2], (quota/batch-1)*batch)
	}
	rss := rssMiB(t, master)
	t.Logf("%d tasks spawned in %v (master and h2: %d and %d MiB resident), then: %s", n, time.Since(began).Round(time.Millisecond), rss, rssMiB(t, host), m[2])
	if rss > 1024 {
		t.Errorf("the master holds %d MiB with %d tasks", rss, n)
	}
	binServes(t, bin, c, addr)
}
