package daemon

import (
	"fmt"
	"sync"

	"github.com/dpvm/dpvm/daemon/transport"
)

// Defaults of Config.TrafficBudget, Config.FrameBudgetPerCert and
// Config.HostWindow, and the parts of Config.TrafficBudget its other
// budgets take when they are not set.
const (
	DefaultTrafficBudget      = 2 << 30
	DefaultFrameBudget        = DefaultTrafficBudget / 4
	DefaultFrameBudgetPerCert = 128 << 20
	DefaultHostWindow         = 64 << 20
	// MinConnWindow is the least QUIC receive window a connection gets
	// from Config.TrafficBudget: a smaller share lowers Config.MaxConns
	// instead.
	MinConnWindow = 128 << 10
	// MaxConnWindow is the largest QUIC receive window a connection gets
	// from Config.TrafficBudget.
	MaxConnWindow = 32 << 20
)

// callOverhead is what a call from a client costs in the frame budget
// besides its body: the goroutine that serves it and its decoded
// arguments' headers.
const callOverhead = 16 << 10

// frameBudget bounds the memory the readers of all this daemon's
// connections (their control streams and bulk lanes) hold in large frame
// bodies (routing.BudgetFrom bytes or more: a control call with a large
// task state, a large message), from before a body is allocated until the
// frame has been handled, and the memory of clients' calls until they are
// answered: at most total bytes together, at most perCert for the
// connections made with one certificate, and at most clientCap for
// clients' calls. A frame that does not fit waits, and its stream is not
// read meanwhile (the sender is held back by the transport's flow
// control); a frame that could never fit is refused.
//
// The waits always end: each reader holds one frame at a time, and a
// daemon's frame is handled without waiting for another reader; a
// client's call may wait for frames from daemons (a host's answer), but
// clients' calls hold at most clientCap, which leaves room for a daemon's
// largest frame (Config.MaxFrame), and never for other clients' frames. A
// message frame's decoded messages are counted from then on in their
// mailboxes (Config.MailboxBudget), until their tasks receive them.
type frameBudget struct {
	total, perCert, clientCap int

	mu      sync.Mutex
	used    int
	clients int // of used, what clients' frames and calls hold
	byCert  map[string]int
	freed   chan struct{} // closed (and replaced) when bytes are released
	peak    int           // the most held at once, for tests and the status
}

func newFrameBudget(total, perCert, clientCap int) *frameBudget {
	return &frameBudget{total: total, perCert: perCert, clientCap: clientCap, byCert: map[string]int{}}
}

// take takes n bytes for a frame or a call of a connection of cert (a
// client's, when client), waiting for room until conn or stop is closed.
func (b *frameBudget) take(cert string, client bool, n int, conn, stop <-chan struct{}) error {
	if n > b.perCert || n > b.total || client && n > b.clientCap {
		return fmt.Errorf("%d bytes, more than the frame budget (%d bytes, %d a certificate, %d for clients' calls): %w",
			n, b.total, b.perCert, b.clientCap, ErrLimit)
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.total && b.byCert[cert]+n <= b.perCert && (!client || b.clients+n <= b.clientCap) {
			b.used += n
			if client {
				b.clients += n
			}
			b.byCert[cert] += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			return nil
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-conn:
			return fmt.Errorf("waiting for the frame budget: %w", transport.ErrClosed)
		case <-stop:
			return fmt.Errorf("waiting for the frame budget: %w", transport.ErrClosed)
		}
	}
}

// give gives back n bytes taken for cert (a client's, when client).
func (b *frameBudget) give(cert string, client bool, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if client {
		b.clients -= n
	}
	if b.byCert[cert] -= n; b.byCert[cert] <= 0 {
		delete(b.byCert, cert)
	}
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
}

// held reports the bytes held now and the most held at once.
func (b *frameBudget) held() (now, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// connBudget is a connection's share of a frameBudget (routing.Budget):
// its certificate's, waiting until the connection or the daemon ends.
// One reader uses it, from one goroutine: held and kept are that reader's.
type connBudget struct {
	b          *frameBudget
	cert       string
	client     bool // a client's connection: its frames are calls
	conn, stop <-chan struct{}
	held       int  // what the reader's current frame holds
	kept       bool // the current frame's bytes went to its call (keep)
}

// Acquire takes n bytes for the reader's next frame.
func (c *connBudget) Acquire(n int) error {
	if err := c.b.take(c.cert, c.client, n, c.conn, c.stop); err != nil {
		return err
	}
	c.held = n
	return nil
}

// Release gives back the reader's frame's bytes, unless its call keeps
// them.
func (c *connBudget) Release(n int) {
	kept := c.kept
	c.held, c.kept = 0, false
	if n > 0 && !kept {
		c.b.give(c.cert, c.client, n)
	}
}

// keep hands the bytes the reader's current frame holds (none for a frame
// under routing.BudgetFrom) to the call it carries: the reader does not
// give them back when it reads on, and the frame's buffer is not reused;
// the call gives them back (give) when it is answered.
func (c *connBudget) keep() int {
	if c.held == 0 {
		return 0
	}
	c.kept = true
	return c.held
}

// callHold is what a client's call holds of the frame budget until it is
// answered.
type callHold struct {
	c *connBudget
	n int
}

// give gives the call's bytes back.
func (h callHold) give() {
	if h.n > 0 {
		h.c.b.give(h.c.cert, h.c.client, h.n)
	}
}

// holdCall returns what a client's call of body, read from the frame
// the reader holds now, keeps of the frame budget until it is answered,
// and the body to serve it from: a frame of routing.BudgetFrom bytes or
// more keeps its bytes and its buffer; a smaller one, read into the
// reader's reused buffer, is copied, and takes its size plus
// callOverhead, waiting for them (the reader holds nothing meanwhile).
func (c *connBudget) holdCall(body []byte) (callHold, []byte, error) {
	if n := c.keep(); n > 0 {
		return callHold{c, n}, body, nil
	}
	n := len(body) + callOverhead
	if err := c.b.take(c.cert, true, n, c.conn, c.stop); err != nil {
		return callHold{}, nil, err
	}
	return callHold{c, n}, append([]byte(nil), body...), nil
}

// budgetFor returns the budget the reader of a connection uses.
func (d *Daemon) budgetFor(conn transport.Conn) *connBudget {
	// By certificate, as Config.MaxConnsPerPeer counts connections.
	return &connBudget{b: d.frames, cert: conn.Peer().String(), client: conn.Peer().Role.Client(), conn: conn.Done(), stop: d.ctx.Done()}
}

// trafficParts sets the parts of TrafficBudget that are not set from it:
// FrameBudget a quarter, MailboxBudget a half, and the QUIC receive
// windows of MaxConns connections a quarter (Transport.ConnWindow and
// StreamWindow, and MaxConns when not set).
func (c *Config) trafficParts() {
	if c.TrafficBudget <= 0 {
		c.TrafficBudget = DefaultTrafficBudget
	}
	t := c.TrafficBudget
	if c.FrameBudget <= 0 {
		c.FrameBudget = int(min(t/4, 1<<40))
	}
	if c.MailboxBudget <= 0 {
		c.MailboxBudget = t / 2
	}
	windows := t / 4
	if c.Transport.ConnWindow == 0 {
		conns := int64(c.MaxConns)
		if conns <= 0 {
			conns = DefaultMaxConns
		}
		c.Transport.ConnWindow = uint64(min(max(windows/conns, MinConnWindow), MaxConnWindow))
	}
	if c.MaxConns <= 0 {
		c.MaxConns = int(min(max(windows/int64(c.Transport.ConnWindow), 1), DefaultMaxConns))
	}
	if c.Transport.StreamWindow == 0 || c.Transport.StreamWindow > c.Transport.ConnWindow {
		// A stream never receives more than its connection.
		c.Transport.StreamWindow = c.Transport.ConnWindow
	}
}
