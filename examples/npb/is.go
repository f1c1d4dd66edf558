package npb

import (
	"fmt"
	"math/bits"

	"github.com/dpvm/dpvm/task"
)

// ISWorker is one task of IS. Each task generates a block of the keys; every
// ranking sends each key to the task that owns its bucket (buckets are
// split among the tasks so each gets about the same number of keys), and
// that task counts its key range. The keys themselves are derived data: a
// restored worker regenerates them and reapplies the iterations' edits.
type ISWorker struct {
	Place
	Warm   bool // the untimed ranking is done
	Timed  bool // the barrier before the timed region is passed
	It     int  // timed iterations done
	Passed int  // partial checks this task passed

	p      ISParams
	k0     int       // global index of keys[0]
	keys   []int32   // this task's block of the key array
	send   []int32   // keys ordered by bucket
	segs   [][]int32 // the keys of this task's buckets: its own, then the chunks received
	counts []int32   // cumulative counts of this task's key range
	minKey int
	offset int // number of keys below minKey
	chunk  int // keys per exchange message; 0 is isChunk
}

func (w *ISWorker) place() *Place { return &w.Place }

// Run executes the worker as a dpvm task.
func (w *ISWorker) Run(c *task.Ctx) error { return runWorker(c, w) }

// isKeys fills keys with the keys of global indices start, start+1, …:
// key = int(MAX_KEY/4 · (r1+r2+r3+r4)) with four draws per key.
func isKeys(p ISParams, start int, keys []int32) {
	x := Skip(Seed, 4*uint64(start))
	k := float64(p.MaxKey() / 4)
	const a = RandA
	for i := range keys {
		x = (x * a) & mask46
		s := float64(x) * r46
		x = (x * a) & mask46
		s += float64(x) * r46
		x = (x * a) & mask46
		s += float64(x) * r46
		x = (x * a) & mask46
		s += float64(x) * r46
		keys[i] = int32(k * s)
	}
}

// edit applies iteration it's changes to the key array (the reference sets
// key[it] = it and key[it+10] = MAX_KEY - it before ranking).
func (w *ISWorker) edit(it int) {
	for _, e := range [2][2]int{{it, it}, {it + isIterations, w.p.MaxKey() - it}} {
		if i := e[0] - w.k0; i >= 0 && i < len(w.keys) {
			w.keys[i] = int32(e[1])
		}
	}
}

// rank ranks the keys for iteration it and returns how many partial checks
// this task passed.
func (w *ISWorker) rank(cm comm, it int) (int, error) {
	p := w.p
	np, me := cm.size(), cm.rank()
	lb := isLogBuckets(p, np)
	nb := 1 << lb
	shift := p.LogMaxKey - lb
	w.edit(it)
	// Local bucket counts, plus the test keys this task holds (each test
	// index lives on exactly one task, the others contribute 0).
	tot := make([]int64, nb+5)
	keys := w.keys
	isBucketCount(tot[:nb], keys, uint(shift))
	local := make([]int, nb+1) // bucket start offsets in send
	for b := range nb {
		local[b+1] = local[b] + int(tot[b])
	}
	for i, ti := range p.TestIndex {
		if j := ti - w.k0; j >= 0 && j < len(keys) {
			tot[nb+i] = int64(keys[j]) + 1 // +1: tell 0 from "not mine"
		}
	}
	// The all-reduce comes before the scatter: the other tasks received
	// the last ranking's keys in place, as views of send (see exchange),
	// and an all-reduce completes only once every task has finished that
	// ranking and contributed to this one, so send is ours again.
	if err := sumSafe(cm, tot); err != nil {
		return 0, err
	}
	send := w.send[:len(keys)]
	isScatter(send, keys, local[:nb], shift)
	// Split the buckets: task q owns [bs[q], bs[q+1]).
	bs := make([]int, np+1)
	bs[np] = nb
	acc, q := int64(0), 1
	total := int64(p.Keys())
	for b := 0; b < nb && q < np; b++ {
		acc += tot[b]
		for q < np && acc >= int64(q)*total/int64(np) {
			bs[q] = b + 1
			q++
		}
	}
	for ; q < np; q++ {
		bs[q] = nb
	}
	// Exchange the keys: my keys of task q's buckets go to q. The keys of
	// my buckets stay in segments, each ordered by bucket: mine, then the
	// chunks each sender sent, as they arrived.
	clear(w.segs) // the last exchange's chunks are not kept alive through this one
	segs := append(w.segs[:0], send[local[bs[me]]:local[bs[me+1]]])
	if np > 1 {
		want := 0
		for b := bs[me]; b < bs[me+1]; b++ {
			want += int(tot[b])
		}
		got := len(segs[0])
		if c, team, ok := teamOf(cm); ok {
			// As a dpvm task: one Alltoallv on the worker's task.Comm,
			// whose waits are safe points (copies, where exchange
			// lends its keys).
			out := make([][]int32, np)
			for q := range np {
				if q != me {
					out[q] = send[local[bs[q]]:local[bs[q+1]]]
				}
			}
			in, err := task.Alltoallv(c, team, out)
			if err != nil {
				return 0, err
			}
			for k := 1; k < np; k++ {
				if part := in[(me-k+np)%np]; len(part) > 0 {
					segs = append(segs, part)
					got += len(part)
				}
			}
		} else {
			for k := 1; k < np; k++ {
				to, from := (me+k)%np, (me-k+np)%np
				var n int
				var err error
				segs, n, err = w.exchange(cm, to, from, send[local[bs[to]]:local[bs[to+1]]], segs)
				if err != nil {
					return 0, err
				}
				got += n
			}
		}
		if got != want {
			return 0, fmt.Errorf("IS: received %d keys for buckets %d..%d, want %d", got, bs[me], bs[me+1], want)
		}
	}
	w.segs = segs
	// Count my key range and accumulate: counts[v-minKey] = number of keys
	// <= v overall.
	w.minKey = bs[me] << shift
	maxKey := bs[me+1] << shift
	w.offset = 0
	for b := 0; b < bs[me]; b++ {
		w.offset += int(tot[b])
	}
	nk := maxKey - w.minKey
	if cap(w.counts) < nk {
		w.counts = make([]int32, nk)
	}
	counts := w.counts[:nk]
	if err := isRankBuckets(counts, segs, w.minKey, 1<<shift, int32(w.offset)); err != nil {
		return 0, err
	}
	w.counts = counts
	// Partial verification, by the owner of key k-1.
	passed := 0
	for i := range 5 {
		k := int(tot[nb+i]) - 1
		if k <= 0 || k > p.Keys()-1 || k-1 < w.minKey || k-1 >= maxKey {
			continue
		}
		if int(counts[k-1-w.minKey]) == p.expectedRank(i, it) {
			passed++
		}
	}
	return passed, nil
}

// isBucketsPerTask is how many buckets (log₂) each task's share of the key
// range spans on average when the class allows that few.
const isBucketsPerTask = 5

// isLogBuckets is log₂ of the number of buckets the keys are sorted into
// for np tasks: NPB's count (1024) caps it, and fewer buckets make the
// scatter faster (with 1024 buckets its writes go to more places than
// the L1 cache holds lines), while 32 per task keep the tasks' shares of
// the keys within a few percent of each other. The ranks do not depend on
// it. np is a power of two no larger than NPB's count.
func isLogBuckets(p ISParams, np int) int {
	return min(p.LogBuckets, isBucketsPerTask+bits.Len(uint(np))-1)
}

// The three passes over the keys of a ranking are functions of their own
// with the shift an unsigned count below 32, so that the compiler checks
// neither the shift nor (where it can) the indices inside their loops.

// isBucketCount adds to tot[b] the number of keys whose bucket (key >>
// shift) is b. Every key's bucket must be below len(tot).
func isBucketCount(tot []int64, keys []int32, shift uint) {
	shift &= 31
	for _, k := range keys {
		tot[uint32(k)>>shift]++
	}
}

// isScatter writes keys to send ordered by bucket (key >> shift): bucket
// b's keys go from send[start[b]] on, in the order of keys. start[b] must be
// the number of keys in buckets below b. (Unlike the other two passes it
// keeps a signed shift: that form measured a third faster here, the
// unsigned one spilling the key to the stack.)
func isScatter(send, keys []int32, start []int, shift int) {
	ptr := make([]int, len(start))
	copy(ptr, start)
	for _, k := range keys {
		b := k >> shift
		send[ptr[b]] = k
		ptr[b]++
	}
}

// isRankBuckets sets counts[v] to below plus the number of keys k <= v+minKey
// in segs, for v < len(counts), bucket by bucket (a bucket holds width
// keys) as NPB does: a bucket's section of counts is cleared, counted and
// accumulated while it is in the L1 cache, instead of three passes over
// the whole array. Every segment must hold keys in [minKey, minKey+len(counts))
// ordered by bucket (as the scatter and the exchange leave them).
func isRankBuckets(counts []int32, segs [][]int32, minKey, width int, below int32) error {
	cur := make([]int, len(segs))
	run := below
	for lo := 0; lo < len(counts); lo += width {
		sec := counts[lo:min(lo+width, len(counts))]
		clear(sec)
		base := int32(minKey + lo)
		n := uint32(len(sec))
		for i, seg := range segs {
			c := cur[i]
			for ; c < len(seg); c++ {
				v := uint32(seg[c] - base)
				if v >= n {
					break
				}
				sec[v]++
			}
			cur[i] = c
		}
		for i, c := range sec {
			run += c
			sec[i] = run
		}
	}
	for i, seg := range segs {
		if cur[i] != len(seg) {
			return fmt.Errorf("IS: key %d at %d of segment %d is out of bucket order or outside [%d, %d)", seg[cur[i]], cur[i], i, minKey, minKey+len(counts))
		}
	}
	return nil
}

// isChunk is the most keys one message carries (2 MiB). A task's keys for
// another go in chunks, the last one short (empty if need be), and every
// task sends one chunk and then receives one: at most a chunk per pair of
// tasks is in flight, instead of every key that changes task.
const isChunk = 1 << 19

// exchange sends out to rank to and receives from rank from, in chunks of
// w.chunk keys (isChunk by default). It appends the chunks received to segs
// (each is the body of its message, not copied: see recvSlice) and
// returns them with the number of keys received. The chunks go in place:
// a receiver on this task's host gets views of out, which it reads until
// its next ranking starts, and its part in that ranking's all-reduce
// tells the sender so (rank reuses out only after that).
func (w *ISWorker) exchange(cm comm, to, from int, out []int32, segs [][]int32) ([][]int32, int, error) {
	chunk := w.chunk
	if chunk <= 0 {
		chunk = isChunk
	}
	sent, got, sendDone, recvDone := 0, 0, false, false
	for !sendDone || !recvDone {
		if !sendDone {
			end := min(len(out), sent+chunk)
			if err := cm.sendInPlace(to, tagKeys, out[sent:end]); err != nil {
				return nil, 0, err
			}
			sendDone = end-sent < chunk
			sent = end
		}
		if !recvDone {
			part, err := recvSlice(cm, from, tagKeys, -1, task.Payload.Int32s)
			if err != nil {
				return nil, 0, err
			}
			if len(part) > chunk {
				return nil, 0, fmt.Errorf("IS: a chunk of %d keys from rank %d, at most %d", len(part), from, chunk)
			}
			recvDone = len(part) < chunk
			if len(part) > 0 {
				segs = append(segs, part)
			}
			got += len(part)
		}
	}
	return segs, got, nil
}

// fullVerify sorts this task's keys by their final ranks and checks the
// order, across task boundaries too. It returns the number of keys out of
// order.
func (w *ISWorker) fullVerify(cm comm) (int64, error) {
	np, me := cm.size(), cm.rank()
	n := 0
	for _, seg := range w.segs {
		n += len(seg)
	}
	// The keys are not needed any more: sort into their array when it
	// has room (it is allocated with an eighth to spare).
	var sorted []int32
	if cap(w.keys) >= n {
		sorted = w.keys[:n]
	} else {
		sorted = make([]int32, n)
	}
	ptr := append([]int32(nil), w.counts...)
	base := int32(w.offset)
	mk := int32(w.minKey)
	bad := int64(0)
	for _, seg := range w.segs {
		for _, k := range seg {
			i := k - mk
			ptr[i]--
			pos := ptr[i] - base
			if pos < 0 || int(pos) >= len(sorted) {
				bad++
				continue
			}
			sorted[pos] = k
		}
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1] > sorted[i] {
			bad++
		}
	}
	// Each task passes its largest key (or -1 when it has none) up.
	if np > 1 {
		last := []int32{-1}
		if len(sorted) > 0 {
			last[0] = sorted[len(sorted)-1]
		}
		var prev []int32
		if c, team, ok := teamOf(cm); ok {
			to, from := me+1, me-1
			if to == np {
				to = task.NoRank
			}
			if from < 0 {
				from = task.NoRank
			}
			if err := team.SendRecv(c, to, last, from, &prev); err != nil {
				return 0, err
			}
		} else {
			if me+1 < np {
				if err := cm.send(me+1, tagHalo, last); err != nil {
					return 0, err
				}
			}
			if me > 0 {
				if err := cm.recv(me-1, tagHalo, &prev); err != nil {
					return 0, err
				}
			}
		}
		if me > 0 {
			if len(prev) != 1 {
				return 0, fmt.Errorf("IS: bad boundary message of %d keys", len(prev))
			}
			if len(sorted) > 0 && prev[0] > sorted[0] {
				bad++
			}
		}
	}
	return bad, nil
}

func (w *ISWorker) run(cm comm, h *hooks) (*Report, error) {
	p, err := ISParamsFor(w.Class)
	if err != nil {
		return nil, err
	}
	w.p = p
	b := blockBounds(p.Keys(), cm.size())
	w.k0 = b[cm.rank()]
	n := b[cm.rank()+1] - w.k0
	if cm.rank() == 0 && n < 2*isIterations+1 {
		return nil, fmt.Errorf("IS class %s: %d keys per task is too few: %w", p.Class, n, ErrBadNP)
	}
	w.keys = make([]int32, n, n+n/8)
	w.send = make([]int32, n)
	isKeys(p, w.k0, w.keys)
	// Reapply the edits of the rankings already done.
	if w.Warm {
		w.edit(1)
	}
	for it := 1; it <= w.It; it++ {
		w.edit(it)
	}
	// Each ranking ends at a safe point, except the last: what follows it
	// reads its buckets, which are not kept in fields. Run re-entered
	// after it ranks again, its collectives replayed by the worker's
	// task.Comm (their waits are safe points where cm can: teamOf).
	if !w.Warm {
		if _, err := w.rank(cm, 1); err != nil {
			return nil, err
		}
		w.Warm = true
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if !w.Timed {
		if err := barrierSafe(cm); err != nil {
			return nil, err
		}
		w.startTimer(cm, h)
		w.Timed = true
		if err := h.safe(); err != nil {
			return nil, err
		}
	}
	if w.It == isIterations && w.segs == nil {
		if _, err := w.rank(cm, w.It); err != nil {
			return nil, err
		}
	}
	for w.It < isIterations {
		passed, err := w.rank(cm, w.It+1)
		if err != nil {
			return nil, err
		}
		w.Passed += passed
		w.It++
		h.report(w.It, isIterations)
		if w.It < isIterations {
			if err := h.safe(); err != nil {
				return nil, err
			}
		}
	}
	if err := barrierSafe(cm); err != nil {
		return nil, err
	}
	var t float64
	if cm.rank() == 0 {
		t = w.elapsed(h)
	}
	bad, err := w.fullVerify(cm)
	if err != nil {
		return nil, err
	}
	sums := []int64{int64(w.Passed), bad}
	if err := sumSafe(cm, sums); err != nil {
		return nil, err
	}
	if cm.rank() != 0 {
		return nil, nil
	}
	partial, full := int(sums[0]), sums[1] == 0
	r := w.finish("is", isIterations, t, p.Mop())
	r.Values.FullVerified = &full
	r.Values.PartialVerified = &partial
	Verify(r)
	return r, nil
}
