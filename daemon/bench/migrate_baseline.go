package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dpvm/dpvm/ckpt"
)

// bulkChunk is the body size of the raw messages Bulk sends.
const bulkChunk = 1 << 20

// Bulk sends src one way over the pair's stream, as raw messages of up to
// 1 MiB written straight from src (a 5-byte header, then the body), and
// waits for the echo server's count of them: raw quic-go's one-connection
// throughput for those bytes, which direct migration is measured against.
// It returns the time from the first write to the count's arrival.
func (q *QUICPair) Bulk(ctx context.Context, src []byte) (time.Duration, error) {
	defer q.withDeadline(ctx)()
	var hdr [rawHeader]byte
	hdr[0] = rawRate
	t0 := time.Now()
	sent := 0
	for off := 0; off < len(src); off += bulkChunk {
		body := src[off:min(off+bulkChunk, len(src))]
		binary.LittleEndian.PutUint32(hdr[1:], uint32(len(body)))
		if _, err := q.st.Write(hdr[:]); err != nil {
			return 0, fmt.Errorf("bench: raw write: %w", err)
		}
		if _, err := q.st.Write(body); err != nil {
			return 0, fmt.Errorf("bench: raw write: %w", err)
		}
		sent++
	}
	if _, err := q.st.Write(rawMessage(rawRateEnd, nil)); err != nil {
		return 0, fmt.Errorf("bench: raw write: %w", err)
	}
	fin := make([]byte, rawHeader+8)
	if _, err := io.ReadFull(q.st, fin); err != nil {
		return 0, fmt.Errorf("bench: raw read: %w", err)
	}
	d := time.Since(t0)
	if got := binary.LittleEndian.Uint64(fin[rawHeader:]); fin[0] != rawRateFin || got != uint64(sent) {
		return d, fmt.Errorf("receiver counted %d of %d messages: %w", got, sent, ErrEcho)
	}
	return d, nil
}

// FileRoundTrip writes buf to a new file in dir, fsyncs and closes it,
// opens it again, reads it back into new memory and closes it: the work
// indirect migration does with a checkpoint in a shared directory, without
// encoding, decoding, authentication, the rename and the directory's
// fsync. The read lands in memory allocated for it the way a restore
// allocates a numeric block (ckpt.NewBytes: huge pages advised), since the
// destination of a move has no buffer of that size ready either: fresh
// memory costs its page faults, and on this kind of virtual machine an
// occasional stall of a fresh allocation, in both. It returns the time that took and
// then checks the bytes read; removing the file afterwards (which frees
// its cached pages: about 6 ms for 16 MiB here) is not counted.
func FileRoundTrip(dir string, buf []byte) (time.Duration, error) {
	t0 := time.Now()
	f, err := os.CreateTemp(dir, ".dpvm-bench-*.tmp")
	if err != nil {
		return 0, fmt.Errorf("bench: file baseline: %w", err)
	}
	name := f.Name()
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return 0, fmt.Errorf("bench: file baseline: write %s: %w", name, err)
	}
	g, err := os.Open(name)
	if err != nil {
		os.Remove(name)
		return 0, fmt.Errorf("bench: file baseline: %w", err)
	}
	got := ckpt.NewBytes(len(buf))
	_, err = io.ReadFull(g, got)
	if err == nil {
		// The file holds exactly buf: the next read must find its end.
		var one [1]byte
		if n, rerr := g.Read(one[:]); n != 0 || !errors.Is(rerr, io.EOF) {
			err = fmt.Errorf("file is longer than the %d bytes written", len(buf))
		}
	}
	g.Close()
	d := time.Since(t0)
	rerr := os.Remove(name)
	if err != nil {
		return 0, fmt.Errorf("bench: file baseline: read %s: %w", name, err)
	}
	if rerr != nil {
		return 0, fmt.Errorf("bench: file baseline: %w", rerr)
	}
	if !bytes.Equal(got, buf) {
		return 0, fmt.Errorf("bench: file baseline: %s read back differs from what was written", name)
	}
	return d, nil
}
