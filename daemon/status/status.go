package status

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/metrics"
)

//go:embed page.html
var page []byte

// Source is what the page shows: the master daemon (*daemon.Daemon).
type Source interface {
	Hosts() []daemon.HostInfo
	AllTasks(ctx context.Context, all bool) ([]daemon.TaskInfo, error)
	SchedStatus() daemon.SchedStatus
}

// checkpointSource is a Source that keeps its jobs' checkpoint progress
// (the master daemon does).
type checkpointSource interface {
	JobStatuses() []daemon.JobCheckpointStatus
}

// Config configures the status page.
type Config struct {
	// Source is the master daemon.
	Source Source
	// Events are the master's move, decision and job logs (nil: none).
	Events *metrics.Events
	// Token, if not empty, is required of every request: as
	// "Authorization: Bearer TOKEN" or ?token=TOKEN.
	Token string
	// ListTimeout bounds the listing of every host's tasks for one answer
	// (default 2s); a host that does not answer in time is left out, and
	// the answer says so.
	ListTimeout time.Duration
	// Logger receives errors (default: discarded).
	Logger *slog.Logger
}

// State is the whole page's data, as /api/state answers it.
type State struct {
	At        time.Time            `json:"at"`
	Hosts     []daemon.HostInfo    `json:"hosts"`
	Tasks     []daemon.TaskInfo    `json:"tasks"`
	Sched     daemon.SchedStatus   `json:"sched"`
	Moves     []metrics.Move       `json:"moves"`
	Decisions []metrics.SchedEvent `json:"decisions"`
	Jobs      []metrics.JobEvent   `json:"jobs"`
	// Checkpoints is each running job's checkpoint progress, as `dpvm
	// ps` shows it (a Source that keeps none: empty).
	Checkpoints []daemon.JobCheckpointStatus `json:"checkpoints"`
	// Partial says which hosts' tasks are missing, if any.
	Partial string `json:"partial,omitempty"`
}

// Handler serves the page at / and its API under /api/.
func Handler(cfg Config) http.Handler {
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /api/state", s.state)
	mux.HandleFunc("GET /api/hosts", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nonNil(cfg.Source.Hosts())) })
	mux.HandleFunc("GET /api/tasks", func(w http.ResponseWriter, r *http.Request) {
		ts, err := s.tasks(r.Context())
		if err != nil && ts == nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, ts)
	})
	mux.HandleFunc("GET /api/sched", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cfg.Source.SchedStatus()) })
	mux.HandleFunc("GET /api/moves", func(w http.ResponseWriter, r *http.Request) {
		mv, _ := cfg.Events.Moves()
		writeJSON(w, nonNil(mv))
	})
	return s.guard(mux)
}

type server struct{ cfg Config }

// guard refuses requests without the token, when one is set.
func (s *server) guard(h http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return h
	}
	want := []byte(s.cfg.Token)
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

func (s *server) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(page)
}

// tasks lists every host's tasks, exited ones included, within
// ListTimeout.
func (s *server) tasks(ctx context.Context) ([]daemon.TaskInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	ts, err := s.cfg.Source.AllTasks(ctx, true)
	if err != nil {
		s.cfg.Logger.Debug("status page: task list incomplete", "error", err)
	}
	return nonNil(ts), err
}

func (s *server) state(w http.ResponseWriter, r *http.Request) {
	st := State{At: time.Now(), Hosts: nonNil(s.cfg.Source.Hosts()), Sched: s.cfg.Source.SchedStatus()}
	var err error
	st.Tasks, err = s.tasks(r.Context())
	if err != nil {
		st.Partial = err.Error()
	}
	st.Moves, _ = s.cfg.Events.Moves()
	st.Decisions, _ = s.cfg.Events.Sched()
	st.Jobs, _ = s.cfg.Events.Jobs()
	if cs, ok := s.cfg.Source.(checkpointSource); ok {
		st.Checkpoints = cs.JobStatuses()
	}
	st.Moves, st.Decisions, st.Jobs, st.Checkpoints = nonNil(st.Moves), nonNil(st.Decisions), nonNil(st.Jobs), nonNil(st.Checkpoints)
	writeJSON(w, st)
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v) // a client gone mid-answer is no error of ours
}
