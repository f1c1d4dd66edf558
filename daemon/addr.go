package daemon

import (
	"fmt"
	"net"
	"strconv"
)

// Addresses. A daemon listens on one UDP socket and dials its peers from
// it, so the master sees a host's connection come from the IP the host is
// reached at and from the port it listens on. A daemon that listens on a
// wildcard address (0.0.0.0 or [::]) cannot name that IP itself: the
// master records it for each host, and each host knows the master by the
// address it joined it by. --advertise overrides both, for a daemon behind
// a NAT or known by a DNS name.

// reachableAddr is the address the master records for a daemon whose hello
// came from remote: its advertised address as given, or else the IP its
// connection came from with the port it listens on. Where remote is no IP
// address (an in-memory network), the daemon's own address stands.
func reachableAddr(h *hello, remote string) string {
	if h.Advertised || h.Addr == "" {
		return h.Addr
	}
	_, port, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return h.Addr
	}
	rhost, _, err := net.SplitHostPort(remote)
	if err != nil || net.ParseIP(rhost) == nil {
		return h.Addr
	}
	return net.JoinHostPort(rhost, port)
}

// unspecifiedAddr says whether addr names no host other daemons could
// dial: an empty host or a wildcard IP.
func unspecifiedAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// checkAdvertise checks an address given to --advertise: a host (IP or
// DNS name, not a wildcard) and a port.
func checkAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("advertised address %q: want HOST:PORT: %w", addr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("advertised address %q: bad port %q", addr, port)
	}
	if unspecifiedAddr(addr) || host == "" {
		return fmt.Errorf("advertised address %q: name a host others can reach, not a wildcard", addr)
	}
	return nil
}

// learnOwnAddr takes the address a joining host reached this master by as
// the master's own, when the master listens on a wildcard address and was
// not told what to advertise: the first such address wins, so that `dpvm
// conf` and the host lists name an address that reached it.
func (d *Daemon) learnOwnAddr(h *hello) {
	if d.cfg.Advertise != "" || !unspecifiedAddr(d.self.Addr) || h.Dialled == "" || unspecifiedAddr(h.Dialled) {
		return
	}
	a := h.Dialled
	d.ownAddr.CompareAndSwap(nil, &a)
}
