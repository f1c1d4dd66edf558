package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// An Option adjusts a Send, Recv or TryRecv. Each call accepts the options
// that mean something for it and fails with an error naming any other.
// An Option is a plain value, so that applying a call's options costs no
// allocation on the message path. A loop that passes the same options to
// every call can make their slice once and pass it as opts...: the calls
// then build nothing.
type Option struct {
	kinds   int // the kinds of option it holds (optSafe, …)
	match   func(Status) bool
	timeout time.Duration
	ctx     context.Context
}

// safe and inPlace report whether o holds Safe and InPlace.
func (o *Option) safe() bool    { return o.kinds&optSafe != 0 }
func (o *Option) inPlace() bool { return o.kinds&optInPlace != 0 }

// Safe makes a Send's or Recv's wait a safe point: while no message has
// come (Recv) or the receiver's mailbox has no room (Send), the task can
// be moved or checkpointed. Like SafePoint, the call then returns
// ErrSuspended, which Run must return unchanged, the message neither
// received nor sent; the task resumes in Run, so wait with Safe where
// Run's fields say the task is waiting. Inside a critical section, or
// while a receive request is outstanding on a communicator (see
// Comm.Irecv), the wait is no safe point.
func Safe() Option { return Option{kinds: optSafe} }

// InPlace makes a Send hand over a slice the caller gives up (PVM's
// PvmDataInPlace, carried through to the receiver). A []byte, or a slice
// of fixed-size numbers whose memory already has the wire's layout (a
// little-endian host), is not copied for a receiver on the sender's host:
// the message's body is the slice's memory, and the receiver's
// Payload.Int32s (or Decode into *[]byte) returns that memory
// itself. A receiver on another host, or one the message must wait for
// while it moves, gets a copy made at the send, exactly as without
// InPlace; other values are encoded as Send encodes them.
//
// From the call on, the slice belongs to the message and then to its
// receiver: the sender must not write to it until it knows the receiver
// is done with it (typically from a message the receiver sent after it
// had finished with the slice), and must not read it while the receiver
// may write to it. That holds while the message waits in a mailbox too,
// where a checkpoint or a move of the receiver reads it. Do not send a
// slice of the task's exported state this way: the task's own
// checkpoints read it. Order, delivery, back-pressure and the limits on a
// message's size are Send's. A send cannot be both InPlace and Safe.
func InPlace() Option { return Option{kinds: optInPlace} }

// Match makes a Recv or TryRecv take the oldest message that matches its
// source and tag and that f accepts (pvm_recvf): f sees each candidate's
// status (source, tag, size, encoding) and must be quick, touch nothing
// that other goroutines write, and not call the task's Ctx.
func Match(f func(Status) bool) Option {
	return Option{kinds: optMatch, match: f}
}

// Timeout makes a Recv, or a Send waiting for room in the receiver's
// mailbox, give up after d with an error wrapping ErrTimeout (pvm_trecv).
func Timeout(d time.Duration) Option {
	return Option{kinds: optTimeout, timeout: d}
}

// WithContext makes a Recv or a Send give up when ctx is done, returning
// an error wrapping ctx's. Without it they wait until the task is killed.
func WithContext(ctx context.Context) Option {
	return Option{kinds: optContext, ctx: ctx}
}

// Option kinds, for checking that a call takes them.
const (
	optSafe = 1 << iota
	optInPlace
	optMatch
	optTimeout
	optContext
	optWait = optTimeout | optContext
)

var optNames = [...]string{"Safe", "InPlace", "Match", "Timeout", "WithContext"}

// merge merges opts into o (the zero Option) for the call named what,
// which takes the kinds of option in takes; it returns an error naming
// any other. It fills o in place, and leaves the error's making to
// refuse: a Send or Recv, which calls it on every call with options,
// copies no Option back.
func (o *Option) merge(what string, opts []Option, takes int) error {
	for i := range opts {
		o.add(&opts[i])
	}
	if o.kinds&^takes != 0 || o.safe() && o.inPlace() {
		return o.refuse(what, takes)
	}
	return nil
}

// add merges x into o.
func (o *Option) add(x *Option) {
	o.kinds |= x.kinds
	if x.match != nil {
		o.match = x.match
	}
	if x.timeout != 0 {
		o.timeout = x.timeout
	}
	if x.ctx != nil {
		o.ctx = x.ctx
	}
}

// refuse is merge's error for the options o of the call named what,
// which takes the kinds in takes.
func (o *Option) refuse(what string, takes int) error {
	if bad := o.kinds &^ takes; bad != 0 {
		for i, name := range optNames {
			if bad&(1<<i) != 0 {
				return fmt.Errorf("%s does not take the option %s", what, name)
			}
		}
	}
	return fmt.Errorf("%s: a send cannot be both Safe and InPlace", what)
}

// plain reports whether o holds no option but WithContext: a Send or Recv
// then waits under that context (or the task's) and nothing else, and
// takes the short way of every message of a stream, which makes no
// deadline and cancels none.
func (o *Option) plain() bool { return o.kinds&^optContext == 0 }

// context is the context o names, or else the task's.
func (c *Ctx) context(o *Option) context.Context {
	if o.ctx != nil {
		return o.ctx
	}
	return c.ep.Context()
}

// waitContext is the context a call with options o waits under, and its
// cancel function.
func (c *Ctx) waitContext(o *Option) (context.Context, context.CancelFunc) {
	ctx := c.context(o)
	if o.timeout > 0 {
		return context.WithTimeout(ctx, o.timeout)
	}
	return ctx, func() {}
}

// timedOut rewrites err as ErrTimeout when it is o's own timeout that
// expired (not a deadline of the caller's context).
func timedOut(err error, o *Option, ctx context.Context) error {
	if o.timeout > 0 && errors.Is(err, context.DeadlineExceeded) && (o.ctx == nil || o.ctx.Err() == nil) && ctx.Err() != nil {
		return fmt.Errorf("after %v: %w", o.timeout, ErrTimeout)
	}
	return err
}

// MaxTag is the largest message tag; tags travel as 32-bit integers.
const MaxTag = 1<<31 - 1

// checkTag is inlined; badTag, its error, is not.
func checkTag(tag int) error {
	if uint(tag) > MaxTag {
		return badTag(tag)
	}
	return nil
}

// badTag is the error for a tag out of range.
func badTag(tag int) error { return fmt.Errorf("tag %d: %w", tag, ErrBadTag) }

// InPlaceSender is implemented by endpoints that can hand a payload's bytes
// to a receiver on their own host without copying them (the daemon's
// does): SendInPlace delivers p like Endpoint.Send, except that p.Data is
// the sending task's memory, which a receiver on the endpoint's host gets
// as it is; for a receiver elsewhere the endpoint copies it.
type InPlaceSender interface {
	SendInPlace(ctx context.Context, to TID, tag int, p Payload) error
}

// SafeSender is implemented by endpoints whose sends can wait at a safe
// point (the daemon's does): SendSafe returns sent == false, having sent
// nothing, when a checkpoint or move of the sender is pending.
type SafeSender interface {
	SendSafe(ctx context.Context, to TID, tag int, p Payload) (sent bool, err error)
}

// StopAsker is implemented by endpoints that can say whether the runtime
// wants the task at a safe point now, a move or a job checkpoint's pause
// being asked (the daemon's does). A collective that finds its message
// already there takes it without a safe wait only while StopAsked is
// false: a task whose partners are always ahead of it would otherwise
// never reach a safe point inside its collectives.
type StopAsker interface {
	StopAsked() bool
}

// FuncReceiver is implemented by endpoints that can receive by a predicate
// over a message's status (the daemon's does). RecvFunc is Endpoint.Recv
// taking only a message that match accepts as well; RecvFuncSafe is
// Endpoint.RecvSafe so. match runs while the mailbox is locked: it must be
// quick and must not call the task's Ctx. A nil match accepts every
// message: a Ctx whose endpoint has RecvFunc receives through it alone,
// so that the endpoint serves both kinds of receive with one body and
// one call.
type FuncReceiver interface {
	RecvFunc(ctx context.Context, from TID, tag int, match func(Status) bool, wait bool) (Message, bool, error)
	RecvFuncSafe(ctx context.Context, from TID, tag int, match func(Status) bool) (Message, bool, error)
}

// Send sends v to task to with the given tag (pvm_send). v is encoded
// before Send returns, so the caller may reuse it (but see InPlace).
// Messages from one task to another arrive in the order sent. A send
// waits only for room in the receiver's mailbox; Safe makes that wait a
// safe point, Timeout and WithContext bound it, and InPlace hands the
// slice itself to a receiver on the same host.
//
// Send does not tell whether the receiver lives: a message to a task that
// has exited is dropped and Send returns nil, wherever that task ran (its
// daemon may learn of the exit only after Send has returned, so no answer
// could be the same everywhere); use Notify(TaskExit) to learn of exits.
// Send fails with ErrNoSuchTask only for a TID no task can have (the zero
// TID, AnyTask, a host not in the virtual machine).
func (c *Ctx) Send(to TID, tag int, v any, opts ...Option) error {
	var o Option
	if len(opts) > 0 {
		if err := o.merge("send", opts, optSafe|optInPlace|optWait); err != nil {
			return err
		}
	}
	if err := checkTag(tag); err != nil {
		return fmt.Errorf("send to %v: %w", to, err)
	}
	lend := o.inPlace() && c.ips != nil
	p, err := encode(v, lend)
	if err != nil {
		return fmt.Errorf("send to %v: %w", to, err)
	}
	if o.plain() {
		c.enter()
		err = c.ep.Send(c.context(&o), to, tag, p)
		c.leave()
		if err != nil {
			return fmt.Errorf("send to %v tag %d: %w", to, tag, err)
		}
		return nil
	}
	return c.sendWith(to, tag, p, &o, lend)
}

// sendWith is Send of the encoded p with options o beyond WithContext:
// a Timeout, Safe, or InPlace (lend: the endpoint takes the slice itself).
func (c *Ctx) sendWith(to TID, tag int, p Payload, o *Option, lend bool) error {
	ctx, cancel := c.waitContext(o)
	defer cancel()
	var err error
	switch {
	case lend:
		c.enter()
		err = c.ips.SendInPlace(ctx, to, tag, p)
		c.leave()
	case o.safe() && c.ss != nil && c.mayStop():
		for {
			c.enter()
			var sent bool
			sent, err = c.ss.SendSafe(ctx, to, tag, p)
			c.leave()
			if err != nil || sent {
				break
			}
			if err := c.SafePoint(); err != nil {
				return err
			}
		}
	default:
		c.enter()
		err = c.ep.Send(ctx, to, tag, p)
		c.leave()
	}
	if err != nil {
		return fmt.Errorf("send to %v tag %d: %w", to, tag, timedOut(err, o, ctx))
	}
	return nil
}

// Mcast sends v with the given tag to every task in to but the caller,
// encoding it once: as pvm_mcast, the caller does not get the message
// even when it is listed. It fails with ErrNoSuchTask if a receiver does
// not exist; the others still get the message.
func (c *Ctx) Mcast(to []TID, tag int, v any) error {
	if err := checkTag(tag); err != nil {
		return fmt.Errorf("mcast: %w", err)
	}
	p, err := Encode(v)
	if err != nil {
		return fmt.Errorf("mcast: %w", err)
	}
	if self := c.MyTID(); slices.Contains(to, self) {
		to = slices.DeleteFunc(slices.Clone(to), func(t TID) bool { return t == self })
		if len(to) == 0 {
			return nil
		}
	}
	c.enter()
	defer c.leave()
	if err := c.ep.Mcast(c.ep.Context(), to, tag, p); err != nil {
		return fmt.Errorf("mcast tag %d: %w", tag, err)
	}
	return nil
}

// Recv blocks until a message matching from and tag arrives (AnyTask and
// AnyTag are wildcards; pvm_recv), decodes its body into v (a pointer, or
// nil to leave it undecoded) and returns the message: its source, tag and
// encoded body (the sender's slice itself when it was sent InPlace from
// the same host). Messages match in arrival order. A message that cannot
// be decoded into v is consumed and the error wraps ErrDecode.
//
// Options: Safe makes the wait a safe point, Match takes only a message
// a predicate accepts (pvm_recvf), Timeout (pvm_trecv) and WithContext
// bound the wait; they combine.
func (c *Ctx) Recv(from TID, tag int, v any, opts ...Option) (Message, error) {
	var o Option
	if len(opts) > 0 {
		if err := o.merge("recv", opts, optSafe|optMatch|optWait); err != nil {
			return Message{}, err
		}
	}
	if !o.plain() {
		return c.recvWith(from, tag, v, &o)
	}
	// take's receive, written out: a Message is too large for registers,
	// and each call it passes through copies it once more.
	ctx := c.context(&o)
	var (
		m   Message
		err error
	)
	c.enter()
	if c.fr != nil {
		m, _, err = c.fr.RecvFunc(ctx, from, tag, nil, true)
	} else {
		m, _, err = c.ep.Recv(ctx, from, tag, true)
	}
	c.leave()
	if err != nil {
		if errors.Is(err, ErrSuspended) {
			return Message{}, err
		}
		return Message{}, fmt.Errorf("recv from %v tag %d: %w", from, tag, err)
	}
	return m, decodeInto(&m, v)
}

// recvWith is Recv with options o beyond WithContext: a Timeout, Safe or
// Match.
func (c *Ctx) recvWith(from TID, tag int, v any, o *Option) (Message, error) {
	ctx, cancel := c.waitContext(o)
	defer cancel()
	m, _, err := c.recv(ctx, from, tag, o, true)
	if err != nil {
		if errors.Is(err, ErrSuspended) {
			return Message{}, err
		}
		return Message{}, fmt.Errorf("recv from %v tag %d: %w", from, tag, timedOut(err, o, ctx))
	}
	return m, decodeInto(&m, v)
}

// TryRecv is a Recv that does not wait (pvm_nrecv): ok is false when no
// message matches. It takes the option Match.
func (c *Ctx) TryRecv(from TID, tag int, v any, opts ...Option) (m Message, ok bool, err error) {
	var o Option
	if err := o.merge("tryrecv", opts, optMatch); err != nil {
		return Message{}, false, err
	}
	m, ok, err = c.recv(c.ep.Context(), from, tag, &o, false)
	if err != nil {
		return Message{}, false, fmt.Errorf("tryrecv from %v tag %d: %w", from, tag, err)
	}
	if !ok {
		return Message{}, false, nil
	}
	return m, true, decodeInto(&m, v)
}

// recv takes the message a Recv (wait) or TryRecv with options o is for.
func (c *Ctx) recv(ctx context.Context, from TID, tag int, o *Option, wait bool) (Message, bool, error) {
	if o.match != nil && c.fr == nil {
		return Message{}, false, fmt.Errorf("recv by predicate: this runtime cannot")
	}
	if !o.safe() || !wait || !c.mayStop() {
		return c.take(ctx, from, tag, o.match, wait)
	}
	for {
		var (
			m   Message
			ok  bool
			err error
		)
		c.enter()
		if o.match != nil {
			m, ok, err = c.fr.RecvFuncSafe(ctx, from, tag, o.match)
		} else {
			m, ok, err = c.ep.RecvSafe(ctx, from, tag)
		}
		c.leave()
		if err != nil || ok {
			return m, ok, err
		}
		if err := c.SafePoint(); err != nil {
			return Message{}, false, err
		}
	}
}

// take is one receive from the endpoint, a critical section: through
// RecvFunc when the endpoint has it (match nil: any message), else
// through Recv (match nil; recv has checked). It is every Recv's way to
// the mailbox unless the wait is a safe point.
func (c *Ctx) take(ctx context.Context, from TID, tag int, match func(Status) bool, wait bool) (m Message, ok bool, err error) {
	c.enter()
	if c.fr != nil {
		m, ok, err = c.fr.RecvFunc(ctx, from, tag, match, wait)
	} else {
		m, ok, err = c.ep.Recv(ctx, from, tag, wait)
	}
	c.leave() // not deferred: the receive a stream makes per message
	return m, ok, err
}

// Probe reports whether a message matching from and tag is waiting, without
// receiving it (pvm_probe).
func (c *Ctx) Probe(from TID, tag int) (Status, bool) {
	c.enter()
	defer c.leave()
	return c.ep.Probe(from, tag)
}

// decodeInto decodes m's body into v, if v is not nil. It is inlined;
// decodeMsg, which decodes, is not.
func decodeInto(m *Message, v any) error {
	if v == nil {
		return nil
	}
	return decodeMsg(m, v)
}

// decodeMsg decodes m's body into v.
func decodeMsg(m *Message, v any) error {
	if err := m.Decode(v); err != nil {
		return fmt.Errorf("message from %v tag %d: %w", m.From, m.Tag, err)
	}
	return nil
}
