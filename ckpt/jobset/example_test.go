package jobset_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
)

// A coordinated checkpoint of a two-task job: each daemon saves its
// tasks' checkpoints into the set through a Summer, the master writes the
// manifest last, and a restart finds the set with Latest.
func Example() {
	root, err := os.MkdirTemp("", "jobset-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	key := bytes.Repeat([]byte{0x42}, jobset.KeySize) // the cluster's checkpoint key

	// The master opens the next set.
	jobDir, err := jobset.JobDir(root, "pi")
	if err != nil {
		log.Fatal(err)
	}
	seq, err := jobset.NextSeq(jobDir)
	if err != nil {
		log.Fatal(err)
	}
	setDir, err := jobset.NewSet(jobDir, seq)
	if err != nil {
		log.Fatal(err)
	}

	// Each daemon saves the checkpoints of its tasks and reports their
	// entries (here the task's bytes stand for ckpt.Write's output).
	var entries []jobset.Entry
	for _, task := range []struct{ tid, host, state string }{{"t1:1", "h1", "master state"}, {"t2:1", "h2", "worker state"}} {
		e := jobset.Entry{TID: task.tid, Type: "pi", Host: task.host, File: task.tid[:2] + "-" + task.tid[3:] + ".ckpt"}
		_, err := ckpt.Dir{Path: setDir}.Save(e.File, func(w io.Writer) error {
			s := jobset.NewSummer(w)
			_, err := io.WriteString(s, task.state)
			s.Fill(&e)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		entries = append(entries, e)
	}

	// The master completes the set, then applies the retention policy.
	m := &jobset.Manifest{Job: "pi", Seq: seq, Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Root: "t1:1", Program: "pi", Args: []string{"-n", "1000"}, Entries: entries}
	if err := jobset.WriteManifest(setDir, m, key); err != nil {
		log.Fatal(err)
	}
	if _, err := jobset.Prune(jobDir, 3, key); err != nil {
		log.Fatal(err)
	}

	// A restart loads the newest complete set.
	dir, got, skipped, err := jobset.Latest(jobDir, key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: job %s, %d tasks, %d newer sets skipped\n", filepath.Base(dir), got.Job, len(got.Entries), len(skipped))
	for _, e := range got.Entries {
		fmt.Printf("  %s on %s: %s, %d bytes\n", e.TID, e.Host, e.File, e.Bytes)
	}
	// Output:
	// ckpt-00000001: job pi, 2 tasks, 0 newer sets skipped
	//   t1:1 on h1: t1-1.ckpt, 12 bytes
	//   t2:1 on h2: t2-1.ckpt, 12 bytes
}
