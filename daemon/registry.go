package daemon

import (
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dpvm/dpvm/task"
)

// registry is the master's job registry: the jobs it runs and their
// coordinators, where each job's output goes, the hosts each job has
// tasks on, the newest complete checkpoint set of each job name, and the
// TIDs restored for hosts not (yet) in the machine. One lock, mu, owns
// it; it is taken with no other lock held and calls nothing that locks.
// A job's coordinator has its own lock (jobState.mu).
type registry struct {
	mu   sync.Mutex
	next uint64 // the last job number handed out
	byID map[uint64]*jobState
	// outputs maps a job to the console its output goes to, and
	// listeners to what hears of its rollbacks (an embedded run).
	outputs   map[uint64]io.Writer
	listeners map[uint64]func(JobNote)
	setSeqs   map[string]uint64               // the newest complete checkpoint set of each job name
	tidFloor  map[task.HostID]uint32          // restored TIDs of hosts not (yet) here
	hostJobs  map[task.HostID]map[uint64]bool // the jobs with tasks on each host
	// starting counts, per host and job, the starts of tasks under way
	// there (a spawn's, a restore's, a move's), until their answer has
	// been recorded in hostJobs: the tasks may speak (output) before.
	starting map[task.HostID]map[uint64]int
	// nums is, per host, the last task number the master handed out for
	// starts there (allocNums), and numbered the starts under way with
	// the numbers handed out for them: a task the master does not know
	// yet speaks for a job only with one of those (startedAs).
	nums     map[task.HostID]uint32
	numbered map[task.HostID][]numRange
	// rollbacks counts the job rollbacks made.
	rollbacks atomic.Int64
}

func newRegistry() *registry {
	return &registry{
		byID:      map[uint64]*jobState{},
		outputs:   map[uint64]io.Writer{},
		listeners: map[uint64]func(JobNote){},
		setSeqs:   map[string]uint64{},
		tidFloor:  map[task.HostID]uint32{},
		hostJobs:  map[task.HostID]map[uint64]bool{},
		starting:  map[task.HostID]map[uint64]int{},
		nums:      map[task.HostID]uint32{},
		numbered:  map[task.HostID][]numRange{},
	}
}

// newID hands out the next job number.
func (r *registry) newID() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	return r.next
}

// add registers job js under its number.
func (r *registry) add(js *jobState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[js.id] = js
}

// remove forgets job id and its console.
func (r *registry) remove(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, id)
	delete(r.outputs, id)
	delete(r.listeners, id)
}

// setNotes makes fn hear what befalls job id.
func (r *registry) setNotes(id uint64, fn func(JobNote)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listeners[id] = fn
}

// notes is what hears of job id's rollbacks, or nil.
func (r *registry) notes(id uint64) func(JobNote) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listeners[id]
}

// get is job id, or nil.
func (r *registry) get(id uint64) *jobState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// output is the console job id's output goes to, or nil.
func (r *registry) output(id uint64) io.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outputs[id]
}

// setOutput sends job id's output to w.
func (r *registry) setOutput(id uint64, w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outputs[id] = w
}

// raiseFloor records that TIDs up to n of host h were restored while h
// was not in the machine.
func (r *registry) raiseFloor(h task.HostID, n uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tidFloor[h] = max(r.tidFloor[h], n)
}

// floor is the largest TID number restored for host h while it was away.
func (r *registry) floor(h task.HostID) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tidFloor[h]
}

// jobsOn records that host h runs tasks of jobs: as its report says
// (replace), or as a spawn placed them.
func (r *registry) jobsOn(h task.HostID, jobs []uint64, replace bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.hostJobs[h]
	if set == nil || replace {
		set = map[uint64]bool{}
		r.hostJobs[h] = set
	}
	for _, j := range jobs {
		set[j] = true
	}
}

// expect records that tasks of job are being started on host h, until the
// function it returns is called (after the start's answer, and jobsOn).
func (r *registry) expect(h task.HostID, job uint64) (settle func()) {
	if job == 0 {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.starting[h]
	if m == nil {
		m = map[uint64]int{}
		r.starting[h] = m
	}
	m[job]++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		m := r.starting[h]
		if m[job]--; m[job] <= 0 {
			delete(m, job)
		}
		if len(m) == 0 {
			delete(r.starting, h)
		}
	}
}

// numRange is the task numbers handed out for a start of job's tasks:
// first to last.
type numRange struct {
	job         uint64
	first, last uint32
}

// allocNums hands out n task numbers for a start on host h: above every
// number handed out for h before, and above the TIDs of h restored
// elsewhere (raiseFloor). It returns the first, or 0 when the numbers are
// spent (the host then numbers the tasks itself).
func (r *registry) allocNums(h task.HostID, n int) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := uint64(max(r.nums[h], r.tidFloor[h])) + 1
	last := first + uint64(max(n, 1)) - 1
	if last > math.MaxUint32 {
		return 0
	}
	r.nums[h] = uint32(last)
	return uint32(first)
}

// numsTaken records that host h has numbered tasks up to last: a start
// it answered, or one whose numbers it had taken (the master hands out
// numbers above).
func (r *registry) numsTaken(h task.HostID, last uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nums[h] = max(r.nums[h], last)
}

// expectNums is expect for a start of n tasks of job numbered from first
// (allocNums; 0: numbered by the host): until settled, those tasks of h
// may speak for job before the master knows them (startedAs).
func (r *registry) expectNums(h task.HostID, job uint64, first uint32, n int) (settle func()) {
	settled := r.expect(h, job)
	if job == 0 || first == 0 || n <= 0 {
		return settled
	}
	nr := numRange{job: job, first: first, last: first + uint32(n) - 1}
	r.mu.Lock()
	r.numbered[h] = append(r.numbered[h], nr)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		rs := r.numbered[h]
		if i := slices.Index(rs, nr); i >= 0 {
			rs = slices.Delete(rs, i, i+1)
		}
		if len(rs) == 0 {
			delete(r.numbered, h)
		} else {
			r.numbered[h] = rs
		}
		r.mu.Unlock()
		settled()
	}
}

// startedAs reports whether tid is one of the tasks of a start of job's
// on host h under way: a TID of h numbered with a number handed out for
// it (expectNums).
func (r *registry) startedAs(h task.HostID, job uint64, tid task.TID) bool {
	if tid.Host() != h {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, nr := range r.numbered[h] {
		if nr.job == job && tid.Num() >= nr.first && tid.Num() <= nr.last {
			return true
		}
	}
	return false
}

// runs reports whether host h is recorded with tasks of job, or tasks of
// it are being started there.
func (r *registry) runs(h task.HostID, job uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostJobs[h][job] || r.starting[h][job] > 0
}

// hostsOf lists the hosts recorded with tasks of job.
func (r *registry) hostsOf(job uint64) []task.HostID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var on []task.HostID
	for h, jobs := range r.hostJobs {
		if jobs[job] {
			on = append(on, h)
		}
	}
	return on
}

// all lists the registered jobs.
func (r *registry) all() []*jobState {
	r.mu.Lock()
	defer r.mu.Unlock()
	jss := make([]*jobState, 0, len(r.byID))
	for _, js := range r.byID {
		jss = append(jss, js)
	}
	return jss
}

// jobsOf lists the registered jobs recorded with tasks on host h.
func (r *registry) jobsOf(h task.HostID) []*jobState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var jss []*jobState
	for j := range r.hostJobs[h] {
		if js := r.byID[j]; js != nil {
			jss = append(jss, js)
		}
	}
	return jss
}

// forgetHost drops host h's record of jobs.
func (r *registry) forgetHost(h task.HostID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.hostJobs, h)
}

// noteSetSeq records that set seq of job name is complete.
func (r *registry) noteSetSeq(name string, seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setSeqs[name] = max(r.setSeqs[name], seq)
}

// setSeq is the newest complete set recorded for job name.
func (r *registry) setSeq(name string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setSeqs[name]
}
