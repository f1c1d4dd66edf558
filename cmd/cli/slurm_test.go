package cli

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	a, err := readAllocation(env(map[string]string{
		"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NTASKS_PER_NODE": "4",
		"SLURM_CPUS_ON_NODE": "8", "SLURM_SUBMIT_DIR": "/home/u",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a.JobID != "42" || !slices.Equal(a.Nodes, []string{"n1", "n2", "n3"}) || a.Cores != 4 || a.SubmitDir != "/home/u" {
		t.Errorf("allocation %+v", a)
	}
	a, err = readAllocation(env(map[string]string{"SLURM_JOB_ID": "7", "SLURM_NODELIST": "gpu1", "SLURM_CPUS_ON_NODE": "2"}))
	if err != nil || a.Cores != 2 || !slices.Equal(a.Nodes, []string{"gpu1"}) {
		t.Errorf("allocation %+v, %v", a, err)
	}
	for _, m := range []map[string]string{
		{"SLURM_JOB_NODELIST": "n1"},
		{"SLURM_JOB_ID": "1"},
		{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"},
		{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS_PER_NODE": "2(x3)"},
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
	w, err = parseSlurmWork([]string{"hello", "-n", "3"}, nil)
	if err != nil || w.kernel != "" || w.root == nil || w.what != "hello -n 3" {
		t.Errorf("hello: %+v, %v", w, err)
	}
	for _, args := range [][]string{nil, {"--"}, {"npb"}, {"npb", "zz"}, {"npb", "cg", "extra"}, {"npb", "cg", "--np", "x"}, {"nosuchprogram"}} {
		if _, err := parseSlurmWork(args, nil); err == nil {
			t.Errorf("parseSlurmWork(%q): want an error", args)
		}
	}
}
