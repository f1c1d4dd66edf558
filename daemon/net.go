package daemon

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/task"
)

// reasonLeft is why a host that closed its connection cleanly is deleted.
const reasonLeft = "left the virtual machine"

// MasterID is the host ID of the master daemon.
const MasterID task.HostID = 1

// Network errors.
var (
	// ErrMasterLost: the connection to the master daemon was lost; the
	// daemon stops.
	ErrMasterLost = errors.New("lost the master daemon")
	// ErrRefused: the master refused to let this daemon join.
	ErrRefused = errors.New("refused by the master")
	// ErrNotConnected: no connection to the host could be made.
	ErrNotConnected = errors.New("host unreachable")
)

// network is a daemon's connections to the other daemons and its view of
// the virtual machine's hosts.
type network struct {
	tr transport.Endpoint
	id *pki.Credential

	mu    sync.Mutex
	peers map[task.HostID]*peer
	// retiring are the connections to hosts that lost a tie to another
	// connection (attach) and still carry calls (retire.go).
	retiring map[*peer]bool
	dialing  map[task.HostID]chan struct{}
	clients  map[*peer]bool
	hosts    map[task.HostID]*HostInfo
	master   *peer // hosts: the connection to the master
	// list is the host list as versioned deltas (hostlist.go): at the
	// master, the hosts it has announced; at a host, the list as it
	// heard it. deltas are the master's changes not yet sent, sent under
	// sendMu (taken before mu); a host applies what it hears under
	// applyMu (taken before mu). listSent is when the master last sent
	// each host the whole list; wantV the newest version a host heard
	// the master's list is at, asked when it last asked for it.
	list     *hostlist.List
	deltas   []hostlist.Delta
	sendMu   sync.Mutex
	applyMu  sync.Mutex
	listSent map[task.HostID]time.Time
	wantV    uint64
	asked    time.Time
	// listID names the master's list: drawn by the master at its start,
	// and heard by a host in the answer to its registration.
	listID uint64
	// listsAsked counts the whole lists the master sent hosts that asked
	// (a gap in their deltas, or behind it), not counting the answers
	// to registrations.
	listsAsked atomic.Int64
	calls      pendingCalls
	// Master only.
	nextHost task.HostID
	joined   map[task.HostID]time.Time
	mem      *membership
	// pingsIn counts the liveness pings received (the master: one per
	// host per heartbeat under the master detector, none under swim).
	pingsIn atomic.Int64
	// swimChecks counts the checks the master's swim referee sent.
	swimChecks atomic.Int64
}

// startNetwork listens and, for a host daemon, joins the master.
func (d *Daemon) startNetwork(ctx context.Context) error {
	c := &d.cfg
	id := c.Credential
	if c.Advertise != "" {
		if err := checkAdvertise(c.Advertise); err != nil {
			return err
		}
	}
	tcfg := c.Transport
	tcfg.Refused = func(addr, why string) { d.refused(addr, pki.Peer{}, why) }
	tr, err := c.Network.Listen(c.Listen, id, tcfg)
	if err != nil {
		return err
	}
	n := &network{tr: tr, id: id, peers: map[task.HostID]*peer{}, retiring: map[*peer]bool{}, dialing: map[task.HostID]chan struct{}{},
		clients: map[*peer]bool{}, hosts: map[task.HostID]*HostInfo{},
		joined: map[task.HostID]time.Time{}, list: hostlist.New(), listSent: map[task.HostID]time.Time{}}
	d.nw = n
	d.self.Addr = tr.Addr()
	if c.Advertise != "" {
		d.self.Addr = c.Advertise
	}
	if c.Master {
		d.self.Master = true
		n.nextHost = MasterID + 1
		self := d.self
		n.hosts[MasterID] = &self
		n.list.Add(entryOf(self))
		n.listID = rand.Uint64() | 1
	} else if d.swimOn() {
		// Before the join: other hosts may probe this one as soon as it
		// is announced.
		d.sw = &swimHost{in: make(chan swimIn, swimInBuffer), dialing: map[task.HostID]bool{}}
	}
	if err := d.credentialCurrent(time.Now()); err != nil {
		tr.Close()
		return err
	}
	if !c.Master {
		if err := d.join(ctx); err != nil {
			tr.Close()
			return err
		}
	}
	if c.Master {
		if err := d.loadRevoked(); err != nil {
			tr.Close()
			return err
		}
		if err := d.startMembership(); err != nil {
			tr.Close()
			return err
		}
	}
	d.watchCredential()
	d.checkExpiry(time.Now())
	d.refreshSample(time.Now())
	d.goFunc(d.acceptLoop)
	d.goFunc(d.heartbeatLoop)
	if !c.Master {
		d.goFunc(d.reportOnKick)
	}
	if d.sw != nil {
		d.goFunc(d.swimLoop)
	}
	if c.Master {
		d.goFunc(d.runTimers)
	}
	if c.Master && c.Sched.Period > 0 {
		d.goFunc(d.schedLoop)
	}
	return nil
}

// join connects to the master and takes the host ID it assigns; a busy
// master, or one that does not answer in time, is tried again (joinRetry).
func (d *Daemon) join(ctx context.Context) error {
	var g *greeting
	err := d.joinRetry(ctx, d.cfg.JoinCallTimeout, func(ctx context.Context) error {
		var err error
		g, err = greet(ctx, d.nw.tr, d.cfg.Join, &hello{Name: d.cfg.Name, Addr: d.self.Addr, Advertised: d.cfg.Advertise != "",
			Dialled: d.cfg.Join, Join: true, Info: d.self, Detector: d.helloDetector(), RouteProto: d.helloRoutes()}, d.cfg.MaxFrame)
		return err
	})
	if err != nil {
		return fmt.Errorf("join %s: %w", d.cfg.Join, err)
	}
	conn, st, r, h := g.conn, g.st, g.r, g.reply
	if h.Version != ProtocolVersion || h.Assigned == 0 || h.Host != MasterID {
		conn.Close("bad handshake")
		return fmt.Errorf("join %s: unexpected answer (version %d, host %v): %w", d.cfg.Join, h.Version, h.Assigned, ErrRefused)
	}
	if mp := conn.Peer(); mp.Role != pki.RoleDaemon || !mp.Master {
		conn.Close("not the master")
		return fmt.Errorf("join %s: it answered with a certificate that is not the master's (%s): %w", d.cfg.Join, mp, ErrRefused)
	}
	if len(h.Secrets) > 0 && d.secret.Load() == nil {
		ring, err := pki.KeyringOf(h.Secrets)
		if err != nil {
			conn.Close("bad cluster secret")
			return fmt.Errorf("join %s: the cluster secret: %w", d.cfg.Join, err)
		}
		d.secret.Store(ring)
	}
	if len(h.Revoked) > 0 {
		rv, err := pki.NewRevoked(h.Revoked)
		if err != nil {
			conn.Close("bad revocation list")
			return fmt.Errorf("join %s: the revocation list: %w", d.cfg.Join, err)
		}
		d.revoked.Store(rv)
	}
	if d.secret.Load() == nil {
		conn.Close("no cluster secret")
		return fmt.Errorf("join %s: the master handed no cluster secret: %w", d.cfg.Join, ErrRefused)
	}
	d.cfg.HostID = h.Assigned
	d.self.ID = h.Assigned
	d.joinedRoutes(h.Assigned)
	d.ht.mu.Lock()
	d.ht.nextNum = max(d.ht.nextNum, h.TIDFloor)
	d.ht.ownNum = max(d.ht.ownNum, h.TIDFloor)
	d.ht.mu.Unlock()
	if d.cfg.Name == "" || d.cfg.Name == "h0" {
		d.cfg.Name = h.Assigned.String()
	}
	d.self.Name = d.cfg.Name
	if h.Seen != "" {
		d.self.Addr = h.Seen
	}
	d.setLogName(d.cfg.Name)
	v, es, hosts, err := decodeHostList(h.HostList)
	if err != nil {
		conn.Close("bad host list")
		return fmt.Errorf("join %s: %w", d.cfg.Join, err)
	}
	d.rt.updateAll(h.Routes)
	p := newPeer(d, conn, st, true)
	p.info = h.Info
	p.ctr = d.met.Peer(p.info.Name)
	// The hosts and the master's connection in one critical section: a
	// connection the master dials to this host is accepted only once the
	// master is a known host, and it must then find this one to tie with
	// (attach); set apart, the join's connection would overwrite the
	// winner.
	n := d.nw
	n.mu.Lock()
	n.list.Reset(v, es)
	n.listID = h.HostsID
	for i := range hosts {
		hi := d.reachable(hosts[i])
		n.hosts[hi.ID] = &hi
	}
	self := d.self
	n.hosts[d.self.ID] = &self
	n.master = p
	n.peers[MasterID] = p
	n.mu.Unlock()
	d.startPeer(p, r)
	d.log.Info("joined the virtual machine", "master", d.cfg.Join, "host_id", d.self.ID)
	return nil
}

func (d *Daemon) startPeer(p *peer, r *routing.Reader) {
	d.goFunc(p.writeLoop)
	d.goFunc(func() { p.readLoop(r) })
	if p.role == pki.RoleDaemon {
		d.goFunc(func() { d.acceptStreams(p) })
		d.goFunc(func() { d.acceptBulk(p) })
	}
}

// every calls f each period until f returns false, done is closed (nil:
// never) or the daemon stops.
func (d *Daemon) every(period time.Duration, done <-chan struct{}, f func() bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

// goFunc runs f in a goroutine the daemon waits for when it stops.
func (d *Daemon) goFunc(f func()) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		f()
	}()
}

func (d *Daemon) acceptLoop() {
	for {
		conn, err := d.nw.tr.Accept(d.ctx)
		if err != nil {
			if d.ctx.Err() == nil && !errors.Is(err, transport.ErrClosed) {
				d.log.Warn("accept", "error", err)
			}
			return
		}
		// Counted by certificate: many daemons may share an address
		// (one machine), while one holder is one party.
		who := conn.Peer().String()
		if why := d.conns.take(who, d.cfg.MaxConns, d.cfg.MaxConnsPerPeer); why != "" {
			d.refused(conn.RemoteAddr(), conn.Peer(), why)
			conn.Close(why)
			continue
		}
		d.goFunc(func() {
			defer d.conns.put(who)
			d.handshake(conn)
			select { // the connection counts until it ends
			case <-conn.Done():
			case <-d.ctx.Done():
			}
		})
	}
}

// handshake answers a new connection's hello: a joining daemon gets a host
// ID (at the master), a known daemon is attached as a peer, a client gets a
// control connection.
func (d *Daemon) handshake(conn transport.Conn) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.HandshakeTimeout)
	defer cancel()
	st, err := conn.AcceptStream(ctx)
	if err != nil {
		conn.Close("no stream")
		return
	}
	r := routing.NewReader(st, d.cfg.MaxFrame)
	rb := d.budgetFor(conn)
	r.SetBudget(rb)
	h, err := readHello(ctx, r)
	r.Free() // the hello is decoded: a connection refused holds nothing
	if err != nil {
		d.refused(conn.RemoteAddr(), conn.Peer(), err.Error())
		conn.Close(err.Error())
		return
	}
	cert := conn.Peer()
	refuse := func(why string) {
		d.refused(conn.RemoteAddr(), cert, why)
		d.lastWord(ctx, conn, st, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Err: why}, why)
	}
	if d.revoked.Load().Has(cert.Serial) {
		refuse(fmt.Sprintf("the certificate of %s (serial %s) is revoked", cert, cert.Serial))
		return
	}
	if h.Version != ProtocolVersion {
		refuse(fmt.Sprintf("protocol version %d, this daemon speaks %d", h.Version, ProtocolVersion))
		return
	}
	role := cert.Role
	n := d.nw
	p := newPeer(d, conn, st, false)
	p.rb = rb
	switch {
	case role.Client():
		p.info = HostInfo{Name: string(role) + " " + cert.Name}
		if err := writeHello(st, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Info: d.self}); err != nil {
			conn.Close("handshake failed")
			return
		}
		n.mu.Lock()
		n.clients[p] = true
		n.mu.Unlock()
	case h.Join || h.Rejoin:
		if !d.cfg.Master {
			refuse("this daemon is not the master")
			return
		}
		if role != pki.RoleDaemon || cert.Master {
			refuse(fmt.Sprintf("%s cannot join as a host: it needs a host certificate of its own", cert))
			return
		}
		if h.Detector != d.helloDetector() {
			refuse(fmt.Sprintf("the host's failure detector is %q, the master's %q: give every daemon the same --detector",
				cmp.Or(h.Detector, DetectorMaster), d.cfg.Detector))
			return
		}
		if h.RouteProto != d.helloRoutes() {
			// Under the broadcast no host asks an origin, and under routes
			// on demand none hears a move it is not part of: a machine
			// of both would lose track of moved tasks.
			refuse(fmt.Sprintf("the host's route protocol is %q, the master's %q: give every daemon the same --routes",
				cmp.Or(h.RouteProto, RoutesDemand), d.cfg.Routes))
			return
		}
		h.Name = cert.Name // a host's name is its certificate's, whatever its hello says
		if len(h.Name) > hostlist.MaxString || len(h.Addr) > hostlist.MaxString {
			// Every host decodes the host list, which bounds them.
			refuse(fmt.Sprintf("a host name of %d bytes or an address of %d: at most %d", len(h.Name), len(h.Addr), hostlist.MaxString))
			return
		}
		if wait := d.admissionWait(h, time.Now()); wait > 0 {
			// Over the admission rate: the host tries again later.
			d.answerBusy(ctx, conn, st, wait)
			return
		}
		var info HostInfo
		var lost []task.TID
		announce := true
		if h.Rejoin {
			info, lost, announce, err = d.admitAgain(h, conn.RemoteAddr())
		} else {
			info, err = d.admit(h, conn.RemoteAddr())
		}
		if err != nil {
			refuse(err.Error())
			return
		}
		p.info = info
		if announce {
			// On the list from its admission, so that the lists the
			// hosts joining meanwhile get hold it; the others hear of it
			// once it is answered (flushHosts below, or any flush
			// before). A host deleted after its deletion is listed again
			// once it has stopped its lost tasks (rejoined).
			d.listHost(info)
		}
		if h.Rejoin {
			d.fault("rejoin:admitted")
		} else {
			d.fault("join:admitted")
		}
		// Attach before answering: once the new host hears back it may be
		// addressed, and it must find this connection. A registration
		// that loses a tie (the master dialled the host meanwhile) is not
		// answered: the host tries again.
		attached := d.attach(p, false)
		if h.Rejoin {
			n.admitted(info.ID)
		}
		if attached != attachCurrent {
			return
		}
		hosts, routes := d.helloLists()
		floor := d.reg.floor(info.ID)
		if err := writeHello(st, &hello{Host: MasterID, Name: d.cfg.Name, Info: d.selfInfo(), Assigned: info.ID, Seen: info.Addr,
			HostList: hosts, HostsID: n.listID, Routes: routes, TIDFloor: floor, Secrets: d.secret.Load().Secrets(), Revoked: d.revoked.Load().Serials(),
			Deleted: !announce, Lost: lost}); err != nil {
			conn.Close("handshake failed")
			if !h.Rejoin || !announce {
				// A new host, or one readmitted after its deletion
				// (deleted again, it may come back again), never
				// heard the answer. A member registering again stays
				// one: the failure detector judges it.
				d.removeHost(info.ID, "handshake failed")
			}
			return
		}
		if announce {
			d.flushHosts()
			d.mv.hostUp(info.ID)
			d.hostNotice(task.HostAdd, info)
			d.schedDirty() // a new host, or one registering again with its tasks
			d.log.Info("host joined", "peer", info.ID, "peer_name", info.Name, "peer_addr", info.Addr)
		}
	default:
		hi, known := n.host(h.Host)
		if !known || h.Host == d.cfg.HostID {
			refuse(fmt.Sprintf("unknown host %v", h.Host))
			return
		}
		if role != pki.RoleDaemon || hi.Name != cert.Name || cert.Master != (h.Host == MasterID) {
			refuse(fmt.Sprintf("%s cannot speak for host %v (%s)", cert, h.Host, hi.Name))
			return
		}
		p.info = hi
		var v uint64
		if d.cfg.Master {
			v = d.listVersion()
		}
		if err := writeHello(st, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Info: d.self, HostsV: v}); err != nil {
			conn.Close("handshake failed")
			return
		}
		if d.attach(p, true) == attachRefused {
			return
		}
		if h.Host == MasterID && !d.cfg.Master {
			d.startPeer(p, r)
			d.hostsBehind(h.HostsV)
			return
		}
	}
	d.startPeer(p, r)
}

// attachResult is what became of a connection attach was given.
type attachResult uint8

const (
	// attachCurrent: it is the connection to its host now.
	attachCurrent attachResult = iota + 1
	// attachRetired: it lost the tie to the connection there was; it is
	// retired (retire.go) and must still be read.
	attachRetired
	// attachRefused: it was closed.
	attachRefused
)

// attach records p as the connection to its host. If there already is one
// (both daemons dialled at once), the connection dialled by the smaller
// host ID wins on both sides; the other is retired (retire.go), so that
// the calls under way on it are answered, unless retire is false: then a
// p that loses is closed. Unacknowledged messages are resent on the
// winner.
func (d *Daemon) attach(p *peer, retire bool) attachResult {
	p.ctr = d.met.Peer(p.info.Name)
	n := d.nw
	n.mu.Lock()
	if d.cfg.Master && n.hosts[p.info.ID] == nil {
		// A connection the master dialled to a host deleted while the
		// dial was under way (a frozen host answers late): the host is
		// told when it registers again; until then nothing goes to it.
		n.mu.Unlock()
		p.close(fmt.Errorf("host %v is not in the virtual machine", p.info.ID))
		return attachRefused
	}
	if d.cfg.Master && p.dialr && n.mem != nil && n.mem.admitting[p.info.ID] > 0 {
		// Dialled to a host that registers again meanwhile: the
		// registration's connection is to be the one.
		n.mu.Unlock()
		p.close(fmt.Errorf("host %v is registering again", p.info.ID))
		return attachRefused
	}
	old := n.peers[p.info.ID]
	keep := old == nil
	if old != nil {
		dialer := func(q *peer) task.HostID {
			if q.dialr {
				return d.cfg.HostID
			}
			return q.info.ID
		}
		keep = dialer(p) < dialer(old)
	}
	switch {
	case keep:
		n.peers[p.info.ID] = p
		if p.info.ID == MasterID && !d.cfg.Master {
			n.master = p
		}
		if old != nil {
			n.retiring[old] = true
		}
	case retire:
		n.retiring[p] = true
	}
	n.mu.Unlock()
	if !keep {
		if !retire {
			p.close(errors.New("duplicate connection"))
			return attachRefused
		}
		d.log.Debug("connection retired: it lost the tie to another", "peer", p.info.ID, "dialled", p.dialr)
		p.retireConn()
		return attachRetired
	}
	if old != nil {
		d.log.Debug("connection retired: it lost the tie to another", "peer", old.info.ID, "dialled", old.dialr)
		old.retireConn()
	}
	d.resendTo(p.info.ID, p)
	return attachCurrent
}

// retiringTo lists the retired connections to host h (every host: 0)
// still open. The caller holds n.mu.
func (n *network) retiringTo(h task.HostID) []*peer {
	var ps []*peer
	for p := range n.retiring {
		if h == 0 || p.info.ID == h {
			ps = append(ps, p)
		}
	}
	return ps
}

// successor is the connection to p's host that is current in p's stead
// (p retired: attach), or nil if there is none now.
func (n *network) successor(p *peer) *peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	if q := n.peers[p.info.ID]; q != p {
		return q
	}
	return nil
}

// host returns a copy of host id's record in the host list, and whether
// the list has one.
func (n *network) host(id task.HostID) (HostInfo, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if hi := n.hosts[id]; hi != nil {
		return *hi, true
	}
	return HostInfo{}, false
}

// peerFor returns the connection to host h, dialling it if need be.
func (d *Daemon) peerFor(ctx context.Context, h task.HostID) (*peer, error) {
	n := d.nw
	for {
		n.mu.Lock()
		if p := n.peers[h]; p != nil {
			n.mu.Unlock()
			return p, nil
		}
		hi := n.hosts[h]
		if hi == nil {
			n.mu.Unlock()
			return nil, fmt.Errorf("%v: %w", h, task.ErrNoSuchHost)
		}
		if h == MasterID && !d.cfg.Master && d.orphan.Load() {
			n.mu.Unlock() // only registering again reaches a master now
			return nil, fmt.Errorf("%v: %w: the master is lost", h, ErrNotConnected)
		}
		if n.mem != nil && (n.mem.pending[h] || n.mem.admitting[h] > 0) {
			// A host registering again after its deletion connects to the
			// master itself. A connection the master dialled meanwhile
			// would win the tie between two connections (attach keeps
			// the one dialled by the smaller ID) and its registration, or
			// the word that it stopped its tasks, would be lost with the
			// connection that lost. So would a registration of a host
			// the master still lists (admitting).
			n.mu.Unlock()
			return nil, fmt.Errorf("%v: %w: it is registering again", h, ErrNotConnected)
		}
		if d.isStopping() {
			// A stopping daemon makes no new connections: what it still
			// says (its tasks' exits) goes over those it has. A dial now
			// could only wait, up to HandshakeTimeout per message, for a
			// peer that is gone too (a master halted first never
			// answers, and its loss is not taken for one while stopping).
			n.mu.Unlock()
			return nil, fmt.Errorf("%v: %w: this daemon is stopping", h, ErrNotConnected)
		}
		if wait, busy := n.dialing[h]; busy {
			n.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		n.dialing[h] = done
		addr := hi.Addr
		n.mu.Unlock()
		p, err := d.dial(ctx, h, addr)
		n.mu.Lock()
		delete(n.dialing, h)
		close(done)
		cur := n.peers[h]
		n.mu.Unlock()
		if err != nil && cur != nil {
			return cur, nil // both ends dialled at once; the other connection won
		}
		if err != nil {
			return nil, fmt.Errorf("%v at %s: %w: %v", h, addr, ErrNotConnected, err)
		}
		if p != nil {
			return p, nil
		}
	}
}

func (d *Daemon) dial(ctx context.Context, h task.HostID, addr string) (*peer, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.HandshakeTimeout)
	defer cancel()
	var v uint64
	if d.cfg.Master {
		v = d.listVersion()
	}
	g, err := greet(ctx, d.nw.tr, addr, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Addr: d.self.Addr, Info: d.self, HostsV: v}, d.cfg.MaxFrame)
	if err != nil {
		return nil, err
	}
	if g.reply.Host != h {
		g.conn.Close("refused")
		return nil, fmt.Errorf("%w: %s answered as host %v", ErrRefused, addr, g.reply.Host)
	}
	hi, _ := d.nw.host(h)
	want := hi.Name
	if c := g.conn.Peer(); c.Role != pki.RoleDaemon || c.Name != want || c.Master != (h == MasterID) {
		g.conn.Close("refused")
		return nil, fmt.Errorf("%w: %s answered for host %v (%s) with the certificate of %s", ErrRefused, addr, h, want, c)
	}
	rb := d.budgetFor(g.conn)
	g.r.SetBudget(rb)
	p := newPeer(d, g.conn, g.st, true)
	p.rb = rb
	p.info = g.reply.Info
	switch d.attach(p, true) {
	case attachRefused:
		return nil, nil
	case attachRetired:
		d.startPeer(p, g.r) // the other side's connection won: use it, and drain this one
		return nil, nil
	}
	d.startPeer(p, g.r)
	if h == MasterID && !d.cfg.Master {
		d.hostsBehind(g.reply.HostsV)
	}
	return p, nil
}

// peerGone cleans up after a connection ends.
func (d *Daemon) peerGone(p *peer) {
	p.close(nil)
	n := d.nw
	n.mu.Lock()
	delete(n.clients, p)
	delete(n.retiring, p)
	wasCurrent := p.role == pki.RoleDaemon && n.peers[p.info.ID] == p
	if wasCurrent {
		delete(n.peers, p.info.ID)
	}
	isMaster := n.master == p
	n.mu.Unlock()
	if isMaster && d.ctx.Err() == nil {
		cause := "the connection was closed"
		if p.err != nil {
			cause = p.err.Error()
		}
		d.masterLost(errors.New(cause))
		return
	}
	if wasCurrent && d.cfg.Master && d.ctx.Err() == nil && p.err == nil {
		// A daemon that closes its connection to the master has left.
		d.removeHost(p.info.ID, reasonLeft)
	}
}

// masterLost stops a host daemon whose master is gone.
func (d *Daemon) masterLost(cause error) {
	d.whyMu.Lock()
	stopping := d.why != nil
	d.whyMu.Unlock()
	if stopping {
		return // halted or deleted: the master hanging up is expected
	}
	if d.cfg.MasterGrace > 0 {
		d.orphaned(cause)
		return
	}
	d.log.Error("lost the master daemon; stopping", "cause", cause)
	d.stopAsync(fmt.Errorf("%w: %v", ErrMasterLost, cause))
}

// dispatch handles one frame from p.
func (d *Daemon) dispatch(p *peer, f routing.Frame) error {
	if p.role.Client() && f.Kind != routing.KindCall && f.Kind != routing.KindPing {
		return fmt.Errorf("a client may not send %v frames", f.Kind)
	}
	switch f.Kind {
	case routing.KindMsgs:
		return d.receiveMsgs(p, f.Body, false)
	case routing.KindAcks:
		return d.receiveAcks(p, f.Body)
	case routing.KindRefuse:
		return d.receiveRefusals(p, f.Body)
	case routing.KindCall:
		// A client's call holds its bytes of the frame budget until it is
		// answered; a daemon's, until the reader reads on (a daemon's call
		// may wait for frames from other daemons). The call is served
		// from the frame's buffer where the reader gave it away.
		body := f.Body
		var hold callHold
		if p.role.Client() {
			var err error
			if hold, body, err = p.rb.holdCall(body); err != nil {
				return err
			}
		} else if p.rb == nil || p.rb.held == 0 {
			body = bytes.Clone(body) // the reader reuses its buffer
		}
		c, err := decodeCall(body)
		if err != nil {
			hold.give()
			return err
		}
		p.serving()
		d.goFunc(func() {
			defer p.served()
			defer hold.give()
			d.serveCall(p, c)
		})
	case routing.KindRetire:
		p.peerRetired()
	case routing.KindReply:
		var r reply
		if err := decodeMsg(f.Body, &r); err != nil {
			return err
		}
		d.nw.calls.deliver(&r)
	case routing.KindEvent:
		var e event
		if err := decodeMsg(f.Body, &e); err != nil {
			return err
		}
		return d.handleEvent(p, &e)
	case routing.KindSwim:
		return d.receiveSwim(p, f.Body)
	case routing.KindRouteAsk:
		return d.receiveRouteAsks(p, f.Body)
	case routing.KindRouteAnswer:
		return d.receiveRouteAnswers(p, f.Body)
	case routing.KindPing:
		d.nw.pingsIn.Add(1)
		if d.cfg.Master && p.role == pki.RoleDaemon && !pongDue(time.Since(time.Unix(0, p.lastWrite.Load())), d.cfg.Heartbeat, d.cfg.DeadAfter) {
			return nil
		}
		p.frame(routing.KindPong, f.Body)
	case routing.KindPong:
	case routing.KindHello:
		return fmt.Errorf("hello after the handshake: %w", routing.ErrMalformed)
	default:
		return fmt.Errorf("%v: %w", f.Kind, routing.ErrUnknownKind)
	}
	return nil
}

// callPeer sends a control request to p and waits for its reply, decoding
// the reply's body into out (if not nil). A call is sent once, on one
// connection: if p was retired before the call went out (it lost a tie,
// attach), the call goes on the connection to p's host that won; once
// sent, its reply comes back on p, which stays open for it (retire.go).
func (d *Daemon) callPeer(ctx context.Context, p *peer, method string, args, out any) error {
	id, ch, b, err := d.nw.calls.start(method, args)
	if err != nil {
		return err
	}
	for !p.sendCall(b) {
		q, err := d.peerFor(ctx, p.info.ID)
		if err != nil {
			d.nw.calls.forget(id)
			return fmt.Errorf("%s to %s: %w", method, p.name(), err)
		}
		p = q
	}
	defer p.callEnded()
	err = d.nw.calls.await(ctx, id, ch, p.closed, func() error {
		return fmt.Errorf("connection to %s lost", p.name())
	}, out)
	if err != nil {
		return fmt.Errorf("%s to %s: %w", method, p.name(), err)
	}
	return nil
}

// callHost sends a control request to host h (this daemon itself included).
func (d *Daemon) callHost(ctx context.Context, h task.HostID, method string, args, out any) error {
	if h == d.cfg.HostID {
		res, err := d.callLocal(ctx, method, args)
		if err != nil {
			return err
		}
		return setReply(res, out)
	}
	if d.nw == nil {
		return fmt.Errorf("%v: %w", h, task.ErrNoSuchHost)
	}
	p, err := d.peerFor(ctx, h)
	if err != nil {
		return err
	}
	return d.callPeer(ctx, p, method, args, out)
}

// callMaster sends a control request to the master daemon.
func (d *Daemon) callMaster(ctx context.Context, method string, args, out any) error {
	return d.callHost(ctx, MasterID, method, args, out)
}

// safeHandle runs a control request's handler; a panic in it fails that
// call with ErrInternal, logged with its stack, and the daemon goes on.
func (d *Daemon) safeHandle(ctx context.Context, p *peer, method string, body []byte) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			from := "this daemon"
			if p != nil {
				from = p.name()
			}
			d.log.Error("control handler panicked", "method", method, "from", from, "panic", r, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("%s: %w: %v", method, ErrInternal, r)
		}
	}()
	return d.serveMethod(ctx, p, method, body)
}

// callLocal runs a control request this daemon makes to itself. A request
// of the type its method declares goes to the handler as it is, without
// the codec; another (a raw body, a pointer) is encoded and served as a
// peer's would be. A panic fails the call with ErrInternal, as in
// safeHandle.
func (d *Daemon) callLocal(ctx context.Context, name string, args any) (res any, err error) {
	m := methods[name]
	if m == nil || m.local == nil {
		body, err := encodeMsg(args)
		if err != nil {
			return nil, err
		}
		return d.safeHandle(ctx, nil, name, body)
	}
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("control handler panicked", "method", name, "from", "this daemon", "panic", r, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("%s: %w: %v", name, ErrInternal, r)
		}
	}()
	if m.master && !d.isMaster() {
		return nil, fmt.Errorf("method %q: this daemon is not the master", name)
	}
	res, typed, err := m.local(d, ctx, args)
	if typed {
		return res, err
	}
	body, err := encodeMsg(args)
	if err != nil {
		return nil, err
	}
	return d.serveMethod(ctx, nil, name, body)
}

// setReply stores a local call's answer res in out: as it is when out
// points to res's type (the answer its method declares), through the
// codec otherwise.
func setReply(res, out any) error {
	if out == nil || res == nil {
		return nil
	}
	if ov := reflect.ValueOf(out); ov.Kind() == reflect.Pointer && !ov.IsNil() && ov.Elem().Type() == reflect.TypeOf(res) {
		ov.Elem().Set(reflect.ValueOf(res))
		return nil
	}
	b, err := encodeMsg(res)
	if err != nil {
		return err
	}
	return decodeMsg(b, out)
}

// serveCall runs a control request and sends the reply.
func (d *Daemon) serveCall(p *peer, c *call) {
	ctx := d.ctx
	if p.cert.Role.Client() {
		// A client's call ends with its connection, or when the client
		// cancels it.
		var done func()
		ctx, done = p.callCtx(c.ID)
		defer done()
	}
	res, err := d.safeHandle(ctx, p, c.Method, c.Body)
	d.audit(p, c.Method, err)
	r := reply{ID: c.ID}
	if err != nil {
		r.Err, r.Code = err.Error(), codeOf(err)
	} else if res != nil {
		b, err := encodeMsg(res)
		if err != nil {
			r.Err = err.Error()
		} else {
			r.Body = msgpack.RawMessage(b)
		}
	}
	b, err := encodeMsg(&r)
	if err != nil {
		d.log.Error("encode reply", "error", err)
		return
	}
	p.frame(routing.KindReply, b)
}

// sendEvent sends e to host h (not to this daemon).
func (d *Daemon) sendEvent(ctx context.Context, h task.HostID, e *event) error {
	p, err := d.peerFor(ctx, h)
	if err != nil {
		return err
	}
	b, err := encodeMsg(e)
	if err != nil {
		return err
	}
	p.frame(routing.KindEvent, b)
	return nil
}

// broadcast sends e to every connected daemon but except.
func (d *Daemon) broadcast(e *event, except task.HostID) {
	b, err := encodeMsg(e)
	if err != nil {
		d.log.Error("encode event", "error", err)
		return
	}
	n := d.nw
	n.mu.Lock()
	var ps []*peer
	for id, p := range n.peers {
		if id != except {
			ps = append(ps, p)
		}
	}
	n.mu.Unlock()
	for _, p := range ps {
		p.frame(routing.KindEvent, b)
	}
}

// Hosts lists the hosts this daemon knows, by ID.
func (d *Daemon) Hosts() []HostInfo {
	if d.nw == nil {
		return []HostInfo{d.selfInfo()}
	}
	n := d.nw
	n.mu.Lock()
	out := make([]HostInfo, 0, len(n.hosts))
	for _, h := range n.hosts {
		out = append(out, *h)
	}
	n.liveness(out, time.Now())
	n.mu.Unlock()
	for i := range out {
		if out[i].ID == d.cfg.HostID {
			lv := out[i].Liveness
			out[i] = d.selfInfo()
			out[i].Liveness = lv
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// hostByName resolves a host to its ID (resolveHost).
func (d *Daemon) hostByName(name string) (task.HostID, error) {
	return resolveHost(d.Hosts(), name)
}

// ErrAmbiguousHost is a host given by a word that is one host's name and
// another's ID.
var ErrAmbiguousHost = errors.New("names one host and is the ID of another")

// resolveHost finds the host s names among hosts: "name:N" the host named
// N, "id:hN" the host with ID hN, and a bare word the host with that name
// or that ID — a word that is one host's name and another's ID is refused
// with ErrAmbiguousHost (say which with a prefix), never resolved to
// either.
func resolveHost(hosts []HostInfo, s string) (task.HostID, error) {
	byName, byID := true, true
	word := s
	if w, ok := strings.CutPrefix(s, "name:"); ok {
		word, byID = w, false
	} else if w, ok := strings.CutPrefix(s, "id:"); ok {
		word, byName = w, false
	}
	var named, ided task.HostID
	for _, h := range hosts {
		if byName && h.Name == word {
			named = h.ID
		}
		if byID && h.ID.String() == word {
			ided = h.ID
		}
	}
	switch {
	case named != 0 && ided != 0 && named != ided:
		return 0, fmt.Errorf("host %q: %w (%v is named %q): say name:%s or id:%s", s, ErrAmbiguousHost, named, word, word, word)
	case named != 0:
		return named, nil
	case ided != 0:
		return ided, nil
	}
	return 0, fmt.Errorf("host %q: %w", s, task.ErrNoSuchHost)
}

// heartbeatLoop pings the master (hosts) or checks the hosts' pings (the
// master) every Heartbeat, and reports load when it changed (sendReport).
func (d *Daemon) heartbeatLoop() {
	d.every(d.cfg.Heartbeat, nil, func() bool {
		now := time.Now()
		d.retransmit(now)
		d.refreshSample(now)
		if err := d.reloadCredential(false); err != nil {
			d.log.Error("credential file", "file", d.cfg.CredentialFile, "error", err)
		}
		d.checkExpiry(now)
		d.dropExpired(now)
		if d.cfg.Master {
			d.reloadRevoked()
			d.checkHosts(now)
			return true
		}
		n := d.nw
		n.mu.Lock()
		m := n.master
		n.mu.Unlock()
		if m == nil {
			return true
		}
		if d.sw != nil {
			// Under swim the host does not ping the master: the master's
			// loss shows as its connection's (QUIC's keep-alive and idle
			// timeout). Load reports keep their own pace (ReportEvery).
			d.sendReport(false)
			d.askHosts(false)
			return true
		}
		if now.Sub(time.Unix(0, m.lastHeard.Load())) > d.cfg.DeadAfter {
			d.masterLost(fmt.Errorf("no answer for %v", d.cfg.DeadAfter))
			return d.cfg.MasterGrace > 0
		}
		d.sendReport(false)
		m.frame(routing.KindPing, pingPad[:])
		d.askHosts(false)
		return true
	})
}

// pongDue says whether the master answers a host's ping, having sent it
// nothing for silent. A host needs to hear from the master within its
// DeadAfter, not at every heartbeat: the master answers only once it has
// been silent towards the host for a heartbeat and a half (or a quarter of
// DeadAfter, if shorter), so that an idle host hears from it every other
// heartbeat and the master sends half the packets.
func pongDue(silent, heartbeat, deadAfter time.Duration) bool {
	return silent >= min(heartbeat*3/2, deadAfter/4)
}

// pingPad is a host's ping's body: it makes the ping's QUIC packet large
// enough that a master restarted at the same address answers it with a
// stateless reset (RFC 9000 §10.3: a reset must be smaller than the packet
// it answers), so the host learns at its next heartbeat that its
// connection is to a master that is gone.
var pingPad [48]byte
