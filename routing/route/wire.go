package route

import (
	"encoding/binary"
	"fmt"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// AskSize is the binary size of one query: the TID, u64 little-endian.
const AskSize = 8

// AppendAsk appends the binary encoding of a query for tid's route to dst:
// the body of the frame the daemon will send as KindRouteAsk, many
// queries to one host batched in one frame. An answer is a
// routing.Refusal (the TID and its route), encoded with
// routing.AppendRefusal.
func AppendAsk(dst []byte, tid task.TID) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(tid))
}

// DecodeAsks decodes a batch of queries, calling fn on each TID in order.
// A body that is not a whole number of queries is refused with
// routing.ErrMalformed before fn is called.
func DecodeAsks(b []byte, fn func(task.TID)) error {
	if len(b)%AskSize != 0 {
		return fmt.Errorf("route query frame of %d bytes: %w", len(b), routing.ErrMalformed)
	}
	for ; len(b) > 0; b = b[AskSize:] {
		fn(task.TID(binary.LittleEndian.Uint64(b)))
	}
	return nil
}
