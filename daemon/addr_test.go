package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/task"
)

func TestReachableAddr(t *testing.T) {
	for _, c := range []struct {
		addr       string
		advertised bool
		remote     string
		want       string
	}{
		{"0.0.0.0:7070", false, "10.1.2.3:7070", "10.1.2.3:7070"},
		{"[::]:7070", false, "10.1.2.3:40000", "10.1.2.3:7070"}, // the listening port, not the source port
		{"[::]:7071", false, "[fd00::2]:7071", "[fd00::2]:7071"},
		{"127.0.0.1:5000", false, "127.0.0.1:5000", "127.0.0.1:5000"},
		{"node2.example:7070", true, "10.1.2.3:7070", "node2.example:7070"}, // --advertise is taken as given
		{"0.0.0.0:7070", false, "mem:3", "0.0.0.0:7070"},                    // no IP to take
		{"", false, "10.1.2.3:7070", ""},
	} {
		got := reachableAddr(&hello{Addr: c.addr, Advertised: c.advertised}, c.remote)
		if got != c.want {
			t.Errorf("reachableAddr(%q, advertised %v, from %q) = %q, want %q", c.addr, c.advertised, c.remote, got, c.want)
		}
	}
}

func TestCheckAdvertise(t *testing.T) {
	for _, ok := range []string{"10.0.0.2:7070", "[fd00::2]:7070", "node2.example.org:7070"} {
		if err := checkAdvertise(ok); err != nil {
			t.Errorf("checkAdvertise(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:7070", "[::]:7070", ":7070", "node2", "node2:0", "node2:http", "node2:70000"} {
		if err := checkAdvertise(bad); err == nil {
			t.Errorf("checkAdvertise(%q) accepted it", bad)
		}
	}
}

// A master on a wildcard address is listed at the address its first host
// reached it by; a host joining on a wildcard address at the IP its
// connection came from; another build is refused, naming the difference.
func TestAdmitAddressesAndBuild(t *testing.T) {
	cl, err := pki.NewCluster(time.Now(), "h1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Master: true, Listen: "0.0.0.0:7070", Credential: cl.Master, Secret: cl.Secret, Network: transport.NewMem(nil, nil)}
	m, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Halt(context.Background()) })
	m.self.Addr = "0.0.0.0:7070" // as a QUIC socket on the wildcard address names itself

	h := &hello{Name: "node2", Addr: "[::]:7070", Dialled: "10.1.0.1:7070", Join: true, Info: HostInfo{Build: ThisBuild()}}
	info, err := m.admit(h, "10.1.0.2:7070")
	if err != nil {
		t.Fatal(err)
	}
	list, _ := m.helloLists()
	_, _, hosts, err := decodeHostList(list)
	if err != nil {
		t.Fatal(err)
	}
	if info.Addr != "10.1.0.2:7070" {
		t.Errorf("host recorded at %q, want 10.1.0.2:7070", info.Addr)
	}
	for _, x := range hosts {
		if x.ID == MasterID && x.Addr != "10.1.0.1:7070" {
			t.Errorf("master listed at %q, want the address the host dialled, 10.1.0.1:7070", x.Addr)
		}
	}
	// A second host that reached the master another way does not change
	// the address the first one taught it.
	h3 := &hello{Name: "node3", Addr: "[::]:7070", Dialled: "master.example:7070", Join: true, Info: HostInfo{Build: ThisBuild()}}
	if _, err := m.admit(h3, "10.1.0.3:7070"); err != nil {
		t.Fatal(err)
	}
	if got := m.selfInfo().Addr; got != "10.1.0.1:7070" {
		t.Errorf("master's own address %q, want 10.1.0.1:7070", got)
	}

	other := ThisBuild()
	other.Version = "v0.0.1"
	_, err = m.admit(&hello{Name: "node4", Addr: "[::]:7070", Join: true, Info: HostInfo{Build: other}}, "10.1.0.4:7070")
	if err == nil || !strings.Contains(err.Error(), "another build") || !strings.Contains(err.Error(), "v0.0.1") {
		t.Errorf("another version: %v, want a refusal naming it", err)
	}
	other = ThisBuild()
	other.Registry, other.Types = "000000000000", 1
	_, err = m.admit(&hello{Name: "node5", Addr: "[::]:7070", Join: true, Info: HostInfo{Build: other}}, "10.1.0.5:7070")
	if err == nil || !strings.Contains(err.Error(), "task types 000000000000 (1 types)") {
		t.Errorf("other task types: %v, want a refusal naming them", err)
	}
}

// An absurd spawn count from a task on another host is refused with
// ErrLimit before anything is allocated for it, and the virtual machine
// goes on.
func TestSpawnCountBounded(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	var got error
	worker := fn(t, func(c *task.Ctx, _ int) error { return nil })
	root := fn(t, func(c *task.Ctx, _ int) error {
		_, got = c.Spawn(worker, 1<<62)
		_, err := c.Spawn(worker, 2) // the master still places tasks
		return err
	})
	tids, err := m.Spawn(context.Background(), 0, task.SpawnRequest{Type: "daemon.test.fn", State: mustState(t, root), Count: 1, Host: "h2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := m.Wait(ctx, tids[0])
	if err != nil {
		t.Fatal(err)
	}
	if info.State != Exited || info.Status != 0 {
		t.Fatalf("root ended %v status %d: %s", info.State, info.Status, info.Err)
	}
	if !errors.Is(got, ErrLimit) {
		t.Fatalf("spawn of 1<<62 tasks: %v, want ErrLimit", got)
	}
	if _, err := m.Spawn(context.Background(), 0, task.SpawnRequest{Type: "daemon.test.fn", State: mustState(t, worker), Count: DefaultMaxSpawn + 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("spawn of DefaultMaxSpawn+1 tasks at the master: %v, want ErrLimit", err)
	}
}

// TestJoinsCrossing: host a is admitted, and before the master attaches
// its connection and answers it, host b joins in full. a must still hear
// of b, and take b's connection. Before, a's lists were taken when it was
// admitted (without b) and b's announcement went out before a was
// attached: a never heard of b, refused b's connections as from an
// unknown host, and b's messages to a's tasks were held for good (a
// barrier of the scale benchmark hung so).
func TestJoinsCrossing(t *testing.T) {
	hook, admitted, release := holdAt("join:admitted")
	defer release()
	vm := startVM(t, 1, Config{FaultHook: hook})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(name string) (*Daemon, error) {
		return Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: hostCred(t, vm, name), Output: &syncBuffer{}})
	}
	type started struct {
		d   *Daemon
		err error
	}
	aDone := make(chan started, 1)
	go func() {
		d, err := start("a")
		aDone <- started{d, err}
	}()
	<-admitted
	b, err := start("b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Halt(context.Background()) })
	release()
	r := <-aDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	a := r.d
	t.Cleanup(func() { _ = a.Halt(context.Background()) })
	bID := b.cfg.HostID
	if _, ok := hostInfo(a, "b"); !ok {
		t.Fatalf("a knows %v, not b (%v)", a.Hosts(), bID)
	}
	if _, err := b.peerFor(ctx, a.cfg.HostID); err != nil {
		t.Fatalf("b cannot reach a: %v", err)
	}
}

// TestRefusalReachesTheHost: a host refused at its registration (its name
// is taken) hears the refusal and gives up at once, every time. Before,
// the master closed the connection right after writing the refusal, the
// close could overtake it (QUIC drops unsent stream data on close), and
// the host, its connection lost before any answer, tried again until its
// JoinTimeout (TestLeastPrivilegeOfProcesses saw it over real processes).
func TestRefusalReachesTheHost(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	for i := range 30 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		d, err := Start(ctx, Config{Listen: "127.0.0.1:0", Join: m.Addr(), Credential: hostCred(t, vm, "h2"),
			Output: &syncBuffer{}, JoinTimeout: 20 * time.Second})
		cancel()
		if err == nil {
			_ = d.Halt(context.Background())
			t.Fatalf("try %d: a second h2 joined", i)
		}
		if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), "gave up") {
			t.Fatalf("try %d: %v, want the refusal at once", i, err)
		}
	}
}
