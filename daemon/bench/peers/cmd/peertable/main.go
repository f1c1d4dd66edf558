// Command peertable prints the summary table of the peer benchmark harness.
//
//	peertable FILE...
//
// Each FILE holds result lines (one JSON object a line): the peers' lines
// written by daemon/bench/peers/run.sh and, optionally, dpvm's own from
// `dpvm bench pingpong --json`. The table goes to standard output as
// Markdown: the median over the rounds of every system with the range in
// parentheses, and dpvm's ratio to each peer when dpvm's lines are given.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/dpvm/dpvm/daemon/bench/peers"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: peertable FILE...")
		return 2
	}
	var lines []peers.Line
	for _, name := range args {
		ls, err := readFile(name)
		if err != nil {
			fmt.Fprintf(stderr, "peertable: %v\n", err)
			return 1
		}
		lines = append(lines, ls...)
	}
	sums, err := peers.Summarize(lines)
	if err == nil {
		err = peers.WriteTable(stdout, sums)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peertable: %v\n", err)
		return 1
	}
	return 0
}

func readFile(name string) ([]peers.Line, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ls, err := peers.ParseLines(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ls, nil
}
