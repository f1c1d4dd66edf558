package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/metrics"
)

// The daemon's observability flags: metrics and profiles are served over
// HTTP, to the local machine unless the operator says otherwise.
var (
	metricsListenFlag = &cli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics at http://ADDR/metrics (and recent moves as JSON at /events); loopback only unless --metrics-public (default: off)"}
	metricsPublicFlag = &cli.BoolFlag{Name: "metrics-public", Usage: "let --metrics-listen bind an address other hosts can reach"}
	pprofFlag         = &cli.StringFlag{Name: "pprof", Usage: "serve Go's profiles at http://ADDR/debug/pprof/; loopback only unless --pprof-public (default: off)"}
	pprofPublicFlag   = &cli.BoolFlag{Name: "pprof-public", Usage: "let --pprof bind an address other hosts can reach"}
)

// observeFlags are the daemon command's observability flags.
func observeFlags() []cli.Flag {
	return []cli.Flag{metricsListenFlag, metricsPublicFlag, pprofFlag, pprofPublicFlag}
}

// observers are the HTTP servers a daemon's observability flags started.
type observers struct {
	servers []*metrics.Server
}

// startObservers checks the observability flags and starts the servers
// they ask for: metrics from m (made by the caller when --metrics-listen
// is given), profiles. Each one's address is printed on w.
func startObservers(c *cli.Context, m *metrics.Metrics, w io.Writer) (*observers, error) {
	o := &observers{}
	type srv struct {
		flag, addr string
		public     bool
		h          func() http.Handler
		path, what string
	}
	for _, s := range []srv{
		{"--metrics-listen", c.String("metrics-listen"), c.Bool("metrics-public"), func() http.Handler { return metrics.Handler(m) }, "/metrics", "metrics"},
		{"--pprof", c.String("pprof"), c.Bool("pprof-public"), metrics.PprofHandler, "/debug/pprof/", "profiles"},
	} {
		if s.addr == "" {
			continue
		}
		if err := metrics.CheckLoopback(s.addr, s.public); err != nil {
			o.close()
			return nil, fmt.Errorf("%s: %w", s.flag, err)
		}
		server, err := metrics.Serve(s.addr, s.h())
		if err != nil {
			o.close()
			return nil, fmt.Errorf("%s: %w", s.flag, err)
		}
		o.servers = append(o.servers, server)
		fmt.Fprintf(w, "dpvm daemon: %s on http://%s%s\n", s.what, server.Addr(), s.path)
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
