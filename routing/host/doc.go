// Package host is the host node: what one daemon decides about its tasks
// and their messages, as one pure value with one seam. A Node owns the
// route table, reliable delivery's Outbox and Inbox, the host half of
// moves (routing/move.Host) and the host half of job checkpoints
// (routing/jobck.Host). Step feeds it one event with the current time and
// returns the effects the daemon is to perform; it delegates each event to
// the part it concerns.
//
// Like its parts a Node performs no I/O, starts no goroutines, takes no
// locks and reads no clock: the daemon holds it under one lock (its
// router's), so that no critical section of the daemon needs two
// protocol locks. The daemon's send path uses the parts directly
// (Routes, Outbox, Inbox) under that lock: a message costs one lock
// acquisition and no allocation, which an event and an effect slice per
// message would not.
package host
