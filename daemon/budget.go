package daemon

import (
	"fmt"
	"sync"

	"github.com/dpvm/dpvm/daemon/transport"
)

// Defaults of Config.FrameBudget, Config.FrameBudgetPerCert and
// Config.HostWindow.
const (
	DefaultFrameBudget        = 512 << 20
	DefaultFrameBudgetPerCert = 128 << 20
	DefaultHostWindow         = 64 << 20
)

// frameBudget bounds the memory the readers of all this daemon's
// connections (their control streams and bulk lanes) hold in large frame
// bodies (routing.BudgetFrom bytes or more: a control call with a large
// task state, a large message), from before a body is allocated until the
// frame has been handled: at most total bytes together, and at most
// perCert for the connections made with one certificate. A frame that
// does not fit waits, and its stream is not read meanwhile (the sender is
// held back by the transport's flow control); a frame that could never
// fit is refused. Each reader holds one frame at a time, and a frame is
// handled without waiting for another reader, so the waits always end.
// A message frame's decoded messages are counted from then on in their
// mailboxes (Config.MailboxBudget), until their tasks receive them.
type frameBudget struct {
	total, perCert int

	mu     sync.Mutex
	used   int
	byCert map[string]int
	freed  chan struct{} // closed (and replaced) when bytes are released
	peak   int           // the most held at once, for tests and the status
}

func newFrameBudget(total, perCert int) *frameBudget {
	return &frameBudget{total: total, perCert: perCert, byCert: map[string]int{}}
}

// acquire takes n bytes for a frame of a connection of cert, waiting for
// room until conn or stop is closed.
func (b *frameBudget) acquire(cert string, n int, conn, stop <-chan struct{}) error {
	if n > b.perCert || n > b.total {
		return fmt.Errorf("%d bytes, more than the frame budget (%d bytes, %d a certificate): %w", n, b.total, b.perCert, ErrLimit)
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.total && b.byCert[cert]+n <= b.perCert {
			b.used += n
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

// release gives back n bytes of cert's.
func (b *frameBudget) release(cert string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
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
type connBudget struct {
	b          *frameBudget
	cert       string
	conn, stop <-chan struct{}
}

func (c connBudget) Acquire(n int) error { return c.b.acquire(c.cert, n, c.conn, c.stop) }
func (c connBudget) Release(n int) {
	if n > 0 {
		c.b.release(c.cert, n)
	}
}

// budgetFor returns the budget the reader of a connection of cert uses.
func (d *Daemon) budgetFor(conn transport.Conn) connBudget {
	// By certificate, as Config.MaxConnsPerPeer counts connections.
	return connBudget{b: d.frames, cert: conn.Peer().String(), conn: conn.Done(), stop: d.ctx.Done()}
}
