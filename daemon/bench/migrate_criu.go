package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// CRIURow is CRIU's checkpoint and restore of a process holding SizeMiB of
// state, as integration/criu/run.sh measures it and prints it (one JSON
// line per size): medians of Reps wall-clock times of `criu dump` and
// `criu restore` on the same host, and, when the run moved the process
// between hosts too (RemoteS > 0), of the dump, the encrypted copy of the
// images to the other host over ssh, and the restore there.
type CRIURow struct {
	SizeMiB    float64 `json:"size_mib"`
	DumpS      float64 `json:"dump_s"`
	RestoreS   float64 `json:"restore_s"`
	Seconds    float64 `json:"seconds"`
	ImageBytes int64   `json:"image_bytes"`
	Reps       int     `json:"reps"`
	// Version is CRIU's, as it reports it.
	Version string `json:"version,omitempty"`

	// Between hosts: the dump, the copy of the image directory to the
	// other host, the restore there, and the median of their sum, in
	// seconds; all zero when the run measured the same host only.
	RemoteDumpS    float64 `json:"remote_dump_s,omitempty"`
	CopyS          float64 `json:"copy_s,omitempty"`
	RemoteRestoreS float64 `json:"remote_restore_s,omitempty"`
	RemoteS        float64 `json:"remote_s,omitempty"`
	// CopyVia is how the images were copied ("scp" or "tar|ssh"), and
	// Cipher the cipher ssh negotiated for it.
	CopyVia string `json:"copy_via,omitempty"`
	Cipher  string `json:"cipher,omitempty"`
}

// source says where a target's CRIU figure came from: "measured", with
// CRIU's version when known.
func (r CRIURow) source() string {
	if r.Version == "" {
		return "measured"
	}
	return "measured, criu " + r.Version
}

// Remote reports whether r has figures of a move between hosts.
func (r CRIURow) Remote() bool { return r.RemoteS > 0 }

// CRIULine is a line of integration/criu's output, which that program
// writes and ReadCRIU reads: a CRIURow and how it was made.
type CRIULine struct {
	CRIURow
	Tool     string `json:"tool"` // "criu"
	Verified bool   `json:"verified"`
	// Dir is where the images were written; SSH the ssh client's version
	// (between hosts only).
	Dir string `json:"dir,omitempty"`
	SSH string `json:"ssh,omitempty"`
}

// ReadCRIU reads the JSON lines integration/criu/run.sh prints, with or
// without the between-hosts fields (lines of a same-host run have none).
// Blank lines are skipped; a line that is not such a result, a size outside
// 0..MaxMigrateMiB or given twice, a time that is not a positive number,
// between-hosts phases without their total (or a total without phases, or
// a copy method without them), or a run whose restored state was not
// verified is an error wrapping ErrOptions that names the line.
func ReadCRIU(r io.Reader) ([]CRIURow, error) {
	var out []CRIURow
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		bad := func(format string, a ...any) ([]CRIURow, error) {
			return nil, fmt.Errorf("%w: CRIU results, line %d: %s", ErrOptions, n, fmt.Sprintf(format, a...))
		}
		var l CRIULine
		dec := json.NewDecoder(strings.NewReader(text))
		if err := dec.Decode(&l); err != nil {
			return bad("not a JSON object: %v", err)
		}
		if dec.More() {
			return bad("more than one JSON value")
		}
		switch {
		case l.Tool != "criu":
			return bad("tool %q, want \"criu\"", l.Tool)
		case math.IsNaN(l.SizeMiB) || l.SizeMiB < 0 || l.SizeMiB > MaxMigrateMiB:
			return bad("size %v MiB is outside 0..%d MiB", l.SizeMiB, MaxMigrateMiB)
		case !(l.Seconds > 0) || math.IsInf(l.Seconds, 0) || l.DumpS < 0 || l.RestoreS < 0:
			return bad("times dump %v s, restore %v s, total %v s: want positive numbers", l.DumpS, l.RestoreS, l.Seconds)
		case l.RemoteDumpS < 0 || l.CopyS < 0 || l.RemoteRestoreS < 0 || l.RemoteS < 0 || math.IsInf(l.RemoteS, 0):
			return bad("times between hosts dump %v s, copy %v s, restore %v s, total %v s: want positive numbers",
				l.RemoteDumpS, l.CopyS, l.RemoteRestoreS, l.RemoteS)
		case (l.RemoteDumpS > 0 || l.CopyS > 0 || l.RemoteRestoreS > 0 || l.CopyVia != "" || l.Cipher != "") && !l.Remote():
			return bad("between-hosts figures without remote_s, their total")
		case l.Remote() && (l.CopyS <= 0 || l.CopyVia == ""):
			return bad("remote_s %v s without copy_s and copy_via, how the images went to the other host", l.RemoteS)
		case l.Reps < 1:
			return bad("reps %d: want at least one", l.Reps)
		case !l.Verified:
			return bad("the restored state of %v MiB was not verified", l.SizeMiB)
		}
		for _, x := range out {
			if x.SizeMiB == l.SizeMiB {
				return bad("size %v MiB is given twice", l.SizeMiB)
			}
		}
		out = append(out, l.CRIURow)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("CRIU results: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: CRIU results: no result lines", ErrOptions)
	}
	return out, nil
}

// CRIUAt returns the measured CRIU row of one size.
func (r *MigrateReport) CRIUAt(sizeMiB float64) (CRIURow, bool) {
	for _, x := range r.CRIU {
		if x.SizeMiB == sizeMiB {
			return x, true
		}
	}
	return CRIURow{}, false
}

// criuRemote reports whether any of r's CRIU rows was measured between
// hosts.
func (r *MigrateReport) criuRemote() bool {
	for _, x := range r.CRIU {
		if x.Remote() {
			return true
		}
	}
	return false
}
