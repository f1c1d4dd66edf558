package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunSample(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{filepath.Join("..", "..", "testdata", "sample.jsonl")}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "testdata", "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("output differs from table.golden:\n%s", out.String())
	}
}

func TestRunSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.jsonl")
	dpvm := filepath.Join(dir, "dpvm.jsonl")
	if err := os.WriteFile(peers, []byte(`{"round":1,"system":"mpi-tcp","mode":"remote","results":[{"size":8,"oneway_us":9,"mbps":0.9}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dpvm, []byte(`{"mode":"remote","results":[{"size":8,"oneway_us":30,"mbps":0.3}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{peers, dpvm}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	// dpvm over the network is slower than Open MPI here: the ratio says so.
	if !strings.Contains(out.String(), "| one-way 8 B | 0.300× |") {
		t.Errorf("ratio row missing:\n%s", out.String())
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"mode\":\"nowhere\",\"results\":[]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage"},
		{[]string{filepath.Join(dir, "missing.jsonl")}, 1, "missing.jsonl"},
		{[]string{bad}, 1, "bad.jsonl: line 1"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("run(%v) = %d, stderr %q; want %d mentioning %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}
