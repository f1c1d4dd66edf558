package ckpt

import "errors"

// Sentinel errors. Read and Write wrap them with what went wrong and where
// (the section and the byte offset); test them with errors.Is.
var (
	// ErrCorrupt: the bytes are not a well-formed checkpoint (wrong magic,
	// a malformed section, a length beyond its limit, a state that does not
	// decode into its task type) although their MAC could not be found
	// wrong.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrTruncated: the stream ended before the checkpoint did.
	ErrTruncated = errors.New("truncated checkpoint")
	// ErrTampered: the checkpoint's MAC does not match its contents: it was
	// altered after it was written, or it was written under another key.
	ErrTampered = errors.New("checkpoint fails authentication")
	// ErrVersion: the checkpoint was written in a newer format than this
	// build reads.
	ErrVersion = errors.New("unsupported checkpoint format version")
	// ErrName: a store was given a name that is not a plain file name.
	ErrName = errors.New("bad checkpoint name")
)
