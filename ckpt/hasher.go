package ckpt

import (
	"hash"
	"sync"
)

// hashPiece is how much of a numeric block is read before its MAC
// computation is handed on (to the hashing goroutine, or GMAC's workers),
// so that the copy of one piece overlaps the hashing of the one before (a
// block written under a GMAC is handed on whole: see sink.writeBlock).
const hashPiece = 256 << 10

// asyncMin is the smallest numeric block hashed alongside: below it, the
// hand-over to the hashing goroutine costs more than it saves.
const asyncMin = 512 << 10

// hasher feeds a MAC in stream order, either inline or, for the memory of
// numeric blocks (which nothing modifies until the checkpoint is done), on
// a goroutine of its own that overlaps the copy or the write. An inline
// write first waits for the pieces queued before it.
type hasher struct {
	mac  hash.Hash
	jobs chan []byte
	wg   sync.WaitGroup
}

func newHasher(mac hash.Hash) *hasher { return &hasher{mac: mac} }

// write hashes p now.
func (h *hasher) write(p []byte) {
	if h.jobs != nil {
		h.wg.Wait()
	}
	h.mac.Write(p)
}

// writeAsync queues p for hashing; p must not change until sum or stop.
func (h *hasher) writeAsync(p []byte) {
	if h.jobs == nil {
		h.jobs = make(chan []byte, 64)
		go func(mac hash.Hash, jobs <-chan []byte, wg *sync.WaitGroup) {
			for p := range jobs {
				mac.Write(p)
				wg.Done()
			}
		}(h.mac, h.jobs, &h.wg)
	}
	h.wg.Add(1)
	h.jobs <- p
}

// sum waits for the queued pieces and returns the MAC.
func (h *hasher) sum() []byte {
	if h.jobs != nil {
		h.wg.Wait()
	}
	return h.mac.Sum(nil)
}

// stop ends the hashing goroutine, if any, once its queue is done.
func (h *hasher) stop() {
	if h.jobs != nil {
		h.wg.Wait()
		close(h.jobs)
		h.jobs = nil
	}
}
