package route

import (
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/internal/transcript"
	"github.com/dpvm/dpvm/task"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts under testdata/ with what the cache does now")

var testConfig = Config{Retry: time.Second}

// TestTranscripts replays testdata/*.txt. A script is a sequence of
// blocks: a command, a line "----", the effects it produces (or the
// answer of lookup), then a blank line; lines starting with # are
// comments. Commands (a route is host/epoch, with /t when in transit):
//
//	host <h> [max <n>]                     a new cache for host h (MaxRoutes n)
//	set <tid> <route> | answer <tid> <route>
//	refused <tid> <peer> <route> <using>
//	miss <tid> <peer> | ask <tid> <peer>
//	held <tid> <using> | forget <tid> | lost <host>
//	up <host> <epoch>                      the host back, above the epoch
//	ended <tid> <epoch> | sent <tid>
//	tick <duration>
//	lookup <tid> | size | gone <route>
//
// go test ./routing/route -run TestTranscripts -rewrite updates them.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var c *Cache
			now := time.Unix(0, 0).UTC()
			transcript.Run(t, f, *rewrite, func(cmd string) string { return runCommand(t, &c, &now, cmd) })
		})
	}
}

func runCommand(t *testing.T, c **Cache, now *time.Time, cmd string) string {
	f := strings.Fields(cmd)
	if f[0] == "host" {
		cfg := testConfig
		if len(f) == 4 && f[2] == "max" {
			n, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxRoutes = n
		}
		*c = New(parseHost(t, f[1]), cfg)
		return "ok"
	}
	if *c == nil {
		t.Fatalf("%s: no host yet", cmd)
	}
	var e Event
	switch f[0] {
	case "set", "answer":
		e = Event{Kind: EvSet, TID: parseTID(t, f[1]), Route: parseRoute(t, f[2])}
		if f[0] == "answer" {
			e.Kind = EvAnswer
		}
	case "refused":
		e = Event{Kind: EvRefused, TID: parseTID(t, f[1]), Peer: parseHost(t, f[2]), Route: parseRoute(t, f[3]), Using: parseRoute(t, f[4])}
	case "miss", "ask":
		e = Event{Kind: EvMiss, TID: parseTID(t, f[1]), Peer: parseHost(t, f[2])}
		if f[0] == "ask" {
			e.Kind = EvAsk
		}
	case "held":
		e = Event{Kind: EvHeld, TID: parseTID(t, f[1]), Using: parseRoute(t, f[2])}
	case "lost":
		e = Event{Kind: EvHostLost, Peer: parseHost(t, f[1])}
	case "up":
		ep, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		e = Event{Kind: EvHostUp, Peer: parseHost(t, f[1]), Route: routing.Route{Epoch: ep}}
	case "forget":
		e = Event{Kind: EvForget, TID: parseTID(t, f[1])}
	case "ended":
		ep, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		e = Event{Kind: EvEnded, TID: parseTID(t, f[1]), Route: routing.Route{Epoch: ep}}
	case "sent":
		e = Event{Kind: EvSent, TID: parseTID(t, f[1])}
	case "size":
		return fmt.Sprintf("%d routes, %d ended, %d queries", (*c).Len(), (*c).EndedLen(), (*c).Queries())
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			t.Fatal(err)
		}
		*now = now.Add(d)
		e = Event{Kind: EvTick}
	case "gone":
		return fmt.Sprintf("%v", (*c).Gone(parseRoute(t, f[1])))
	case "lookup":
		tid := parseTID(t, f[1])
		if ep, ok := (*c).Ended(tid); ok {
			return fmt.Sprintf("%s ended e%d asking %v", fmtRoute((*c).Lookup(tid)), ep, (*c).Asking(tid))
		}
		return fmt.Sprintf("%s asking %v", fmtRoute((*c).Lookup(tid)), (*c).Asking(tid))
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	var lines []string
	for _, x := range (*c).Step(*now, e) {
		lines = append(lines, x.String())
	}
	if len(lines) == 0 {
		return "nothing"
	}
	return strings.Join(lines, "\n")
}

func parseTID(t *testing.T, s string) task.TID {
	tid, err := task.ParseTID(s)
	if err != nil {
		t.Fatal(err)
	}
	return tid
}

func parseHost(t *testing.T, s string) task.HostID {
	h, err := task.ParseHostID(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// parseRoute parses host/epoch[/t]; host 0 is "none".
func parseRoute(t *testing.T, s string) routing.Route {
	p := strings.Split(s, "/")
	if len(p) < 2 {
		t.Fatalf("route %q: want host/epoch[/t]", s)
	}
	var r routing.Route
	if p[0] != "none" {
		r.Host = parseHost(t, p[0])
	}
	e, err := strconv.ParseUint(p[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	r.Epoch = e
	r.InTransit = len(p) > 2 && p[2] == "t"
	return r
}
