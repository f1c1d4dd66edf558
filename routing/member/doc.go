// Package member holds the pure machine of host membership that the
// master daemon drives: a failure detector that suspects a silent host
// before it confirms it dead, and the admission control that paces
// registrations, with the jittered backoff hosts retry by. Like the rest of
// routing it performs no I/O and reads no clock: time and random numbers
// are parameters, and none of its types is safe for concurrent use.
//
// # The seam
//
// Machine holds the detector and the admission bucket behind one seam,
// Step(now, Event) []Effect, the shape of routing/move's machines. Events:
// Join (a host asks to register), Watch and Forget (a host registered,
// deleted, and why), Heard (when a host was last heard from), Tick (every
// heartbeat) and Return (a host the master does not count as a member
// registers again). Effects: Admit or Busy (retry after), Suspect, Clear
// and Delete (a host's verdict: show the suspicion, clear it, delete the
// host), Health (the observer's health changed, and with it the death
// timeout), and Readmit or Refuse (a host deleted for its silence comes
// back under its old ID with none of its tasks; an operator's deletion is
// final). The driver feeds the events and performs the effects; what a
// verdict leads to is the machine's, not the driver's.
//
// # Failure detection
//
// A Detector keeps, per host, when it was last heard from and a window of
// the intervals between what it heard (any frame counts: heartbeats, load
// reports, messages). At each Tick a host is
//
//   - Alive while its silence is below its suspicion timeout;
//   - Suspected once its silence reaches the suspicion timeout: the larger
//     of Config.SuspectAfter and the phi-accrual bound of its own
//     interval history (the silence whose probability, under a normal
//     fit of the intervals, is 10^-Phi), capped by the death timeout. A
//     suspected host heard from again is Alive again;
//   - Dead once it was suspected at an earlier tick and its silence
//     reaches the death timeout, Config.DeadAfter. Dead is final: the
//     driver deletes the host.
//
// Both timeouts are multiplied by (1 + the observer's local health), after
// Lifeguard: an observer that is itself overloaded must not accuse the
// hosts it failed to listen to. Health rises by one (up to
// Config.MaxHealth) at a tick that comes late — more than half a
// heartbeat after it was due, the observer was stalled — at a tick
// where many hosts are suspected at once (at least Config.MassMin and a
// quarter of them: more likely the observer's trouble than theirs), and
// at a tick after the driver said the observer was strained by other work
// (Strain: the master turning registrations away — then for DeadAfter
// after the last strain); it falls by one at every other tick. A late tick also credits every host
// with the time the observer was blind: their silence is counted from
// their last word plus the lateness. So a healthy master confirms a host
// that fell silent dead after DeadAfter (plus up to a heartbeat), and an
// overloaded one after at most (1+MaxHealth)·DeadAfter.
//
// # Admission
//
// A Bucket is a token bucket: Config rate and burst. The master takes one
// token per registration; when none is left it answers "busy, retry after"
// the time until the next token, and the host waits that long plus a
// jittered exponential backoff (Backoff) before it tries again. A host is
// registered (and watched by the detector) only once admitted, so a host
// told to wait is never deleted for the heartbeats it held back.
package member
