package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxHostlist bounds how many names a hostlist may expand to: a list comes
// from the environment, and a range such as n[0-999999999] must fail before
// it allocates.
const maxHostlist = 1 << 16

// errHostlist is returned for a hostlist that is not Slurm's syntax.
var errHostlist = errors.New("bad hostlist")

// expandHostlist expands Slurm's compressed hostlist syntax, as in
// SLURM_JOB_NODELIST, into host names in order: "node[01-03,07],gpu1" is
// node01 node02 node03 node07 gpu1. A name may hold several bracketed
// groups ("r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2); a range keeps the width of
// its zero-padded lower bound. It is pure: the same input, the same names.
func expandHostlist(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", errHostlist)
	}
	var out []string
	for _, item := range splitTop(s) {
		if item == "" {
			return nil, fmt.Errorf("%w %q: empty name", errHostlist, s)
		}
		names, err := expandName(item, maxHostlist-len(out))
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", errHostlist, s, err)
		}
		out = append(out, names...)
		if len(out) > maxHostlist {
			return nil, fmt.Errorf("%w %q: more than %d names", errHostlist, s, maxHostlist)
		}
	}
	return out, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// expandName expands one name with any number of bracketed groups into at
// most limit names.
func expandName(item string, limit int) ([]string, error) {
	names := []string{""}
	for item != "" {
		open := strings.IndexByte(item, '[')
		if open < 0 {
			if strings.IndexByte(item, ']') >= 0 {
				return nil, fmt.Errorf("unmatched ']' in %q", item)
			}
			for i := range names {
				names[i] += item
			}
			break
		}
		end := strings.IndexByte(item[open:], ']')
		if end < 0 {
			return nil, fmt.Errorf("unmatched '[' in %q", item)
		}
		end += open
		prefix, body := item[:open], item[open+1:end]
		if strings.ContainsAny(prefix, "]") || strings.ContainsAny(body, "[") {
			return nil, fmt.Errorf("nested or stray bracket in %q", item)
		}
		vals, err := expandRanges(body, limit)
		if err != nil {
			return nil, err
		}
		if len(names)*len(vals) > limit {
			return nil, fmt.Errorf("more than %d names", maxHostlist)
		}
		next := make([]string, 0, len(names)*len(vals))
		for _, n := range names {
			for _, v := range vals {
				next = append(next, n+prefix+v)
			}
		}
		names = next
		item = item[end+1:]
	}
	return names, nil
}

// expandRanges expands the inside of a bracket, "01-03,07", into at most
// limit values.
func expandRanges(body string, limit int) ([]string, error) {
	if body == "" {
		return nil, errors.New("empty brackets")
	}
	var vals []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !digits(lo) || (isRange && !digits(hi)) {
			return nil, fmt.Errorf("range %q: want N or N-M of digits", r)
		}
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("range %q: number too large", r)
		}
		if b < a {
			return nil, fmt.Errorf("range %q: decreasing", r)
		}
		if b-a >= uint64(limit-len(vals)) {
			return nil, fmt.Errorf("more than %d names", maxHostlist)
		}
		width := len(lo)
		for v := a; v <= b; v++ {
			vals = append(vals, fmt.Sprintf("%0*d", width, v))
		}
	}
	return vals, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
