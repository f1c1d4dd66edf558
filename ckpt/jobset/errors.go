package jobset

import "errors"

// Sentinel errors. The functions of the package wrap them with the path of
// the file or set at fault and what was found; test them with errors.Is.
var (
	// ErrIncomplete: a set has no manifest (it is being written, or its
	// writing was interrupted) or lacks a task checkpoint its manifest
	// names.
	ErrIncomplete = errors.New("incomplete job checkpoint")
	// ErrTampered: a manifest's MAC does not match its contents (it was
	// altered, or written under another key), a task checkpoint's size or
	// SHA-256 differs from what the manifest records, or a manifest lies in
	// a set directory other than the one it names.
	ErrTampered = errors.New("job checkpoint fails authentication")
	// ErrVersion: a manifest was written in a newer format than this build
	// reads.
	ErrVersion = errors.New("unsupported job manifest format version")
	// ErrCorrupt: the bytes are not a well-formed manifest (wrong magic,
	// wrong length, a body that does not decode or names bad entries), or a
	// file of a set is not a regular file.
	ErrCorrupt = errors.New("corrupt job manifest")
	// ErrMode: a file of a set can be read or written by users other than
	// its owner (its mode is not 0600 or stricter).
	ErrMode = errors.New("job checkpoint file readable by others")
	// ErrNoCheckpoint: a job has no set that is complete and verifies.
	ErrNoCheckpoint = errors.New("no complete job checkpoint")
	// ErrName: a job name or task checkpoint file name is not acceptable.
	ErrName = errors.New("bad job checkpoint name")
	// ErrKey: the key is not KeySize bytes long.
	ErrKey = errors.New("bad job checkpoint key")
)
