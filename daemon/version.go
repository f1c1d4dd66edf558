package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/dpvm/dpvm/task"
)

// Build identifies the binary a daemon runs. Every daemon of a virtual
// machine must run the same build: a task may be started, moved or
// restored on any host, so every host must know the same task types with
// the same code. The master refuses a host whose Version or Registry
// differs from its own.
type Build struct {
	// Version is the main module's version ("(devel)" for a build from a
	// work tree).
	Version string `msgpack:"v" json:"version"`
	// Revision is the VCS revision the binary was built from, with
	// "+dirty" when the work tree had changes ("" when unknown).
	Revision string `msgpack:"r,omitempty" json:"revision,omitempty"`
	// Go is the Go version the binary was built with.
	Go string `msgpack:"g" json:"go"`
	// Registry is a fingerprint of the registered task types: the first
	// 12 hex digits of a SHA-256 over their sorted names.
	Registry string `msgpack:"f" json:"registry"`
	// Types is how many task types are registered.
	Types int `msgpack:"n" json:"types"`
}

var (
	buildOnce sync.Once
	buildInfo Build
)

// ThisBuild describes the running binary. Task types must all be
// registered before its first call (they are, from init functions).
func ThisBuild() Build {
	buildOnce.Do(func() { buildInfo = readBuild() })
	return buildInfo
}

func readBuild() Build {
	b := Build{Version: "(unknown)", Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Version = bi.Main.Version
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "+dirty"
		}
		b.Revision = rev
	}
	types := task.Types()
	h := sha256.New()
	for _, t := range types {
		h.Write([]byte(t))
		h.Write([]byte{0})
	}
	b.Registry = hex.EncodeToString(h.Sum(nil))[:12]
	b.Types = len(types)
	return b
}

// differs says how b differs from want, for a refusal ("" when they agree).
// The revision is not compared: two binaries built from the same source
// in different work trees are the same program.
func (b Build) differs(want Build) string {
	switch {
	case b.Version != want.Version:
		return fmt.Sprintf("version %s, the master runs %s", b.Version, want.Version)
	case b.Registry != want.Registry:
		return fmt.Sprintf("task types %s (%d types), the master's are %s (%d types)", b.Registry, b.Types, want.Registry, want.Types)
	}
	return ""
}
