// Package jobck is the coordinator of a job's checkpoints and rollbacks as
// a pure state machine (DESIGN §7, §8): events and the current time go in,
// actions come out, and it performs no I/O, holds no lock, starts no
// goroutine and reads no clock. Package daemon drives it on the master: it
// performs each action (calls to the hosts, the manifest write) and feeds
// the outcome back as events.
//
// # Rounds
//
// The machine runs one round at a time. A round is a checkpoint (write set
// Seq, one above the newest complete set, above the set of any round
// abandoned when a host was lost, and above every set on disk, which the
// driver reports as the event's Floor: a set never collides with one an
// abandoned round or an earlier machine left) or a rollback (go back to set Seq, the newest complete
// one). Its identity, [Round], is (Job, Seq, Try): Try counts the job's
// rounds, so two rollbacks to the same set differ. Every action carries
// the round, every reply event must carry it back, and a reply for a round
// that is not the current one — a late answer of an abandoned round — is
// refused with [ErrStale] and changes nothing.
//
// A checkpoint round goes
//
//	Idle → Pausing → Quieting ⟲ → Writing → Committing → Idle
//
// Pausing asks every host to hold the job's tasks at their next safe point
// within a budget; Quieting asks until no host has an unacknowledged
// message of the job nor a task not paused (a task spawned meanwhile is
// paused in turn), polling with backoff until a deadline; Writing asks every
// host to write its tasks' checkpoints into the set; Committing writes the
// manifest, which completes the set. Every failure, and a host lost while
// the round runs, ends it: the tasks resume and the incomplete set is
// discarded (actions Resume and Discard), and the previous set stands. A
// commit resumes the tasks and makes the set the newest.
//
// A rollback round goes
//
//	Idle → Killing → Restoring → Idle
//
// It starts when a host with tasks of the job is lost (event HostLost) and
// the job has a complete checkpoint: Killing ends the job's surviving tasks
// everywhere without notices, and drops their messages; Restoring starts
// every task of the set again on the hosts left. A host whose kill failed
// (its call timed out: it may still run tasks of the job) is asked again,
// alone, up to 5 times in all before the restore; a failed restore starts
// the rollback again (kill, restore), up to 3 times before the job is
// given up. A host lost during a rollback makes another one follow. A job lost with no checkpoint cannot
// roll back: the machine says so (action Unrecoverable); a job that asked
// for checkpoints ([Config.EndLost]) is to end at once, another goes on
// without the lost tasks, whose loss the daemon reports as PVM does.
//
// # Pause budget
//
// A task reaches safe points at its own pace. Hosts report, with each
// pause reply, the longest interval between safe points they have seen of
// the job's tasks (counting the time a task not yet paused has run since
// its last one). The machine keeps the largest report of the latest round
// that had one, and the next Pause asks for Factor times it, bounded by
// [Config.MinPause] and [Config.MaxPause]: a job whose tasks reach safe
// points every 0.7 s gets a budget over 0.7 s, so its checkpoints succeed
// from the round after the first report on.
//
// # The host half
//
// [Host] is what each host decides about the steps of a round for its own
// tasks, one seam (Step: a [HostEvent] in, [HostEffect]s out) with no
// I/O either: a pause of a round already resumed is refused, a write is
// taken only for a task paused for the step's round and at its safe
// point, a release waits for its task's write under way, and a restart's
// tasks are staged only where no task of their TID runs or moves.
// Package daemon steps it under the lock that owns the host's tasks.
package jobck
