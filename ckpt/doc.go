// Package ckpt owns the checkpoint format of a task — a versioned header,
// the task's type and TID, its state, its undelivered mailbox, its
// sequence state, group memberships and notify registrations, and a
// checksum — with streaming encode and decode and the two stores a
// migration uses: direct (a byte stream to the destination daemon) and
// indirect (a file in a shared directory).
package ckpt
