package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/examples/npb"
)

// npbMemChild names, in the environment of a re-executed test binary, the
// `dpvm npb` arguments TestNPBMemoryChild runs.
const npbMemChild = "DPVM_TEST_NPB_MEMORY_CHILD"

// TestNPBMemoryChild is the child of TestNPBMemoryNeedHonest: alone in its
// process, it runs the command named in the environment.
func TestNPBMemoryChild(t *testing.T) {
	args := os.Getenv(npbMemChild)
	if args == "" {
		t.Skip("run by TestNPBMemoryNeedHonest in a process of its own")
	}
	code, out, errOut := dpvm(t, strings.Fields(args)...)
	if code != 0 {
		t.Fatalf("dpvm %s: status %d\n%s\n%s", args, code, out, errOut)
	}
	// The process's peak resident set (of this program: the wait status's
	// maximum would include the parent's memory before the exec) and the
	// resident code and data mapped from the binary, which the runtime does
	// not count: the parent takes it off the peak.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 3 && (f[0] == "RssFile:" || f[0] == "VmHWM:") {
			fmt.Printf("%s %s\n", strings.ToLower(strings.TrimSuffix(f[0], ":")), f[1])
		}
	}
}

// TestNPBMemoryNeedHonest runs every kernel on classes S and W at np 1 and
// 2, each in a process of its own (this test binary, re-executed, or one
// built without the race detector when this one has it), and
// holds npb.MemoryNeed to the process's peak resident set, both less the
// binary's resident code and data (the test binary's is larger than dpvm's):
// the estimate must cover the peak, and by no more than a third of it and
// 20 MiB (the runtime's and the tasks' fixed parts, which dominate the
// small classes).
func TestNPBMemoryNeedHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs 20 kernels")
	}
	// The children run this package's tests without the race detector,
	// whose shadow memory would swell their peaks: this binary when it has
	// none, else one built for them.
	child := os.Args[0]
	if raceEnabled {
		child = filepath.Join(t.TempDir(), "cli.test")
		if out, err := exec.Command("go", "test", "-c", "-o", child, ".").CombinedOutput(); err != nil {
			t.Fatalf("go test -c: %v\n%s", err, out)
		}
	}
	for _, k := range npb.Kernels {
		for _, class := range []string{"S", "W"} {
			for _, np := range []int{1, 2} {
				args := fmt.Sprintf("npb %s --class %s --np %d --json", k, class, np)
				cmd := exec.Command(child, "-test.run=^TestNPBMemoryChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), npbMemChild+"="+args)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", args, err, out)
				}
				var fileKiB, hwmKiB int64
				for _, l := range strings.Split(string(out), "\n") {
					if v, ok := strings.CutPrefix(l, "rssfile "); ok {
						fileKiB, _ = strconv.ParseInt(v, 10, 64)
					}
					if v, ok := strings.CutPrefix(l, "vmhwm "); ok {
						hwmKiB, _ = strconv.ParseInt(v, 10, 64)
					}
				}
				if fileKiB <= 0 || hwmKiB <= fileKiB {
					t.Fatalf("%s: the child did not report its peak and its resident file pages:\n%s", args, out)
				}
				// The peak of what the runtime manages, against the
				// estimate less its allowance for the binary.
				peak := float64((hwmKiB-fileKiB)<<10) / (1 << 20)
				need, err := npb.HeapLimit(k, class, np, 1)
				if err != nil {
					t.Fatal(err)
				}
				est := float64(need) / (1 << 20)
				t.Logf("%s class %s np %d: peak %.1f MiB, estimate %.1f MiB (both without the binary's %.1f MiB)", k, class, np, peak, est, float64(fileKiB)/1024)
				if peak > est || est > 1.33*peak+20 {
					t.Errorf("%s class %s np %d: peak %.1f MiB, estimate %.1f MiB", k, class, np, peak, est)
				}
			}
		}
	}
}
