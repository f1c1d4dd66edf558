package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ErrBadCommand is a Command or a Dedup snapshot that cannot be read.
var ErrBadCommand = errors.New("replica: bad command")

// Command is what a client proposes through Dedup: its client ID, its
// sequence number (from 1, one more for each new command; a retry of a
// command keeps its number) and the command for the state machine.
type Command struct {
	Client uint64
	Seq    uint64
	Op     []byte
}

// AppendCommand appends c's encoding to b: uvarint Client, uvarint Seq,
// then Op to the end.
func AppendCommand(b []byte, c Command) []byte {
	b = binary.AppendUvarint(b, c.Client)
	b = binary.AppendUvarint(b, c.Seq)
	return append(b, c.Op...)
}

// ParseCommand decodes a Command; Op aliases b. Client and Seq must be
// non-zero.
func ParseCommand(b []byte) (Command, error) {
	client, n := binary.Uvarint(b)
	if n <= 0 {
		return Command{}, fmt.Errorf("%w: client ID", ErrBadCommand)
	}
	seq, m := binary.Uvarint(b[n:])
	if m <= 0 {
		return Command{}, fmt.Errorf("%w: sequence number", ErrBadCommand)
	}
	if client == 0 || seq == 0 {
		return Command{}, fmt.Errorf("%w: client %d seq %d", ErrBadCommand, client, seq)
	}
	return Command{Client: client, Seq: seq, Op: b[n+m:]}, nil
}

// Dedup is a StateMachine that runs each client's command once however
// often it is applied: its entries are Commands, and it keeps each
// client's session, the latest sequence number it ran and its result.
// A command at that number again is a retry (a client that did not hear
// its answer proposes it again, perhaps to a new leader, and both copies
// may commit): it returns the kept result without running the command.
// An older number returns nil. A client has one command outstanding at
// a time (it proposes Seq+1 once Seq is answered), so a retry is always
// of its latest. An entry that is not a Command returns nil and changes
// nothing, on every replica alike.
//
// Sessions are kept for every client that ever proposed: a master's
// clients are its hosts and the VM's users, few and long-lived.
type Dedup struct {
	inner    StateMachine
	sessions map[uint64]session
}

type session struct {
	seq    uint64
	result []byte
}

// NewDedup wraps inner, which sees each Command's Op once.
func NewDedup(inner StateMachine) *Dedup {
	return &Dedup{inner: inner, sessions: map[uint64]session{}}
}

// Last returns the latest sequence number Dedup ran for client (0: none).
func (d *Dedup) Last(client uint64) uint64 { return d.sessions[client].seq }

// Apply runs the Command in entry unless it ran already; see Dedup.
func (d *Dedup) Apply(index uint64, entry []byte) []byte {
	c, err := ParseCommand(entry)
	if err != nil {
		return nil
	}
	s := d.sessions[c.Client]
	switch {
	case c.Seq == s.seq:
		return s.result
	case c.Seq < s.seq:
		return nil
	}
	res := d.inner.Apply(index, c.Op)
	d.sessions[c.Client] = session{seq: c.Seq, result: res}
	return res
}

// dedupVersion is the first byte of a Dedup snapshot. Append only.
const dedupVersion = 1

// Snapshot encodes the sessions (dedupVersion, uvarint count, then each
// client in ascending order: uvarint client, uvarint seq, uvarint result
// length, result) followed by the inner state machine's snapshot.
func (d *Dedup) Snapshot() ([]byte, error) {
	inner, err := d.inner.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("replica: dedup: %w", err)
	}
	clients := make([]uint64, 0, len(d.sessions))
	for c := range d.sessions {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	b := []byte{dedupVersion}
	b = binary.AppendUvarint(b, uint64(len(clients)))
	for _, c := range clients {
		s := d.sessions[c]
		b = binary.AppendUvarint(b, c)
		b = binary.AppendUvarint(b, s.seq)
		b = binary.AppendUvarint(b, uint64(len(s.result)))
		b = append(b, s.result...)
	}
	return append(b, inner...), nil
}

// Restore replaces the sessions and the inner state with a Snapshot's;
// bytes it cannot read are refused (ErrBadCommand) and change nothing.
// Every count and length is checked against the bytes left before
// anything is allocated.
func (d *Dedup) Restore(b []byte) error {
	if len(b) == 0 || b[0] != dedupVersion {
		return fmt.Errorf("%w: dedup snapshot version", ErrBadCommand)
	}
	b = b[1:]
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("%w: dedup snapshot: %s", ErrBadCommand, what)
		}
		b = b[n:]
		return v, nil
	}
	count, err := next("count")
	if err != nil {
		return err
	}
	if count > uint64(len(b))/3 { // a session takes three bytes at least
		return fmt.Errorf("%w: dedup snapshot: %d sessions in %d bytes", ErrBadCommand, count, len(b))
	}
	sessions := make(map[uint64]session, count)
	var prev uint64
	for i := range count {
		c, err := next("client")
		if err != nil {
			return err
		}
		if i > 0 && c <= prev {
			return fmt.Errorf("%w: dedup snapshot: client %d after %d", ErrBadCommand, c, prev)
		}
		prev = c
		seq, err := next("seq")
		if err != nil {
			return err
		}
		n, err := next("result length")
		if err != nil {
			return err
		}
		if n > uint64(len(b)) {
			return fmt.Errorf("%w: dedup snapshot: result of %d bytes in %d", ErrBadCommand, n, len(b))
		}
		var res []byte
		if n > 0 {
			res = slices.Clone(b[:n])
		}
		b = b[n:]
		sessions[c] = session{seq: seq, result: res}
	}
	if err := d.inner.Restore(slices.Clone(b)); err != nil {
		return fmt.Errorf("replica: dedup: %w", err)
	}
	d.sessions = sessions
	return nil
}
