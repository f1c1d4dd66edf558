package pki

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Bounds on a revocation list, checked as it is read.
const (
	MaxRevoked     = 1 << 16 // serials in one list
	maxSerialChars = 64      // hex digits of one serial
)

// Revoked is a set of revoked certificate serials (lower-case hex, as
// Peer.Serial). It does not change once made.
type Revoked struct {
	serials map[string]bool
}

// NewRevoked makes a list of serials, checking each.
func NewRevoked(serials []string) (*Revoked, error) {
	if len(serials) > MaxRevoked {
		return nil, fmt.Errorf("%w: %d revoked serials, at most %d", ErrBadCredential, len(serials), MaxRevoked)
	}
	r := &Revoked{serials: make(map[string]bool, len(serials))}
	for _, s := range serials {
		s = strings.ToLower(strings.TrimSpace(s))
		if err := checkSerial(s); err != nil {
			return nil, err
		}
		r.serials[s] = true
	}
	return r, nil
}

func checkSerial(s string) error {
	if s == "" || len(s) > maxSerialChars {
		return fmt.Errorf("%w: serial %q: want 1 to %d hex digits", ErrBadCredential, s, maxSerialChars)
	}
	if _, err := hex.DecodeString(strings.Repeat("0", len(s)%2) + s); err != nil {
		return fmt.Errorf("%w: serial %q is not hex", ErrBadCredential, s)
	}
	return nil
}

// Has reports whether serial is revoked. A nil list revokes nothing.
func (r *Revoked) Has(serial string) bool { return r != nil && r.serials[serial] }

// Serials lists the revoked serials, sorted.
func (r *Revoked) Serials() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.serials))
	for s := range r.serials {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Len is the number of revoked serials.
func (r *Revoked) Len() int {
	if r == nil {
		return 0
	}
	return len(r.serials)
}

// ParseRevoked reads a revocation list: one serial (hex) per line; blank
// lines and lines starting with # are skipped, and so is anything after
// the serial on its line (a comment naming the holder).
func ParseRevoked(rd io.Reader) (*Revoked, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), 4096)
	var serials []string
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		f := strings.Fields(string(line))[0]
		if err := checkSerial(strings.ToLower(f)); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(serials) == MaxRevoked {
			return nil, fmt.Errorf("%w: more than %d revoked serials", ErrBadCredential, MaxRevoked)
		}
		serials = append(serials, f)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCredential, err)
	}
	return NewRevoked(serials)
}

// LoadRevoked reads a revocation list file. A missing file is an empty
// list.
func LoadRevoked(path string) (*Revoked, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return &Revoked{serials: map[string]bool{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("revocation list: %w", err)
	}
	defer f.Close()
	r, err := ParseRevoked(f)
	if err != nil {
		return nil, fmt.Errorf("revocation list %s: %w", path, err)
	}
	return r, nil
}

// AppendRevoked adds a serial to the revocation list file path (made mode
// 0600 if need be), with a comment naming its holder.
func AppendRevoked(path, serial, comment string) error {
	serial = strings.ToLower(serial)
	if err := checkSerial(serial); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	line := serial
	if comment != "" {
		line += " # " + strings.ReplaceAll(comment, "\n", " ")
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return fmt.Errorf("revocation list %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("revocation list %s: %w", path, err)
	}
	return f.Close()
}
