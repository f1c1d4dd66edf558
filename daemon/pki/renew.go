package pki

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNotRenewal: a credential offered to Renew is not a renewal of the one
// in use (another holder, role or CA).
var ErrNotRenewal = errors.New("not a renewal of the credential in use")

// Current is the credential in use in c's place: c itself, or the newest
// credential Renew put in its place.
func (c *Credential) Current() *Credential {
	if c.live == nil {
		return c
	}
	return c.live.Load()
}

// Renew puts next in c's place: every TLS configuration made from c (or
// from a credential that renewed it) presents next's certificate from the
// next handshake on, and Current returns next. Connections already made
// keep the certificate they were made with. next must name the same
// holder, in the same role, under the same CA; otherwise nothing changes
// and the error wraps ErrNotRenewal. Renew is safe for concurrent use with
// handshakes.
func (c *Credential) Renew(next *Credential) error {
	cur := c.Current()
	switch {
	case next == nil:
		return fmt.Errorf("renew %s: no credential: %w", cur.Peer, ErrNotRenewal)
	case !slices.Equal(cur.ca.Raw, next.ca.Raw):
		return fmt.Errorf("renew %s: issued under another CA: %w", cur.Peer, ErrNotRenewal)
	case next.Role != cur.Role || next.Name != cur.Name || next.Master != cur.Master:
		return fmt.Errorf("renew %s: the new certificate names %s: %w", cur.Peer, next.Peer, ErrNotRenewal)
	}
	if next.Serial == cur.Serial {
		return nil
	}
	next.live = c.live
	c.live.Store(next)
	return nil
}
