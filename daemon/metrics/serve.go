package metrics

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrNotLoopback is returned by CheckLoopback for an address other hosts
// can reach when the operator has not said it may be exposed.
var ErrNotLoopback = errors.New("not a loopback address")

// CheckLoopback accepts addr ("host:port") if its host is a loopback
// address or "localhost", or if public is set: metrics and profiles are
// served to the local machine unless the operator says otherwise. An empty
// host (all interfaces) is not loopback.
func CheckLoopback(addr string, public bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if public {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %q: %w (serve it on 127.0.0.1, or say it may be exposed)", addr, ErrNotLoopback)
}

// Handler serves the metrics at /metrics in the Prometheus text (or
// negotiated) format, from m's own registry, and the move event log as JSON
// at /events.
func Handler(m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg, // promhttp's own error counters land here too
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		moves, seen := m.events.Moves()
		if id := r.URL.Query().Get("move_id"); id != "" {
			moves = m.events.Find(id)
		}
		if moves == nil {
			moves = []Move{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Seen  uint64 `json:"seen"`
			Moves []Move `json:"moves"`
		}{seen, moves})
	})
	return mux
}

// RequireToken wraps h so that every request must carry token, as
// "Authorization: Bearer TOKEN" or ?token=TOKEN (compared in constant
// time); others get 401. An empty token returns h unchanged.
func RequireToken(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.URL.Query().Get("token")
		if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			got = a
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dpvm"`)
			http.Error(w, "a token is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// PprofHandler serves Go's profiles under /debug/pprof/ on a mux of its
// own (never http.DefaultServeMux).
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Server is an HTTP server on its own listener, with its serving goroutine
// tracked: Close stops it and waits for it.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error
}

// Serve listens on addr (":0" ports allowed) and serves h until Close.
// The server's read-header timeout bounds slow clients; a CPU profile or
// trace may run as long as it asks (pprof's ?seconds).
func Serve(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve http: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting requests in progress finish until ctx is
// done, and waits for its goroutine.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	if s.err != nil {
		return fmt.Errorf("serve http: %w", s.err)
	}
	if err != nil {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}
