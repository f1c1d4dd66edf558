package examples

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// Stream is the root task of the stream program, the migration check: a
// producer sends numbered messages to a consumer while this driver moves
// both among the hosts. The consumer counts what is lost, duplicated or out
// of order; the program fails if anything is.
type Stream struct {
	Messages, Moves int
	Via             string // direct, indirect or mixed
	Producer        task.TID
	Consumer        task.TID
	Where           map[string]string // task → host name, as the driver moved them
	Hosts           []string          // where the tasks are placed and moved, in turn
	Only            []string          // the hosts asked for (empty: every host)
	Step            int
	Made            int
	Failed          int
	ByVia           map[string]int
}

// StreamProducer sends 0..N-1 to To, at most Window ahead of the
// consumer's credits, then waits for the consumer to finish.
type StreamProducer struct {
	To      task.TID
	N, Next int
	Credit  int // messages the consumer has allowed so far
	Window  int
}

// StreamConsumer receives N numbered messages and checks them.
type StreamConsumer struct {
	N, Moves, Window int
	Producer         task.TID
	Seen             []uint64 // bitset of the numbers received
	Next             int      // the number expected next
	Received         int
	Dup, OutOfOrder  int
	Reported         int  // progress reports sent
	Done             bool // report sent
}

// StreamReport is the consumer's verdict.
type StreamReport struct {
	Received, Lost, Dup, OutOfOrder int
}

const (
	tagData     = 20
	tagCredit   = 21
	tagProgress = 22
	tagReport   = 23
	tagFinish   = 24
	tagPeer     = 25
)

func init() {
	task.Register("examples.stream", &Stream{})
	task.Register("examples.stream.producer", &StreamProducer{})
	task.Register("examples.stream.consumer", &StreamConsumer{})
	task.RegisterProgram(task.Program{
		Name:    "stream",
		Summary: "a producer streams numbered messages to a consumer while both migrate; checks nothing is lost, duplicated or reordered",
		Setup: func(fs *flag.FlagSet) func([]string) (task.Task, error) {
			n := fs.Int("messages", 10000, "messages to send")
			m := fs.Int("moves", 10, "migrations to make during the stream")
			via := fs.String("via", "direct", "how checkpoints travel: direct, indirect or mixed")
			only := fs.String("hosts", "", "comma-separated host names to place and move the tasks among (default: every host)")
			return func([]string) (task.Task, error) {
				if *n < 1 || *m < 0 {
					return nil, fmt.Errorf("need --messages >= 1 and --moves >= 0, got %d and %d", *n, *m)
				}
				switch *via {
				case "direct", "indirect", "mixed":
				default:
					return nil, fmt.Errorf("--via %q: want direct, indirect or mixed", *via)
				}
				s := &Stream{Messages: *n, Moves: *m, Via: *via}
				if *only != "" {
					s.Only = strings.Split(*only, ",")
				}
				return s, nil
			}
		},
	})
}

// Run places the two tasks on different hosts, then moves one of them
// each time the consumer reports progress.
func (s *Stream) Run(c *task.Ctx) error {
	if s.Consumer.IsZero() {
		hosts, err := c.Hosts()
		if err != nil {
			return err
		}
		for _, h := range hosts {
			s.Hosts = append(s.Hosts, h.Name)
		}
		if len(s.Only) > 0 {
			for _, h := range s.Only {
				if !slices.Contains(s.Hosts, h) {
					return fmt.Errorf("stream: --hosts: no host named %q (the virtual machine has %s)", h, strings.Join(s.Hosts, ", "))
				}
			}
			s.Hosts = s.Only
		}
		if s.Moves > 0 && len(s.Hosts) < 2 {
			return fmt.Errorf("stream: moving tasks needs at least 2 hosts, it has %d (dpvm run --hosts 3 stream)", len(s.Hosts))
		}
		at := func(i int) string { return s.Hosts[i%len(s.Hosts)] }
		const window = 64
		cons, err := c.Spawn(&StreamConsumer{N: s.Messages, Moves: s.Moves, Window: window}, 1, task.OnHost(at(1)))
		if err != nil {
			return err
		}
		prod, err := c.Spawn(&StreamProducer{To: cons[0], N: s.Messages, Window: window, Credit: window}, 1, task.OnHost(at(2)))
		if err != nil {
			return err
		}
		if err := c.Send(cons[0], tagPeer, prod[0]); err != nil {
			return err
		}
		s.Consumer, s.Producer = cons[0], prod[0]
		s.Where = map[string]string{cons[0].String(): at(1), prod[0].String(): at(2)}
		s.ByVia = map[string]int{}
	}
	for s.Step < s.Moves {
		if _, err := c.Recv(s.Consumer, tagProgress, nil, task.Safe()); err != nil {
			return err
		}
		s.Step++
		tid := s.Consumer
		if s.Step%2 == 0 {
			tid = s.Producer
		}
		via := s.Via
		if via == "mixed" {
			via = [...]string{"direct", "indirect"}[s.Step%2]
		}
		// The next host round the list that is not where the task is.
		from := s.Where[tid.String()]
		to := from
		for i := 0; to == from; i++ {
			to = s.Hosts[(s.Step+i)%len(s.Hosts)]
		}
		if err := c.Migrate(tid, to, via); err != nil {
			c.Printf("stream: move %d of %v to %s failed: %v", s.Step, tid, to, err)
			s.Failed++
			// A host may have left: move among the ones there are now.
			if hosts, err := c.Hosts(); err == nil {
				var left []string
				for _, h := range hosts {
					if len(s.Only) == 0 || slices.Contains(s.Only, h.Name) {
						left = append(left, h.Name)
					}
				}
				if len(left) >= 2 {
					s.Hosts = left
				}
			}
			continue
		}
		s.Where[tid.String()] = to
		s.Made++
		s.ByVia[via]++
	}
	var rep StreamReport
	if _, err := c.Recv(s.Consumer, tagReport, &rep, task.Safe()); err != nil {
		return err
	}
	if err := c.Send(s.Consumer, tagFinish, nil); err != nil {
		return err
	}
	c.Printf("stream: %d messages: received %d, lost %d, duplicated %d, out of order %d; moves made %d of %d (direct %d, indirect %d, failed %d)",
		s.Messages, rep.Received, rep.Lost, rep.Dup, rep.OutOfOrder, s.Made, s.Moves, s.ByVia["direct"], s.ByVia["indirect"], s.Failed)
	if rep.Lost+rep.Dup+rep.OutOfOrder > 0 || rep.Received != s.Messages {
		return task.Exit(1)
	}
	return nil
}

// Run sends the numbers within the consumer's credit.
func (p *StreamProducer) Run(c *task.Ctx) error {
	for p.Next < p.N {
		for p.Next >= p.Credit {
			var credit int
			if _, err := c.Recv(p.To, tagCredit, &credit, task.Safe()); err != nil {
				return err
			}
			p.Credit = max(p.Credit, credit)
		}
		if err := c.Send(p.To, tagData, p.Next); err != nil {
			return err
		}
		p.Next++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	// Stay until the consumer is done, so the driver can still move us.
	_, err := c.Recv(p.To, tagFinish, nil, task.Safe())
	return err
}

// Run receives and checks the numbers, grants credit, and reports
// progress to the driver at evenly spaced points.
func (s *StreamConsumer) Run(c *task.Ctx) error {
	if s.Producer.IsZero() {
		if _, err := c.Recv(c.Parent(), tagPeer, &s.Producer, task.Safe()); err != nil {
			return err
		}
		s.Seen = make([]uint64, (s.N+63)/64)
	}
	for s.Received < s.N {
		var n int
		if _, err := c.Recv(s.Producer, tagData, &n, task.Safe()); err != nil {
			return err
		}
		s.Received++
		switch {
		case n < 0 || n >= s.N:
			s.OutOfOrder++
		case s.Seen[n/64]&(1<<(n%64)) != 0:
			s.Dup++
		default:
			if n != s.Next {
				s.OutOfOrder++
			}
			s.Seen[n/64] |= 1 << (n % 64)
			s.Next = n + 1
		}
		if s.Received%(s.Window/2) == 0 {
			if err := c.Send(s.Producer, tagCredit, s.Received+s.Window); err != nil {
				return err
			}
		}
		if s.Reported < s.Moves && s.Received >= (s.Reported+1)*s.N/(s.Moves+1) {
			s.Reported++
			if err := c.Send(c.Parent(), tagProgress, s.Received); err != nil {
				return err
			}
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	for s.Reported < s.Moves { // a short stream: let the driver finish its moves
		s.Reported++
		if err := c.Send(c.Parent(), tagProgress, s.Received); err != nil {
			return err
		}
	}
	distinct := 0
	for _, w := range s.Seen {
		for ; w != 0; w &= w - 1 {
			distinct++
		}
	}
	if !s.Done {
		if err := c.Send(c.Parent(), tagReport, StreamReport{Received: s.Received, Lost: s.N - distinct, Dup: s.Dup, OutOfOrder: s.OutOfOrder}); err != nil {
			return err
		}
		s.Done = true
	}
	// Stay until the driver has made its moves.
	if _, err := c.Recv(c.Parent(), tagFinish, nil, task.Safe()); err != nil {
		return err
	}
	return c.Send(s.Producer, tagFinish, nil)
}
