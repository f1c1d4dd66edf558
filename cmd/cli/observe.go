package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/status"
)

// observeFlags are the daemon command's observability flags: metrics,
// profiles and the status page are served over HTTP, to the local machine
// unless the operator says otherwise. Made per command tree, as urfave/cli
// keeps state in its flags.
func observeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics at http://ADDR/metrics (recent moves as JSON at /events, the daemon's health at /healthz); loopback only unless --metrics-public (default: off)"},
		&cli.BoolFlag{Name: "metrics-public", Usage: "let --metrics-listen bind an address other hosts can reach (needs --metrics-token-file)"},
		&cli.StringFlag{Name: "metrics-token-file", Usage: "file whose first line is the token the metrics and events require (Authorization: Bearer TOKEN, or ?token=TOKEN; /healthz needs none)"},
		&cli.StringFlag{Name: "pprof", Usage: "serve Go's profiles at http://ADDR/debug/pprof/; loopback only unless --pprof-public (default: off)"},
		&cli.BoolFlag{Name: "pprof-public", Usage: "let --pprof bind an address other hosts can reach (needs --pprof-token-file)"},
		&cli.StringFlag{Name: "pprof-token-file", Usage: "file whose first line is the token the profiles require (Authorization: Bearer TOKEN, or ?token=TOKEN)"},
		&cli.StringFlag{Name: "http", Usage: "master: serve the live status page at http://ADDR/; loopback only unless --http-public (default: off)"},
		&cli.BoolFlag{Name: "http-public", Usage: "let --http bind an address other hosts can reach (needs --http-token-file)"},
		&cli.StringFlag{Name: "http-token-file", Usage: "file whose first line is the token the status page requires (Authorization: Bearer TOKEN, or ?token=TOKEN)"},
	}
}

// statusToken checks the status page's flags and returns its token ("" for
// none): an address other hosts can reach needs --http-public and a token.
func statusToken(c *cli.Context) (string, error) {
	addr := c.String("http")
	if addr == "" {
		return "", nil
	}
	if !c.Bool("master") {
		return "", errors.New("--http: the status page is the master's")
	}
	if err := metrics.CheckLoopback(addr, c.Bool("http-public")); err != nil {
		return "", fmt.Errorf("--http: %w", err)
	}
	return endpointToken(c, "http", "an exposed status page")
}

// endpointToken reads the token of an HTTP endpoint (flag NAME-token-file;
// "" for none): one exposed to other hosts (NAME-public) needs one, as
// the status page does.
func endpointToken(c *cli.Context, name, what string) (string, error) {
	token := ""
	if f := c.String(name + "-token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("--%s-token-file: %w", name, err)
		}
		token, _, _ = strings.Cut(string(b), "\n")
		token = strings.TrimSpace(token)
		if len(token) < 16 {
			return "", fmt.Errorf("--%s-token-file %s: the token must be at least 16 characters", name, f)
		}
	}
	if c.Bool(name+"-public") && token == "" {
		return "", fmt.Errorf("--%s-public: %s needs a token (--%s-token-file)", name, what, name)
	}
	return token, nil
}

// startStatus starts the master's status page, if --http asks for it.
func (o *observers) startStatus(c *cli.Context, d *daemon.Daemon, token string, w io.Writer) error {
	addr := c.String("http")
	if addr == "" {
		return nil
	}
	s, err := metrics.Serve(addr, status.Handler(status.Config{Source: d, Events: d.Metrics().Events(), Token: token, Logger: loggerFrom(c)}))
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	o.servers = append(o.servers, s)
	fmt.Fprintf(w, "dpvm daemon: status page on http://%s/\n", s.Addr())
	return nil
}

// observers are the HTTP servers a daemon's observability flags started.
type observers struct {
	servers []*metrics.Server
	health  daemonHealth
}

// healthPath is where the metrics server answers health probes.
const healthPath = "/healthz"

// daemonHealth answers health probes: 200 "ok" while the daemon runs,
// 503 before it has started (a host not yet joined) and once it stopped.
type daemonHealth struct{ d atomic.Pointer[daemon.Daemon] }

func (h *daemonHealth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	d := h.d.Load()
	if d == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	select {
	case <-d.Done():
		http.Error(w, "stopped", http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

// started tells the health probes that d runs.
func (o *observers) started(d *daemon.Daemon) { o.health.d.Store(d) }

// endpoint is an HTTP endpoint of the daemon besides the status page:
// its address flag, the name of its -public and -token-file flags, what it
// serves and the path printed when it starts.
type endpoint struct{ flag, name, what, path string }

var endpoints = []endpoint{
	{"metrics-listen", "metrics", "metrics", "/metrics"},
	{"pprof", "pprof", "profiles", "/debug/pprof/"},
}

// endpointTokens checks the flags of the endpoints asked for, as the
// daemon does before it starts: an address other hosts can reach needs its
// -public flag and a token read from its -token-file. It returns each
// endpoint's token ("" for none) by flag.
func endpointTokens(c *cli.Context) (map[string]string, error) {
	tokens := map[string]string{}
	for _, e := range endpoints {
		addr := c.String(e.flag)
		if addr == "" {
			continue
		}
		if err := metrics.CheckLoopback(addr, c.Bool(e.name+"-public")); err != nil {
			return nil, fmt.Errorf("--%s: %w", e.flag, err)
		}
		token, err := endpointToken(c, e.name, "an exposed "+e.what+" endpoint")
		if err != nil {
			return nil, err
		}
		tokens[e.flag] = token
	}
	return tokens, nil
}

// startObservers checks the observability flags and starts the servers
// they ask for: metrics from m (made by the caller when --metrics-listen
// is given), with the daemon's health at /healthz; profiles. Each one's
// address is printed on w.
func startObservers(c *cli.Context, m *metrics.Metrics, w io.Writer) (*observers, error) {
	tokens, err := endpointTokens(c)
	if err != nil {
		return nil, err
	}
	o := &observers{}
	// Made only for the endpoints asked for: m is nil without metrics.
	handlers := map[string]func() http.Handler{
		"metrics-listen": func() http.Handler {
			// Health probes need no token; metrics and events do, when one is set.
			mux := http.NewServeMux()
			mux.Handle("GET "+healthPath, &o.health)
			mux.Handle("/", metrics.RequireToken(metrics.Handler(m), tokens["metrics-listen"]))
			return mux
		},
		"pprof": func() http.Handler { return metrics.RequireToken(metrics.PprofHandler(), tokens["pprof"]) },
	}
	for _, e := range endpoints {
		addr := c.String(e.flag)
		if addr == "" {
			continue
		}
		server, err := metrics.Serve(addr, handlers[e.flag]())
		if err != nil {
			o.close()
			return nil, fmt.Errorf("--%s: %w", e.flag, err)
		}
		o.servers = append(o.servers, server)
		fmt.Fprintf(w, "dpvm daemon: %s on http://%s%s\n", e.what, server.Addr(), e.path)
	}
	return o, nil
}

// close stops the servers, giving requests in progress a moment.
func (o *observers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range o.servers {
		_ = s.Close(ctx)
	}
}
