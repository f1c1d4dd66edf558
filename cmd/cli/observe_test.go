package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics/metricstest"
)

// waitMatch polls buf until re matches, or fails after a deadline: a
// daemon on real sockets gives no other signal.
func waitMatch(t *testing.T, buf *syncBuffer, re *regexp.Regexp, done <-chan int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(buf.String()); m != nil {
			return m
		}
		select {
		case code := <-done:
			t.Fatalf("dpvm daemon exited (%d) before printing %v:\n%s", code, re, buf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %v within 30s:\n%s", re, buf.String())
	return nil
}

// TestDaemonServesMetricsAndProfiles runs `dpvm daemon --master` with
// --metrics-listen, --pprof and JSON logs, fetches /metrics and
// /debug/pprof/, halts it with `dpvm halt`, and checks its log lines are
// JSON objects naming the host.
func TestDaemonServesMetricsAndProfiles(t *testing.T) {
	key := filepath.Join(t.TempDir(), "vm.key")
	if code := Run([]string{"dpvm", "keygen", "--out", key, "--master-name", "h1"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("keygen: %d", code)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run([]string{"dpvm", "--log-format", "json", "--log-level", "info", "daemon", "--master", "--listen", "127.0.0.1:0",
			"--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--load-source", "static",
			"--metrics-listen", "127.0.0.1:0", "--pprof", "127.0.0.1:0", "--http", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	addr := waitMatch(t, &stderr, regexp.MustCompile(`listening on (\S+)`), done)[1]
	metricsURL := waitMatch(t, &stderr, regexp.MustCompile(`metrics on (http://\S+)`), done)[1]
	pprofURL := waitMatch(t, &stderr, regexp.MustCompile(`profiles on (http://\S+)`), done)[1]
	statusURL := waitMatch(t, &stderr, regexp.MustCompile(`status page on (http://\S+)`), done)[1]
	if body := metricstest.Get(t, statusURL+"api/hosts"); !strings.Contains(body, `"name":"h1"`) || !strings.Contains(body, `"master":true`) {
		t.Errorf("%sapi/hosts:\n%s", statusURL, body)
	}

	if body := metricstest.Get(t, metricsURL); !strings.Contains(body, `dpvm_tasks{state="running"} 0`) || !strings.Contains(body, "go_goroutines") {
		t.Errorf("%s:\n%s", metricsURL, body)
	}
	// The health probe Kubernetes is given: the daemon runs.
	if body := metricstest.Get(t, strings.TrimSuffix(metricsURL, "/metrics")+healthPath); body != "ok\n" {
		t.Errorf("%s: %q, want ok", healthPath, body)
	}
	if body := metricstest.Get(t, pprofURL); !strings.Contains(body, "goroutine") {
		t.Errorf("%s:\n%s", pprofURL, body)
	}
	if code := Run([]string{"dpvm", "halt", "--master", addr, "--credential", filepath.Join(key, "admin.pem")}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("halt: %d", code)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("daemon exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop after halt")
	}
	logs := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %v: %s", err, line)
			continue
		}
		if rec["host"] != "h1" {
			t.Errorf("log line without host h1: %s", line)
		}
		logs++
	}
	if logs == 0 {
		t.Errorf("no JSON log line:\n%s", stderr.String())
	}
}

// TestObserveFlagsRefuse checks the daemon refuses to expose metrics or
// profiles beyond loopback unless told, a bad --log-format, and an
// unknown --detector.
func TestObserveFlagsRefuse(t *testing.T) {
	key := filepath.Join(t.TempDir(), "vm.key")
	if code := Run([]string{"dpvm", "keygen", "--out", key, "--master-name", "h1"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("keygen: %d", code)
	}
	short := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--metrics-listen", "0.0.0.0:0"}, "--metrics-listen: address \"0.0.0.0:0\": not a loopback address"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--pprof", ":0"}, "--pprof: address \":0\": not a loopback address"},
		{[]string{"--log-format", "xml", "daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem")}, `--log-format "xml": want text or json`},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--metrics-listen", "0.0.0.0:0", "--metrics-public"}, "--metrics-public: an exposed metrics endpoint needs a token (--metrics-token-file)"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--pprof", ":0", "--pprof-public"}, "--pprof-public: an exposed profiles endpoint needs a token (--pprof-token-file)"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--pprof", "127.0.0.1:0", "--pprof-token-file", short}, "--pprof-token-file " + short + ": the token must be at least 16 characters"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--http", "0.0.0.0:0"}, "--http: address \"0.0.0.0:0\": not a loopback address"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--http", "0.0.0.0:0", "--http-public"}, "--http-public: an exposed status page needs a token"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--http", "127.0.0.1:0", "--http-token-file", short}, "the token must be at least 16 characters"},
		{[]string{"daemon", "--join", "127.0.0.1:1", "--credential", filepath.Join(key, "master.pem"), "--speed", "1", "--http", "127.0.0.1:0"}, "--http: the status page is the master's"},
		{[]string{"daemon", "--master", "--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--detector", "gossip"}, `--detector "gossip": want master or swim`},
	} {
		var stderr syncBuffer
		code := Run(append([]string{"dpvm"}, c.args...), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestDaemonHealthStarting: before the daemon has started (a host still
// joining) the health probe answers 503, so Kubernetes does not count it
// ready.
func TestDaemonHealthStarting(t *testing.T) {
	var h daemonHealth
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", healthPath, nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "starting") {
		t.Errorf("health before start: %d %q", rec.Code, rec.Body.String())
	}
}

// TestMetricsAndProfilesTokens runs `dpvm daemon --master` with token
// files for its metrics and profiles: they answer only requests that
// carry the token, and the health probe needs none.
func TestMetricsAndProfilesTokens(t *testing.T) {
	key := filepath.Join(t.TempDir(), "vm.key")
	if code := Run([]string{"dpvm", "keygen", "--out", key, "--master-name", "h1"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("keygen: %d", code)
	}
	const token = "s3cret-token-0123456789"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run([]string{"dpvm", "daemon", "--master", "--listen", "127.0.0.1:0",
			"--credential", filepath.Join(key, "master.pem"), "--secret", filepath.Join(key, "secret.pem"), "--speed", "1", "--load-source", "static",
			"--metrics-listen", "127.0.0.1:0", "--metrics-token-file", file, "--pprof", "127.0.0.1:0", "--pprof-token-file", file}, io.Discard, &stderr)
	}()
	addr := waitMatch(t, &stderr, regexp.MustCompile(`listening on (\S+)`), done)[1]
	metricsURL := waitMatch(t, &stderr, regexp.MustCompile(`metrics on (http://\S+)`), done)[1]
	pprofURL := waitMatch(t, &stderr, regexp.MustCompile(`profiles on (http://\S+)`), done)[1]
	for _, c := range []struct {
		url, bearer string
		want        int
	}{
		{metricsURL, "", 401},
		{metricsURL, "wrong-token-0123456789", 401},
		{metricsURL, token, 200},
		{metricsURL + "?token=" + token, "", 200},
		{strings.TrimSuffix(metricsURL, "/metrics") + "/events", "", 401},
		{pprofURL, "", 401},
		{pprofURL, token, 200},
	} {
		if code, body := metricstest.Fetch(t, c.url, c.bearer); code != c.want {
			t.Errorf("GET %s (token %q): %d, want %d: %s", c.url, c.bearer, code, c.want, body)
		}
	}
	health := strings.TrimSuffix(metricsURL, "/metrics") + "/healthz"
	if code, body := metricstest.Fetch(t, health, ""); code == 401 {
		t.Errorf("GET %s without a token: %d %s, want no token needed", health, code, body)
	}
	if code := Run([]string{"dpvm", "halt", "--master", addr, "--credential", filepath.Join(key, "admin.pem")}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("halt: %d", code)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("daemon exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop after halt")
	}
}
