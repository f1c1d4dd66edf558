package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
)

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"n1", []string{"n1"}},
		{"node[01-03,07],gpu1", []string{"node01", "node02", "node03", "node07", "gpu1"}},
		{"n[1-2]", []string{"n1", "n2"}},
		{"a,b,c", []string{"a", "b", "c"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"x[8-11]-ib", []string{"x8-ib", "x9-ib", "x10-ib", "x11-ib"}},
		{"c[098-101]", []string{"c098", "c099", "c100", "c101"}},
		{" n[3] ", []string{"n3"}},
		{"host-1.example.org", []string{"host-1.example.org"}},
	} {
		got, err := expandHostlist(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("expandHostlist(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, in := range []string{
		"", "n[", "n]", "n[]", "n[1-", "n[a-b]", "n[3-1]", "a,,b", "n[1-2", "n[[1]]",
		"n[0-99999999]", "n[0-300]m[0-300]", "n[99999999999]",
	} {
		got, err := expandHostlist(in)
		if !errors.Is(err, errHostlist) {
			t.Errorf("expandHostlist(%q) = %q, %v; want an errHostlist", in, got, err)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-03,07],gpu1", "r[1-2]n[1-2]", "n[0-65535]", "a,b", "x[", "]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := expandHostlist(s)
		if err != nil {
			return
		}
		if len(names) == 0 || len(names) > maxHostlist {
			t.Fatalf("expandHostlist(%q): %d names", s, len(names))
		}
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[],") {
				t.Fatalf("expandHostlist(%q): bad name %q", s, n)
			}
		}
	})
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestReadAllocation(t *testing.T) {
	// One task per node with 8 CPUs each: every daemon reports its node's
	// 8 cores, not the one task.
	a, err := readAllocation(env(map[string]string{
		"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NTASKS_PER_NODE": "1",
		"SLURM_CPUS_PER_TASK": "8", "SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": "/home/u",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a.JobID != "42" || !slices.Equal(a.Nodes, []string{"n1", "n2", "n3"}) || a.Cores != 8 || a.CPUsPerTask != 8 || a.SubmitDir != "/home/u" {
		t.Errorf("allocation %+v", a)
	}
	// The step that starts the daemons asks for those CPUs again: srun
	// does not inherit the batch script's --cpus-per-task.
	if got, want := a.srunArgs(), []string{"--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--cpus-per-task=8"}; !slices.Equal(got, want) {
		t.Errorf("srun arguments %q, want %q", got, want)
	}
	a, err = readAllocation(env(map[string]string{"SLURM_JOB_ID": "7", "SLURM_NODELIST": "gpu1", "SLURM_CPUS_ON_NODE": "2"}))
	if err != nil || a.Cores != 2 || a.CPUsPerTask != 0 || !slices.Equal(a.Nodes, []string{"gpu1"}) || slices.ContainsFunc(a.srunArgs(), func(s string) bool { return strings.HasPrefix(s, "--cpus-per-task") }) {
		t.Errorf("allocation %+v, %v", a, err)
	}
	// Without SLURM_CPUS_ON_NODE, a task's CPUs.
	a, err = readAllocation(env(map[string]string{"SLURM_JOB_ID": "7", "SLURM_NODELIST": "gpu1", "SLURM_CPUS_PER_TASK": "6"}))
	if err != nil || a.Cores != 6 {
		t.Errorf("allocation %+v, %v", a, err)
	}
	for _, m := range []map[string]string{
		{"SLURM_JOB_NODELIST": "n1"},
		{"SLURM_JOB_ID": "1"},
		{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"},
		{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_PER_TASK": "2(x3)"},
		{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_CPUS_ON_NODE": "0"},
	} {
		if a, err := readAllocation(env(m)); err == nil {
			t.Errorf("readAllocation(%v) = %+v; want an error", m, a)
		}
	}
}

func TestSlurmDirs(t *testing.T) {
	a := slurmAlloc{JobID: "42", SubmitDir: "/home/u"}
	for _, tc := range []struct{ shared, state, wantShared, wantState string }{
		{"", "", "/home/u/dpvm-shared", "/home/u/dpvm-shared/slurm-42"},
		{"/scratch/d", "", "/scratch/d", "/scratch/d/slurm-42"},
		{"/scratch/d", "cg-run", "/scratch/d", "/scratch/d/cg-run"},
		{"/scratch/d", "/elsewhere/x", "/scratch/d", "/elsewhere/x"},
	} {
		sh, st, err := slurmDirs(tc.shared, tc.state, a)
		if err != nil || sh != filepath.Clean(tc.wantShared) || st != tc.wantState {
			t.Errorf("slurmDirs(%q, %q) = %q, %q, %v; want %q, %q", tc.shared, tc.state, sh, st, err, tc.wantShared, tc.wantState)
		}
	}
}

func TestParseSlurmWork(t *testing.T) {
	w, err := parseSlurmWork([]string{"--", "npb", "cg", "--class", "s", "--np", "2"}, nil)
	if err != nil || w.kernel != "cg" || w.np != 2 || w.what != "npb cg class S np 2" {
		t.Errorf("npb: %+v, %v", w, err)
	}
	for _, args := range [][]string{{"hello", "-n", "3"}, {"run", "hello", "-n", "3"}, {"--", "run", "hello", "-n", "3"}} {
		w, err = parseSlurmWork(args, nil)
		if err != nil || w.kernel != "" || w.root == nil || w.what != "hello -n 3" {
			t.Errorf("%q: %+v, %v", args, w, err)
		}
	}
	for _, args := range [][]string{nil, {"--"}, {"npb"}, {"npb", "zz"}, {"npb", "cg", "extra"}, {"npb", "cg", "--np", "x"}, {"nosuchprogram"}} {
		if _, err := parseSlurmWork(args, nil); err == nil {
			t.Errorf("parseSlurmWork(%q): want an error", args)
		}
	}
}

// writeSet writes a complete checkpoint set of one task file for job
// under stateDir, created at created.
func writeSet(t *testing.T, stateDir, job string, seq uint64, created time.Time, key []byte) string {
	t.Helper()
	jobDir, err := jobset.JobDir(stateDir, job)
	if err != nil {
		t.Fatal(err)
	}
	setDir, err := jobset.NewSet(jobDir, seq)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(setDir, "task-1-1.ckpt"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	sum := jobset.NewSummer(f)
	fmt.Fprintf(sum, "state of %s at %d", job, seq)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e := jobset.Entry{TID: "t1:1", Type: "npb.root", Host: "n1", File: "task-1-1.ckpt"}
	sum.Fill(&e)
	m := &jobset.Manifest{Job: job, Seq: seq, Created: created, Root: "t1:1", Program: "npb.root", Entries: []jobset.Entry{e}}
	if err := jobset.WriteManifest(setDir, m, key); err != nil {
		t.Fatal(err)
	}
	return setDir
}

func TestFindResume(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	dir := t.TempDir()
	if _, ok, _, err := findResume(dir, key); ok || err != nil {
		t.Fatalf("empty state directory: ok %v, err %v", ok, err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	writeSet(t, dir, "j1", 1, t0, key)
	want := writeSet(t, dir, "j1", 2, t0.Add(time.Minute), key)
	// A newer set without its manifest is incomplete: passed over.
	jobDir, _ := jobset.JobDir(dir, "j1")
	if _, err := jobset.NewSet(jobDir, 3); err != nil {
		t.Fatal(err)
	}
	rp, ok, skipped, err := findResume(dir, key)
	if err != nil || !ok {
		t.Fatalf("findResume: ok %v, err %v, skipped %v", ok, err, skipped)
	}
	if rp.SetDir != want || rp.JobDir != jobDir || rp.Manifest.Seq != 2 || rp.Manifest.Program != "npb.root" {
		t.Errorf("resume point %+v, want set %s", rp, want)
	}
	if len(skipped) != 1 {
		t.Errorf("skipped %v, want the incomplete set 3", skipped)
	}
	// Under another key nothing authenticates: a fresh start, with reasons.
	_, ok, skipped, err = findResume(dir, bytes.Repeat([]byte{8}, 32))
	if ok || err != nil || len(skipped) == 0 {
		t.Errorf("wrong key: ok %v, skipped %v, err %v", ok, skipped, err)
	}
	if _, _, _, err := findResume(filepath.Join(dir, "missing"), key); err == nil {
		t.Error("a missing state directory: want an error")
	}
}

// TestSlurmKey: the first run makes the credentials in the state directory,
// a requeued run finds the same (same CA and secret), and each node's
// daemon is issued a credential of its own name, the first's the master's.
func TestSlurmKey(t *testing.T) {
	dir := t.TempDir()
	first, err := slurmKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := slurmKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.secret.Key("job-manifest"), again.secret.Key("job-manifest")) || !first.admin.SameCA(again.admin) {
		t.Fatal("a requeued run made new credentials")
	}
	if fi, err := os.Stat(filepath.Join(dir, "credentials", "secret.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	for _, master := range []bool{true, false} {
		c, err := again.node("node7", master)
		if err != nil || c.Name != "node7" || c.Master != master || !c.SameCA(first.admin) {
			t.Fatalf("node credential (master %v): %+v %v", master, c, err)
		}
	}
	if _, err := slurmKey(filepath.Join(dir, "none"), dir); err == nil {
		t.Error("a --credentials directory without a CA was taken")
	}
}
