// Package metrics is a daemon's observability: its Prometheus metrics
// (Metrics, served by Handler from a registry of its own, never the
// global one), a bounded log of recent move events (Events), and the
// HTTP servers that expose them and Go's profiles (Serve, PprofHandler).
//
// The daemon feeds it two ways. On hot paths it bumps atomic counters it
// holds a pointer to (Peer, one per peer host), so that a message costs a
// few atomic additions and no map or label lookup; everything else that
// is a figure of the daemon's state (tasks by state, mailbox depth, the
// sampled load, QUIC connection figures) is read once per scrape from a
// Snapshot the daemon returns. Events that happen rarely (a move, a job
// checkpoint, a scheduler check) are recorded as they end.
//
// Every method is safe on a nil *Metrics and a nil *Peer, and does
// nothing: a daemon without metrics pays a nil check per hook.
//
// README.md lists every metric with its type, labels, meaning and
// cardinality bound.
package metrics
