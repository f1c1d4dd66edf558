package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// schedGolden is where the sched package keeps the snapshots and the
// expected output of plan and step; the command must print exactly that.
var schedGolden = filepath.Join("..", "..", "sched", "testdata", "golden")

func schedCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(append([]string{"dpvm", "sched"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSchedGoldenOutput(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(schedGolden, "*-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".out.json") {
			continue
		}
		n++
		base := strings.TrimSuffix(in, ".json")
		cmd := strings.SplitN(filepath.Base(base), "-", 2)[0]
		for _, c := range []struct {
			args   []string
			golden string
		}{
			{[]string{cmd, "--state", in, "--json"}, base + ".out.json"},
			{[]string{cmd, "--state", in}, base + ".out.txt"},
			{[]string{cmd, "--json", "--state=" + in}, base + ".out.json"},
		} {
			want, err := os.ReadFile(c.golden)
			if err != nil {
				t.Fatal(err)
			}
			code, out, errs := schedCLI(t, c.args...)
			if code != 0 || errs != "" {
				t.Fatalf("dpvm sched %v: exit %d, stderr %q", c.args, code, errs)
			}
			if out != string(want) {
				t.Errorf("dpvm sched %v:\n%s\nwant (%s):\n%s", c.args, out, c.golden, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("no golden snapshots found")
	}
}

func TestSchedPlanPaperExample(t *testing.T) {
	code, out, errs := schedCLI(t, "plan", "--state", filepath.Join(schedGolden, "plan-paper.json"), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Availability []int          `json:"availability"`
		Class        int            `json:"class"`
		Size         *int           `json:"size"`
		EDT          float64        `json:"edt"`
		Placement    map[string]int `json:"placement"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Availability) != 4 || got.Availability[3] != 45 || got.Class != 4 || got.Size == nil || *got.Size != 45 || got.EDT != 4.0/45 {
		t.Fatalf("plan %s", out)
	}
}

func TestSchedStdin(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "state")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"hosts":[{"name":"a","load":4},{"name":"b"}],
		"processes":[{"tid":"p","host":"a","class":1,"counter":5}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	code, out, errs := schedCLI(t, "step", "--state", "-", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := `{"counters":{"p":0},"migrations":[{"tid":"p","from":"a","to":"b"}],"stay":[]}` + "\n"
	if out != want {
		t.Fatalf("got %s want %s", out, want)
	}
}

func TestSchedErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plan", "--state", write("bad.json", `{"hosts":[`)}, 1, "malformed JSON"},
		{[]string{"step", "--state", write("alpha.json", `{"hosts":[{"name":"a","alpha":-2}]}`), "--json"}, 1, `host "a": alpha must be positive, got -2`},
		{[]string{"step", "--state", write("host.json", `{"hosts":[{"name":"a","load":1}],"processes":[{"tid":"p","host":"zz"}]}`)}, 1, `process "p": unknown host "zz"`},
		{[]string{"plan", "--state", write("order.json", `{"classes":[{"delta":2,"min":1.5,"max":2.5},{"delta":1,"min":1,"max":1.5}],"hosts":[{"name":"a"}]}`)}, 1, "classes not ordered"},
		{[]string{"plan", "--state", write("job.json", `{"hosts":[{"name":"a"}],"job":{"minsize":3,"maxsize":2}}`)}, 1, "maxsize 2 must be at least minsize 3"},
		{[]string{"plan", "--state", filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{[]string{"plan"}, 2, "state"},
		{[]string{"step", "--state", write("ok.json", `{"hosts":[{"name":"a"}]}`), "extra"}, 2, "unexpected argument"},
	} {
		code, out, errs := schedCLI(t, c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, errs)
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout", c.args, out)
		}
		if !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line mentioning %q", c.args, errs, c.want)
		}
	}
}

func TestSchedHelp(t *testing.T) {
	code, out, _ := schedCLI(t, "--help")
	if code != 0 || !strings.Contains(out, "plan") || !strings.Contains(out, "step") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
}
