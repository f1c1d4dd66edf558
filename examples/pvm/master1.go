package pvm

import (
	"flag"
	"fmt"
	"slices"

	"github.com/dpvm/dpvm/task"
)

// Port of PVM 3.4's examples/master1.c and examples/slave1.c.

// Master1 is the root task of pvm.master1 (master1.c): it spawns three
// Slave1 tasks per host (at most 32), multicasts them the data and prints
// each one's result.
type Master1 struct {
	NProc  int        // number of slaves, once spawned
	TIDs   []task.TID // the slaves
	Sent   bool       // the data multicast
	Got    int        // results received
	Result []float32  // by slave
}

// Slave1 is a worker of pvm.master1 (slave1.c): it sums its share of the
// data, swaps the sum with its neighbours in a ring and sends the total to
// the master.
type Slave1 struct {
	Init  *Master1Data // the master's data, once received
	Me    int          // index in Init.TIDs
	Sum   float32      // its own sum, sent to the next slave
	Sent  bool         // Sum sent to the next slave
	PSum  float32      // the previous slave's sum, received
	Recvd bool         // PSum received
}

// Master1Data is what master1.c packs for the slaves: their number, their
// TIDs, the data's length and the data.
type Master1Data struct {
	NProc int
	TIDs  []task.TID
	N     int
	Data  []float32
}

// Master1Result is what slave1.c packs for the master: its index and its
// result.
type Master1Result struct {
	Who    int
	Result float32
}

// Message tags of master1.c and slave1.c.
const (
	master1DataTag   = 0
	master1ResultTag = 5
	master1RingTag   = 22
	master1MaxProc   = 32
)

func init() {
	task.Register("pvm.master1", &Master1{})
	task.Register("pvm.slave1", &Slave1{})
	task.RegisterProgram(task.Program{
		Name:    "pvm.master1",
		Summary: "PVM 3.4's master1/slave1: a master and three slaves per host",
		Setup: func(*flag.FlagSet) func([]string) (task.Task, error) {
			return func([]string) (task.Task, error) { return &Master1{}, nil }
		},
	})
}

// Run spawns the slaves, multicasts the data and prints the results as
// they come.
func (m *Master1) Run(c *task.Ctx) error {
	if m.TIDs == nil {
		hosts, err := c.Hosts()
		if err != nil {
			return err
		}
		nproc := min(len(hosts)*3, master1MaxProc)
		tids, err := c.Spawn(&Slave1{}, nproc)
		if err != nil {
			c.Printf("Spawning %d worker tasks ... \n Trouble spawning slaves. Aborting. Error: %v", nproc, err)
			for _, t := range tids {
				_ = c.Kill(t) // best effort, as master1.c's pvm_kill
			}
			return err
		}
		c.Printf("Spawning %d worker tasks ... SUCCESSFUL", nproc)
		m.NProc, m.TIDs, m.Result = nproc, tids, make([]float32, nproc)
	}
	if !m.Sent {
		data := Master1Data{NProc: m.NProc, TIDs: m.TIDs, N: 100, Data: make([]float32, 100)}
		for i := range data.Data {
			data.Data[i] = 1.0
		}
		if err := c.Mcast(m.TIDs, master1DataTag, &data); err != nil {
			return err
		}
		m.Sent = true
	}
	for m.Got < m.NProc {
		var r Master1Result
		if _, err := c.Recv(task.AnyTask, master1ResultTag, &r, task.Safe()); err != nil {
			return err
		}
		if r.Who < 0 || r.Who >= m.NProc {
			return fmt.Errorf("result from slave %d of %d", r.Who, m.NProc)
		}
		m.Result[r.Who] = r.Result
		m.Got++
		expect := float64(2*r.Who-1) * 100.0
		if r.Who == 0 {
			expect = float64(m.NProc-1) * 100.0
		}
		c.Printf("I got %f from %d; (expecting %f)", m.Result[r.Who], r.Who, expect)
	}
	return nil
}

// Run receives the data, works on it with its neighbours and sends the
// result to the master.
func (s *Slave1) Run(c *task.Ctx) error {
	if s.Init == nil {
		var d Master1Data
		if _, err := c.Recv(task.AnyTask, master1DataTag, &d, task.Safe()); err != nil {
			return err
		}
		me := slices.Index(d.TIDs, c.MyTID())
		if me < 0 || d.NProc != len(d.TIDs) || d.N != len(d.Data) {
			return fmt.Errorf("slave1: bad data from the master (%d TIDs, mine not among them: %v)", len(d.TIDs), me < 0)
		}
		s.Init, s.Me = &d, me
	}
	// work(): exchange the sum with the neighbours in a ring.
	d := s.Init
	if !s.Sent {
		s.Sum = 0
		for _, x := range d.Data {
			s.Sum += float32(s.Me) * x
		}
		if err := c.Send(d.TIDs[(s.Me+1)%d.NProc], master1RingTag, s.Sum); err != nil {
			return err
		}
		s.Sent = true
	}
	if !s.Recvd {
		if _, err := c.Recv(task.AnyTask, master1RingTag, &s.PSum, task.Safe()); err != nil {
			return err
		}
		s.Recvd = true
	}
	return c.Send(c.Parent(), master1ResultTag, Master1Result{Who: s.Me, Result: s.Sum + s.PSum})
}
