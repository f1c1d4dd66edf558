package status

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
	"github.com/dpvm/dpvm/task"
)

// screenshot, when set, is where TestStatusPageInChromium saves its
// screenshot (the README's: go test ./daemon/status -run Chromium
// -screenshot $PWD/status.png).
var screenshot = flag.String("screenshot", "", "save the status page's screenshot to this file")

// waiter waits for any message at a safe point, so it can be moved at any
// time, and ends when one comes.
type waiter struct{ Got int }

func init() { task.Register("status.test.waiter", &waiter{}) }

func (w *waiter) Run(c *task.Ctx) error {
	_, err := c.Recv(task.AnyTask, task.AnyTag, &w.Got, task.Safe())
	return err
}

// vmWithAMove starts a three-host VM with metrics, starts a waiter on h2
// and moves it to h3, and serves the status page with token; it returns
// the page's base URL and the waiter.
func vmWithAMove(t *testing.T, token string) (string, task.TID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vm, err := daemon.StartLocalVM(ctx, 3, daemon.Config{Speed: 0.584990766007926, Metrics: metrics.New(metrics.Options{NoRuntime: true})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Halt(10 * time.Second) })
	m := vm.Master()
	tids, err := m.Spawn(ctx, 0, task.SpawnRequest{Type: "status.test.waiter", Count: 1, Host: "h2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, tids[0], "h3", daemon.Direct); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.StartJob(ctx, &waiter{}, daemon.JobOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := metrics.Serve("127.0.0.1:0", Handler(Config{Source: m, Events: m.Metrics().Events(), Token: token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return "http://" + s.Addr() + "/", tids[0]
}

// TestStatusAPI checks the page's JSON API after a move: the hosts as
// `dpvm conf --json` has them, the tasks as `dpvm ps -a --json`, the move,
// and a job's checkpoint progress.
func TestStatusAPI(t *testing.T) {
	base, tid := vmWithAMove(t, "")
	code, body := metricstest.Fetch(t, base+"api/state", "")
	if code != http.StatusOK {
		t.Fatalf("api/state: %d %s", code, body)
	}
	var st State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Hosts) != 3 || !st.Hosts[0].Master || st.Hosts[2].Name != "h3" {
		t.Errorf("hosts %+v", st.Hosts)
	}
	found := false
	for _, ti := range st.Tasks {
		if ti.TID == tid {
			found = ti.Host == "h3" && ti.State == daemon.Running
		}
	}
	if !found || st.Partial != "" {
		t.Errorf("task %v not running on h3 in %+v (partial %q)", tid, st.Tasks, st.Partial)
	}
	if len(st.Moves) != 1 || st.Moves[0].TID != tid.String() || st.Moves[0].From != "h2" || st.Moves[0].To != "h3" ||
		st.Moves[0].Outcome != metrics.OutcomeCommitted || st.Moves[0].Freeze <= 0 {
		t.Errorf("moves %+v", st.Moves)
	}
	if len(st.Checkpoints) != 1 || st.Checkpoints[0].Job == 0 || st.Checkpoints[0].Last != 0 || st.Checkpoints[0].Warning != "" {
		t.Errorf("checkpoint progress %+v, want the job with none yet", st.Checkpoints)
	}
	var hosts []daemon.HostInfo
	if code, body := metricstest.Fetch(t, base+"api/hosts", ""); code != http.StatusOK || json.Unmarshal([]byte(body), &hosts) != nil || len(hosts) != 3 {
		t.Errorf("api/hosts: %d %s", code, body)
	}
	if code, body := metricstest.Fetch(t, base, ""); code != http.StatusOK || !strings.Contains(body, "<title>dpvm") {
		t.Errorf("page: %d %.200s", code, body)
	}
}

// TestStatusToken checks a page with a token refuses requests without it.
func TestStatusToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	base, _ := vmWithAMove(t, token)
	for _, c := range []struct {
		url, bearer string
		want        int
	}{
		{base, "", http.StatusUnauthorized},
		{base + "api/state", "wrong-token-0123456789", http.StatusUnauthorized},
		{base + "api/state?token=" + token, "", http.StatusOK},
		{base + "api/hosts", token, http.StatusOK},
		{base + "?token=" + token, "", http.StatusOK},
	} {
		if code, body := metricstest.Fetch(t, c.url, c.bearer); code != c.want {
			t.Errorf("GET %s (bearer %q): %d, want %d: %.200s", c.url, c.bearer, code, c.want, body)
		}
	}
}

// TestStatusPageInChromium loads the page in headless Chromium (Debian's
// chromium package), lets its script fetch the state, and checks the move
// and the hosts are on the page, each host's speed as dpvm conf prints it;
// it saves a screenshot (-screenshot).
func TestStatusPageInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("this test needs Debian's chromium (apt-get install -y chromium): ", err)
	}
	base, tid := vmWithAMove(t, "0123456789abcdef-token")
	url := base + "?token=0123456789abcdef-token"
	profile := t.TempDir()
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
			"--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + profile,
			"--virtual-time-budget=4000", "--window-size=1400,1000"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr)
		}
		return string(out)
	}
	dom := run("--dump-dom", url)
	for _, want := range []string{"h1 (master)", ">h2<", ">h3<", tid.String(), "h2 → h3", ">committed<", ">direct<", "Job checkpoint progress", ">none<", `<td class="num">0.585</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q:\n%s", want, dom)
		}
	}
	shot := *screenshot
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status.png")
	}
	run("--screenshot="+shot, url)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
}
