// Package ckpt owns the checkpoint of a task: its format, a streaming
// encoder and decoder with a fast path for numeric state, and the
// indirect store (a shared directory). A migration moves a checkpoint
// either directly, Write on one daemon's end of a stream and Read on the
// other's (encoding, transfer and decoding overlap), or indirectly, through
// a Dir every host mounts (SaveThenSync, then Open and Read while the
// file is synced, then Remove once the move has committed; Save syncs
// before the rename, for files that must survive a crash). Write authenticates with HMAC-SHA256; WriteWith
// chooses a GMAC computed on all cores (files) or, for a stream that
// authenticates its bytes itself, no MAC at all (see the flags below).
//
// Write reads the task's struct while it writes and Read decodes while it
// reads: a state is never held twice in memory, and a slice of fixed-size
// numbers goes out of and comes into the task's memory without conversion
// on little-endian hosts.
//
// # Format, version 2
//
// All integers of the framing are little endian.
//
//	checkpoint = header, [salt], meta section, state section, trailer
//
//	header     16 bytes:
//	             magic    8 bytes  "DPVMCKPT"
//	             version  uint16   the format version (Format; 2)
//	             flags    uint16   the authentication, one of:
//	                               0 HMAC, 1 GMAC, 2 channel (AuthHMAC,
//	                               AuthGMAC, AuthChannel); other values
//	                               are refused
//	             reserved uint32   0
//	key id     8 bytes, from version 2 on: the identifier of the key the
//	           checkpoint is authenticated under (WriteOptions.KeyID; the
//	           cluster secret's key id), which a reader holding several keys
//	           uses to pick one (Limits.KeyFor); zero names no key. It is
//	           covered by the MAC like the header.
//	salt       16 bytes, only with flags 1: random, never reused under a key
//
//	section    = kind (1 byte: 'M' meta, 'S' state), chunk*, end
//	chunk      = length uint32 (1 ≤ length ≤ 16 MiB), length bytes of content
//	end        = uint32 0
//
//	trailer    41 bytes:
//	             tag      1 byte   'E'
//	             length   uint64   bytes before the trailer
//	             mac      32 bytes over every byte before it (header, key id, salt,
//	                               sections, tag and length), by the flags:
//
//	flags 0    HMAC-SHA256 under the cluster's checkpoint key.
//	flags 1    K = HMAC-SHA256(key, "dpvm checkpoint gmac v1\x00" ‖ salt);
//	           the bytes are cut into 1 MiB pieces (the last one shorter);
//	           piece i gets tag_i = AES-256-GCM under K with nonce
//	           le64(i) ‖ 4 zero bytes, no plaintext and the piece as
//	           additional data (a GMAC); mac = HMAC-SHA256(K, tag_0 ‖ … ‖
//	           tag_n-1 ‖ le64(bytes)). The pieces are tagged on all cores,
//	           and AES-GCM runs about 4× faster than SHA-256 here.
//	flags 2    no MAC: CRC-32C (Castagnoli) of the bytes, little endian,
//	           then 28 zero bytes. Only for a channel that authenticates
//	           its peer and protects its bytes (a QUIC stream between
//	           daemons under mutual TLS, a direct migration); a reader
//	           accepts it only when told its source is one (Limits.Channel)
//	           and refuses it otherwise with ErrTampered.
//
// Version 1 is version 2 without the key id; readers still accept it and
// check it under the key they are given (a daemon tries every key of its
// cluster secret).
//
// A section's content is its chunks' contents concatenated; the chunking
// carries no meaning (a writer cuts where its buffer fills, and writes a
// large numeric slice as chunks straight from memory). The framing lets a
// reader find the trailer without understanding the content, so it checks
// the MAC before it reports anything wrong inside a section, and lets it
// read exactly the checkpoint's bytes from a stream that carries more.
//
// The meta section's content is one msgpack map (see wireMeta) with these
// keys; readers ignore keys they do not know and new keys may be added
// without a new version:
//
//	type         string  the registered task type
//	tid, parent  uint    TIDs
//	job, epoch   uint    the job, and the route epoch the task moves to
//	mailbox      array   undelivered messages, in mailbox order
//	early        array   arrivals waiting for a sequence gap to fill
//	             each message an array [from, to, seq, tag, encoding, body]
//	             (body: bin, in the payload encoding task.Encoding names)
//	in_seq       array   [sender, next sequence number expected], by sender
//	out_seq      array   [receiver, last sequence number used], by receiver
//	groups       array   [group, instance]
//	watchers     array   [tid, tag]: tasks to notify when this one exits
//	host_watches array   [kind, host, tag]: host-event registrations
//	created      array   [seconds, nanoseconds] since 1970 UTC, absent for
//	                     the zero time
//	siblings     array   TIDs the task's spawn started, in spawn order, the
//	                     task among them (pvm_siblings); absent when unknown
//
// The state section's content is one value in the state encoding of the
// task's struct: msgpack, with the task's struct walked by this package
// rather than by msgpack so that numeric data takes a fast path:
//
//   - A struct is a map from field name to value. Its fields are msgpack's:
//     exported fields under their name or the name in a `msgpack:"name"`
//     tag, fields tagged `msgpack:"-"` left out, fields of an embedded
//     struct inlined. A reader skips names its type does not have and
//     leaves fields that are absent at their zero value, so a task type
//     may gain and lose fields between builds.
//   - A slice or array of fixed-size numbers (int8 to int64, uint8 to
//     uint64, int and uint as 64 bits, float32, float64, complex64,
//     complex128, and named types of those kinds) is a numeric block: a
//     msgpack fixext8 (0xd7) whose ext type is the element code below and
//     whose 8 data bytes are the block's length in bytes (uint64); the
//     elements follow as raw little-endian bytes (a complex number as its
//     real then imaginary part), outside msgpack's own framing. A nil slice
//     is msgpack nil; an empty one is a block of length 0.
//   - Other slices and arrays are msgpack arrays, maps are msgpack maps
//     (keys of ordered kinds sorted, so equal states give equal bytes),
//     pointers are nil or their target, each element, value and target in
//     the state encoding.
//   - A complex number is a msgpack array [real, imaginary] of floats.
//   - Everything else — booleans, numbers, strings, interfaces, and types
//     that encode themselves (msgpack.CustomEncoder, msgpack.Marshaler,
//     encoding.BinaryMarshaler or TextMarshaler, a msgpack extension, like
//     time.Time and task.TID) — is plain msgpack.
//
// Element codes (append only): 1 uint8, 2 int8, 3 uint16, 4 int16,
// 5 uint32, 6 int32, 7 float32, 8 uint64, 9 int64, 10 float64, 11 int,
// 12 uint, 13 complex64, 14 complex128. A reader also accepts a msgpack
// array for a numeric slice.
//
// # Reading untrusted bytes
//
// Read refuses, with an error wrapping the sentinel and naming the section
// and offset: a stream that ends early (ErrTruncated), a MAC that does not
// match (ErrTampered: a flipped bit anywhere in the content, a wrong key; a
// checkpoint without a MAC from a source not said to authenticate it),
// a wrong magic, a malformed section, a chunk over 16 MiB, content beyond
// Limits, or a state that does not decode into its type (ErrCorrupt), a
// newer version (ErrVersion), and a task type this binary does not have
// (task.ErrUnknownType). It allocates no more than Limits.MaxState for the
// state in all, and a numeric block is allocated in full only when the
// stream is known to hold it (a regular file, an in-memory reader) or it
// is at most Limits.Prealloc; otherwise it grows, doubling, as its bytes
// arrive. A value msgpack would decode by allocating a declared length
// (a binary, an interface, a type that decodes itself) is first copied as
// its bytes arrive, then decoded from the copy. Values nest at most 10000
// deep.
package ckpt
