// Package jobset stores coordinated job checkpoints: every task of a job
// (the tasks of one parallel program) is checkpointed at once, and the
// resulting set of files lets the whole job restart after a host is lost.
//
// # Layout
//
// Sets live in the shared directory every host mounts (the root):
//
//	<root>/job-<job>/                  JobDir, mode 0700
//	<root>/job-<job>/ckpt-00000007/    SetDir of sequence number 7, mode 0700
//	    <task checkpoint files>        one per task, mode 0600, any names
//	                                   CheckFileName accepts
//	    MANIFEST                       written last, mode 0600
//
// A job name is 1 to 128 characters of [A-Za-z0-9._-], not starting with
// a dot. Sequence numbers are zero-padded to 8 digits (they grow beyond
// that if need be; only the canonical form is recognised). Files whose
// names start with a dot are temporary files and are ignored.
//
// # Writing a set
//
// The master picks the next sequence number (NextSeq) and creates the set
// directory (NewSet). Each daemon writes the checkpoints of the tasks it
// hosts into it, each atomically (temporary file, fsync, rename, mode
// 0600: ckpt.Dir.Save), through a Summer that yields the Entry's size and
// SHA-256 as the bytes go out. When all daemons have reported their
// entries, the master writes the Manifest (WriteManifest), atomically as
// well: the set is complete exactly when its MANIFEST exists. A failure
// before that (a full disk, an unwritable directory, a daemon lost) leaves
// an incomplete set that readers pass over; the job goes on from its
// previous set. Prune then applies the retention policy (keep the newest
// K verified sets).
//
// # Reading a set
//
// Latest returns the newest set whose manifest authenticates and whose
// files verify, and explains each newer set it passed over, naming the bad
// file: no manifest (ErrIncomplete), a manifest altered or of another set
// (ErrTampered), of a newer format (ErrVersion), malformed (ErrCorrupt), a
// task checkpoint missing (ErrIncomplete), of another size or SHA-256
// (ErrTampered), or readable by others (ErrMode).
//
// # Manifest format, version 3
//
// The manifest is framed and authenticated like a task checkpoint
// (integers little endian):
//
//	magic    8 bytes  "DPVMJOBM"
//	version  uint16   FormatVersion (3)
//	flags    uint16   0
//	length   uint32   the body's length
//	key id   8 bytes  the identifier of the key of the MAC (zero: none)
//	body     msgpack map: job, seq, created, root, program, args, entries,
//	         and prev_seq, prev_sha256 (the previous complete set: its
//	         sequence number and its manifest file's SHA-256) when there
//	         is one, and owner (the user whose job it is) when there is
//	         one; each entry a map: tid, type, host, file, bytes, sha256
//	mac      32 bytes HMAC-SHA256, under the cluster's manifest key, of
//	         every byte before it
//
// Version 2 has no owner, version 1 no key id and no prev fields either;
// both are still read, version 1 under the key the reader gives. A reader
// of version 2 or 3 with several keys picks the one named
// (ReadManifestWith).
//
// LatestName in a job's directory is a copy of the newest complete set's
// manifest (WriteLatestRecord): it outlives the sets, so a reader meeting
// an older set can tell that a newer one existed (ReadLatestRecord).
//
// The whole file is at most MaxManifestSize bytes. A reader checks the
// magic, refuses a newer version before anything else (its framing may
// differ), checks the length and the MAC, and only then decodes the body.
// The MAC covers the job's name and the sequence number, and ReadManifest
// refuses a manifest lying in a directory other than the one they name,
// so an authentic manifest cannot be replayed into another set. Task
// checkpoints are bound to the manifest by their SHA-256 (and carry MACs
// of their own, checked when they are read).
package jobset
