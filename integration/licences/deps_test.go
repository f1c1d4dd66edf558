package licences

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"testing"
)

// TestDependencies checks the licence of every module go.mod requires,
// direct and indirect, in the module cache (go mod download fetches what
// is missing).
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("the go command is needed to list the modules:", err)
	}
	out, err := exec.Command("go", "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var gomod struct {
		Require []struct {
			Path, Version string
			Indirect      bool
		}
	}
	if err := json.Unmarshal(out, &gomod); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	if len(gomod.Require) == 0 {
		t.Fatal("go.mod requires no module: not the dpvm module")
	}
	args := []string{"mod", "download", "-json"}
	for _, r := range gomod.Require {
		args = append(args, r.Path+"@"+r.Version)
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go mod download: %v\n%s%s", err, out, stderr.Bytes())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	seen := 0
	for {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go mod download -json: %v", err)
		}
		seen++
		if m.Error != "" || m.Dir == "" {
			t.Errorf("%s@%s: not in the module cache: %s", m.Path, m.Version, m.Error)
			continue
		}
		ids, err := Check(m.Dir)
		if err != nil {
			t.Errorf("%s@%s: %v", m.Path, m.Version, err)
			continue
		}
		t.Logf("%s@%s: %v", m.Path, m.Version, ids)
	}
	if seen != len(gomod.Require) {
		t.Errorf("go mod download described %d modules, go.mod requires %d", seen, len(gomod.Require))
	}
}
