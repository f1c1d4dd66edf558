// Package status is the master daemon's live status page: a web page that
// shows the virtual machine's hosts (load, users, speed, memory, tasks),
// its tasks (host, job, state, class, size), and timelines of the moves,
// the Dynamic-SED decisions with their reasons, and the job checkpoints
// and rollbacks. The page updates itself by polling a JSON API whose
// shapes are the command line's --json ones where they exist: /api/hosts
// is `dpvm conf --json`, /api/tasks `dpvm ps -a --json`, /api/sched `dpvm
// sched status --json`.
//
// It is served on loopback unless the operator exposes it, and then only
// with a token (Config.Token): a bearer token in the Authorization header,
// or the token query parameter that the page carries along.
package status
