package status

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPageRecentEnded runs the page's recentEnded in headless Chromium over
// three polls: the ended tasks listed are the ten that ended most recently
// (by the poll that first saw them ended, then by start), not the last ten
// by TID, and a task gone from the list is forgotten.
func TestPageRecentEnded(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("this test needs Debian's chromium (apt-get install -y chromium): ", err)
	}
	fn := regexp.MustCompile(`(?s)function recentEnded\(.*?\n}\n`).Find(page)
	if fn == nil {
		t.Fatal("page.html has no recentEnded")
	}
	// Poll 1: t2:1..t2:12 ended (started in that order), t9:1 running.
	// Poll 2: t9:1 ended too; t10:1 ended, started before all others.
	// Poll 3: t2:12 is gone from the list.
	script := string(fn) + `
const task = (tid, state, started) => ({tid, state, started: new Date(Date.UTC(2026, 0, 1, 0, 0, started)).toISOString()});
const seen = new Map(), out = [];
let tasks = [];
for (let i = 1; i <= 12; i++) tasks.push(task("t2:" + i, "exited", 10 + i));
tasks.push(task("t9:1", "running", 30));
out.push(recentEnded(tasks, seen, 1).map(t => t.tid).join(" "));
tasks[12].state = "failed";
tasks.push(task("t10:1", "exited", 1));
out.push(recentEnded(tasks, seen, 2).map(t => t.tid).join(" "));
tasks = tasks.filter(t => t.tid !== "t2:12");
out.push(recentEnded(tasks, seen, 3).map(t => t.tid).join(" ") + " | seen " + seen.size);
document.body.textContent = "RESULT[" + out.join(";") + "]";
`
	file := filepath.Join(t.TempDir(), "recent.html")
	if err := os.WriteFile(file, []byte("<!doctype html><html><body><script>"+script+"</script></body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+file).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	m := regexp.MustCompile(`RESULT\[(.*?)\]`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no result in:\n%s", out)
	}
	got := strings.Split(string(m[1]), ";")
	want := []string{
		"t2:12 t2:11 t2:10 t2:9 t2:8 t2:7 t2:6 t2:5 t2:4 t2:3",
		"t9:1 t10:1 t2:12 t2:11 t2:10 t2:9 t2:8 t2:7 t2:6 t2:5",
		"t9:1 t10:1 t2:11 t2:10 t2:9 t2:8 t2:7 t2:6 t2:5 t2:4 | seen 13",
	}
	if len(got) != len(want) {
		t.Fatalf("results %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("poll %d: %q, want %q", i+1, got[i], want[i])
		}
	}
}
