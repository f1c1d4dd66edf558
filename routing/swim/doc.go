// Package swim is failure detection among the hosts themselves — SWIM's
// probing with Lifeguard's suspicion and local health — as two pure
// machines: a Node on every host and a Referee on the master. The master
// hears only of suspicions, deaths and refutations, so its idle cost does
// not grow with the number of hosts; it stays the one that deletes a
// host, and it deletes one only after checking the accused itself.
//
// Like the rest of routing the package performs no I/O, starts no
// goroutines, takes no locks and reads no clock: time is a parameter of
// every step, and a Node draws its random choices from the *rand.Rand its
// driver seeded. Each machine has one seam, Step(now, event) []effect,
// with typed events and effects that print themselves (the transcripts
// under testdata/ are made of them), and Next, the latest time at which it
// must be stepped again. Neither is safe for concurrent use.
//
// # The protocol
//
// Every host is a member with an incarnation, a number only the host
// itself raises. A member is alive, suspect or dead at an incarnation in
// each host's view; news about a member is an Update (state, host,
// incarnation, accuser) and travels piggybacked on the probes, up to
// Config.MaxPiggyback on a message, each update on
// RetransmitMult·⌈log10(n+1)⌉ messages, the least sent first, newer news
// of a host replacing older.
//
// Probing. Every ProbeInterval a host pings the next member of its
// rotation: the roster walked from a random offset by a random stride
// coprime to its length, a new walk each pass, so each member is probed
// once a pass by every host and by somebody about once an interval. No Ack
// within ProbeTimeout: it sends a PingReq to IndirectChecks random alive
// members, which ping the target and relay its Ack, or send a Nack at
// four fifths of the probe timeout if it stays silent. No Ack by the end
// of the interval: the target is suspected. A ping to a member held
// suspect or dead carries that news first, so a live target refutes or
// learns it must rejoin at once. One probe in DeadProbeEvery goes to a
// member held dead: that is how a host cut off by a partition, which
// holds everybody else dead, finds its way back once it heals.
//
// Local health (Lifeguard's LHM). A score from 0 to MaxAwareness scales
// the probe interval and timeout by (1+score). It rises by the Nacks a
// failed probe did not get (by one without relays: a relay that does not
// even nack means this host is not hearing), when the host refutes a
// suspicion of itself, and when it is stepped more than half an interval
// after it asked to be (stalled); a successful probe lowers it by one. A
// stalled host also moves every deadline by the stall plus a probe
// timeout, so the answers queued behind the stall are read before
// anything times out: an overloaded host does not accuse those it failed
// to hear.
//
// Suspicion (Lifeguard's dynamic suspicion, with memberlist's scaling).
// For n members the least timeout is SuspicionMult·max(1, log10 n)·
// ProbeInterval and the longest SuspicionMaxMult times that; with c
// independent accusers beyond the first, of k = SuspicionMult-2 wanted,
// the timeout is max(least, longest - (longest-least)·log(c+1)/log(k+1)).
// A host that accused the member by its own failed probe declares it dead
// at that timeout, gossips the death and reports it to the master; a host
// that only heard the suspicion waits twice the longest timeout (a
// backstop should every accuser fail too). The first accuser — the host
// whose probe turns an alive member suspect — reports the suspicion.
//
// Reports until confirmed. A death stays unconfirmed in a host's view
// until the master's confirmation reaches it (the death as an update
// from the master, accuser 0, gossiped on like any other). Until then the
// host that declared it reports it again every ReportEvery, and a host
// that only heard of it reports it after twice the longest suspicion
// timeout and a random part of one, then every ReportEvery: a death whose
// reporters failed, or were cut off from the master, is still confirmed.
// The confirmation, spread from the reporters, stops the others' reports
// before their backstop.
//
// Refutation. A host that hears it is suspected at its incarnation, or is
// checked by the master at it, takes a larger incarnation, gossips it as
// alive and reports it to the master. Alive at a larger incarnation
// overrides any suspicion or death of a smaller one; nothing overrides a
// death at the same incarnation.
//
// Death is final for its incarnation. A host that hears it is dead at its
// incarnation (or whom the master says it deleted, whatever its
// incarnation) does not refute: it asks the master to take it back
// (EffRejoin, again every RejoinEvery), and once answered (EvRejoined)
// comes back with an incarnation above the one it died at, which it
// reports to the master (taken back at none of its own). The master's
// lost-host path has by then given its tasks up, and the host stops them
// before it rejoins: nothing runs twice.
//
// # The master's part: the Referee
//
// The Referee takes the reports of members only (a deleted host's report
// is answered with its deletion, so it rejoins). A suspicion is shown to
// operators, a refutation clears it. A suspicion with no death reported
// after the longest suspicion timeout and a ReportEvery is checked as a
// reported death is: the refutation, told to the master by one report,
// may have been lost. A reported death starts a check: the
// master sends the accused a check (EvCheck) up to CheckTries times,
// CheckTimeout apart, over its own connection to the host. An answer ends
// it — the accused has refuted, and the reporters are told so
// (RefGossip), as the hosts that could not reach it could not hear its
// refutation — and the host stays. A death reported at an older
// incarnation than the master knows is checked at the one it knows: the
// reporters may have missed a refutation that reached only the master,
// and the accused may have failed since. A referee stepped more than a
// CheckTimeout after a try fell due was stalled (an overloaded master):
// the accused's answer may be queued behind the stall, so that try does
// not count, at most CheckTries times a check (a dead host is still
// deleted within about twice the window). No answer: RefDelete, the master's
// lost-host path; the reporters get the confirmation (RefGossip), the
// deleted host is told when its connection is back, and a later report
// of the death is answered with its confirmation. So a live host the master can reach is never deleted, whatever
// its observers' load or partitions; a partition that cuts the hosts in
// two cannot make each half delete the other. A host the master cannot
// reach either is deleted, and rejoins when the partition heals.
//
// Costs. Idle, the master hears nothing. A failure costs it the first
// accusers' suspicion reports, the accusers' death reports (those whose
// timers fire before the death's gossip reaches them), the checks: a
// count bounded by the suspicion window in probe intervals, not by n; it
// sends the checks and a confirmation to each reporter. A
// host sends a ping and an ack per interval, receives as many, plus the
// indirect probes of failures. TestCostModel measures them at 1,000,
// 4,096 and 10,000 hosts (about 20 messages to the master per failure, 2
// messages per second sent per host, 0 to an idle master).
//
// Trust. A swim message's sender is its connection's certificate (the
// daemon refuses one that claims another), and gossip never adds a
// member: hosts are learnt from the master's list or from their own
// messages. Updates about third parties are not signed, so a byzantine
// host can accuse others or repeat their refutations; it cannot get a
// live host deleted — deletion is the master's, after its own checks —
// and at worst it delays the detection of another's death while it keeps
// forging that host's refutations.
//
// # Wire format
//
// A Msg travels in one frame; its body, integers little endian:
//
//	msg     = kind u8 (1 ping, 2 ack, 3 ping-req, 4 nack),
//	          from u32, to u32, inc u32 (the sender's incarnation),
//	          seq u32, target u32 (0: none), count u8, count × update
//	update  = state u8 (1 alive, 2 suspect, 3 dead), host u32, inc u32,
//	          from u32 (the accuser; 0: the master)
//
// ParseMsg checks the count against the receiver's limit (at most
// MaxGossip, 64) and the length before it allocates, and refuses unknown
// kinds and states.
//
// # How the daemon drives it
//
// daemon/swim.go, under Config.Detector "swim" (dpvm daemon --detector
// swim, the default; --detector master keeps the master's heartbeats).
// Each host daemon runs a Node from one tracked loop: it steps EvJoin with the host list (this
// host included, the master not: it is no member) whenever the list
// changes, checked every Heartbeat, and EvForget for a host the list
// dropped; EvTick at Next (at most a Heartbeat away); EvMsg for every
// KindSwim frame from a peer; EvCheck and EvGossip for the master's calls
// swim.check and swim.gossip; EvRejoined once it has registered again
// with the master. It performs EffSend as a KindSwim frame (AppendMsg's
// body) on the peer's connection, dialling one in the background if there
// is none; EffReport and EffCheckAck as the host calls swim.report and
// swim.checkack; EffRejoin by giving up its master connection and
// registering again (readmit: the master says whether it is still a
// member, and the host stops the tasks it lost before it rejoins). A
// KindSwim frame whose From is not the connection's host, or whose To is
// not this host, is refused and ends the connection: the cluster's QUIC
// credentials authenticate every probe, and no other key is needed.
// Config comes from the daemon's: ProbeInterval = Heartbeat, ProbeTimeout
// = Heartbeat/2, CheckTimeout = Heartbeat and CheckTries =
// DeadAfter/CheckTimeout, RejoinEvery and ReportEvery the join retry's
// base, the rest at their defaults. The master daemon runs the Referee
// under the lock that owns membership: RefAdmit for every admitted or
// readmitted host, RefRemove for every deletion, RefReport and RefCheckAck
// for the calls (the reporter is the connection's host), RefTick every
// Heartbeat; it sends RefCheck and RefGossip as the calls swim.check and
// swim.gossip and calls removeHost for RefDelete. Hosts send the master no
// heartbeats (their load reports keep their own pace), and routing/member's
// Detector is not stepped; the master keeps its connection to every host,
// idle, for its calls and checks.
package swim
