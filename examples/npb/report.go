package npb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Verification outcomes, as NPB prints them.
const (
	Successful   = "SUCCESSFUL"
	Unsuccessful = "UNSUCCESSFUL"
	NotPerformed = "NOT PERFORMED"
)

// Report is the result of one benchmark run.
type Report struct {
	Kernel      string  `json:"kernel"`
	Class       string  `json:"class"`
	NP          int     `json:"np"`
	Hosts       int     `json:"hosts"`
	Iterations  int     `json:"iterations"`
	TimeS       float64 `json:"time_s"`
	Mops        float64 `json:"mops"`
	MopsPerTask float64 `json:"mops_per_task"`
	// Verified is Successful, Unsuccessful or NotPerformed (the values
	// could not be checked); see Verify.
	Verified string `json:"verified"`
	// Reason says why a run is not Successful: the first value outside
	// its tolerance, or what made the check impossible.
	Reason string `json:"reason,omitempty"`
	Values Values `json:"values"`
}

// Values holds a run's verification quantities; only the kernel's own are
// set.
type Values struct {
	// EP: the sums of the Gaussian deviates.
	SX *float64 `json:"sx,omitempty"`
	SY *float64 `json:"sy,omitempty"`
	// CG: the eigenvalue estimate.
	Zeta *float64 `json:"zeta,omitempty"`
	// MG: the residual's L2 norm.
	Rnm2 *float64 `json:"rnm2,omitempty"`
	// FT: the checksum of every iteration, as [re, im].
	Checksums [][2]float64 `json:"checksums,omitempty"`
	// IS: how many of the 50 partial checks passed, and whether the final
	// sort is in order.
	PartialVerified *int  `json:"partial_verified,omitempty"`
	FullVerified    *bool `json:"full_verified,omitempty"`
}

// Passed reports whether the run verified: a run that could not be
// verified (NotPerformed) has not passed.
func (r *Report) Passed() bool { return r.Verified == Successful }

// WriteText prints the report the way NPB does.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n %s Benchmark Completed.\n", strings.ToUpper(r.Kernel))
	fmt.Fprintf(&b, " Class           = %12s\n", r.Class)
	fmt.Fprintf(&b, " Tasks           = %12d\n", r.NP)
	if r.Hosts > 0 {
		fmt.Fprintf(&b, " Hosts           = %12d\n", r.Hosts)
	}
	fmt.Fprintf(&b, " Iterations      = %12d\n", r.Iterations)
	fmt.Fprintf(&b, " Time in seconds = %12.2f\n", r.TimeS)
	fmt.Fprintf(&b, " Mop/s total     = %12.2f\n", r.Mops)
	fmt.Fprintf(&b, " Mop/s/task      = %12.2f\n", r.MopsPerTask)
	v := r.Values
	if v.SX != nil {
		fmt.Fprintf(&b, " Sum X           = %25.15e\n", *v.SX)
	}
	if v.SY != nil {
		fmt.Fprintf(&b, " Sum Y           = %25.15e\n", *v.SY)
	}
	if v.Zeta != nil {
		fmt.Fprintf(&b, " Zeta            = %25.13e\n", *v.Zeta)
	}
	if v.Rnm2 != nil {
		fmt.Fprintf(&b, " L2 norm         = %25.13e\n", *v.Rnm2)
	}
	for i, c := range v.Checksums {
		fmt.Fprintf(&b, " T = %5d     Checksum = %22.12e %22.12e\n", i+1, c[0], c[1])
	}
	if v.PartialVerified != nil {
		fmt.Fprintf(&b, " Partial checks  = %12d\n", *v.PartialVerified)
	}
	if v.FullVerified != nil {
		fmt.Fprintf(&b, " Full verify     = %12t\n", *v.FullVerified)
	}
	fmt.Fprintf(&b, " Verification    = %12s\n", r.Verified)
	if r.Reason != "" {
		fmt.Fprintf(&b, " Reason          = %s\n", r.Reason)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// The root task of a run started by Run reports through the job's output,
// which reaches the caller whichever host the root runs on: one line per
// event, a prefix and a JSON object.
const (
	reportPrefix   = "npb-report "
	progressPrefix = "npb-progress "
)

// Progress is a kernel's progress: Done of Total iterations.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// lineSink receives the job's output, picks out the report and progress
// lines and passes every other line on.
type lineSink struct {
	buf      []byte
	report   *Report
	err      error
	progress func(Progress)
	other    io.Writer
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.line(s.buf[:i])
		s.buf = s.buf[i+1:]
	}
}

func (s *lineSink) line(l []byte) {
	switch {
	case bytes.HasPrefix(l, []byte(reportPrefix)):
		var r Report
		if err := json.Unmarshal(l[len(reportPrefix):], &r); err != nil {
			s.err = fmt.Errorf("npb: malformed report line: %w", err)
			return
		}
		s.report = &r
	case bytes.HasPrefix(l, []byte(progressPrefix)):
		var p Progress
		if err := json.Unmarshal(l[len(progressPrefix):], &p); err == nil && s.progress != nil {
			s.progress(p)
		}
	default:
		if s.other != nil {
			_, _ = s.other.Write(append(l, '\n'))
		}
	}
}

// ParseReport decodes a report written with --json (or a report line's
// JSON), checking that it names a known kernel, class and verdict.
func ParseReport(data []byte) (*Report, error) {
	var r Report
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("npb report: %w", err)
	}
	if _, err := NormKernel(r.Kernel); err != nil {
		return nil, fmt.Errorf("npb report: %w", err)
	}
	if _, err := NormClass(r.Class); err != nil {
		return nil, fmt.Errorf("npb report: %w", err)
	}
	switch r.Verified {
	case Successful, Unsuccessful, NotPerformed:
	default:
		return nil, fmt.Errorf("npb report: verified %q is not %s, %s or %s", r.Verified, Successful, Unsuccessful, NotPerformed)
	}
	return &r, nil
}
