package daemon

// Two daemons that dial each other at once end up with two connections
// between them; attach keeps the one dialled by the smaller host ID on both
// sides and retires the other. A retired connection is not cut: calls may
// be under way on it in both directions, and a control call that may have
// run must be answered, never sent again (calls are not deduplicated: a
// second "start" would start a second task). So each side, on retiring a
// connection, sends a retire frame (routing.KindRetire) on it after its
// last call and sends nothing new on it but replies and pongs (a call or
// an event not yet sent goes on the connection that won: callPeer,
// peer.frame); it goes on reading the connection, serving the
// calls that came before the peer's retire frame and answering them on
// it. Once both sides have retired it and neither is owed a reply, each
// side flushes what it queued and closes its sending side; a side that
// reads the other's end closes the connection. A peer that never retires
// it (its side of the other connection failed) does not keep it: the
// retiring side closes it after Config.HandshakeTimeout, once no call is
// under way on it in either direction (a call is answered or given up by
// its own deadline first).

// retirement is a connection's state in that exchange: pure, kept under
// its peer's wmu.
type retirement struct {
	retired     bool // this side retired it: it carries no new call
	peerRetired bool // the peer's retire frame came: no call of its follows
	gaveUp      bool // the peer's retire frame is not waited for (giveUp)
	calls       int  // calls made on it still awaiting their replies
	serving     int  // calls received on it whose replies are not yet queued
	finished    bool // done has reported true
}

// startCall counts a call about to be sent, or reports false if the
// connection is retired (the call must go on another).
func (r *retirement) startCall() bool {
	if r.retired {
		return false
	}
	r.calls++
	return true
}

// endCall counts a call made on the connection as over (answered, failed
// or given up); it reports whether the connection may now close.
func (r *retirement) endCall() bool {
	r.calls--
	return r.done()
}

// startServe counts a call received on the connection.
func (r *retirement) startServe() { r.serving++ }

// endServe counts a received call's reply as queued; it reports whether
// the connection may now close.
func (r *retirement) endServe() bool {
	r.serving--
	return r.done()
}

// retire retires the connection on this side. first is true the first
// time (the retire frame is then to be sent); done whether the connection
// may now close.
func (r *retirement) retire() (first, done bool) {
	first = !r.retired
	r.retired = true
	return first, r.done()
}

// peerRetire records the peer's retire frame; it reports whether the
// connection may now close.
func (r *retirement) peerRetire() bool {
	r.peerRetired = true
	return r.done()
}

// giveUp stops waiting for the peer's retire frame (the handshake timeout
// after this side's retirement passed): the connection may close without
// it, once neither side is owed a reply on it. abandoned says the frame
// had not come; done whether the connection may now close.
func (r *retirement) giveUp() (abandoned, done bool) {
	r.gaveUp = true
	return !r.peerRetired, r.done()
}

// done reports, once, that both sides retired the connection (or this side
// gave up waiting for the peer) and that neither is owed a reply on it.
func (r *retirement) done() bool {
	if r.finished || !r.retired || !(r.peerRetired || r.gaveUp) || r.calls > 0 || r.serving > 0 {
		return false
	}
	r.finished = true
	return true
}
