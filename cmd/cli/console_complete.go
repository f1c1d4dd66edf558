package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/task"
)

// A completer completes the word before the cursor when Tab is pressed at
// the console's prompt: command names, their flags, and the TIDs, host
// names, job numbers and programs their arguments name. The TIDs, hosts
// and jobs are asked of the master at each Tab.
type completer struct {
	con  *console
	show io.Writer // where the candidates of an ambiguous word are listed
}

func newCompleter(con *console, show io.Writer) *completer {
	return &completer{con: con, show: show}
}

// callback is the line editor's AutoCompleteCallback: on Tab it completes
// the word before the cursor as far as the candidates agree, listing them
// when they do not and nothing can be added.
func (cp *completer) callback(line string, pos int, key rune) (string, int, bool) {
	if key != '\t' {
		return "", 0, false
	}
	newLine, newPos, list := cp.complete(line, pos)
	if len(list) > 1 {
		fmt.Fprintln(cp.show, strings.Join(list, "  "))
	}
	if newLine == line {
		return "", 0, false
	}
	return newLine, newPos, true
}

// complete completes line at pos (a byte offset). It returns the new line
// and cursor, and the candidates when several remain.
func (cp *completer) complete(line string, pos int) (string, int, []string) {
	head := line[:pos]
	start := strings.LastIndexAny(head, " \t") + 1
	prefix := head[start:]
	var matches []string
	for _, c := range cp.candidates(strings.Fields(head[:start]), prefix) {
		if strings.HasPrefix(c, prefix) && !slices.Contains(matches, c) {
			matches = append(matches, c)
		}
	}
	switch len(matches) {
	case 0:
		return line, pos, nil
	case 1:
		word := matches[0] + " "
		return line[:start] + word + line[pos:], start + len(word), nil
	}
	common := matches[0]
	for _, m := range matches[1:] {
		for !strings.HasPrefix(m, common) {
			common = common[:len(common)-1]
		}
	}
	return line[:start] + common + line[pos:], start + len(common), matches
}

// candidates lists the words that may follow words, the line's complete
// words before the one being typed, which begins with prefix.
func (cp *completer) candidates(words []string, prefix string) []string {
	if len(words) == 0 {
		names := []string{}
		for _, e := range consoleCommands {
			names = append(names, e.words()[0])
		}
		return append(names, "help", "quit", "exit")
	}
	if words[0] == "help" || words[0] == "?" {
		if len(words) == 1 {
			return cp.candidates(nil, prefix)
		}
		words = words[1:]
		if len(words) > 1 {
			return nil
		}
		return cp.subcommands(words[0])
	}
	e, n, err := lookupConsoleCommand(words)
	if err != nil {
		if len(words) == 1 {
			return cp.subcommands(words[0])
		}
		return nil
	}
	cmd := e.build(cp.con)
	args := words[n:]
	if strings.HasPrefix(prefix, "-") {
		out := []string{"--help"}
		for _, f := range cmd.Flags {
			for _, name := range f.Names() {
				out = append(out, dashed(name))
			}
		}
		return out
	}
	// The value of a flag?
	if len(args) > 0 && strings.HasPrefix(args[len(args)-1], "-") && !strings.Contains(args[len(args)-1], "=") {
		if f := findFlag(cmd.Flags, strings.TrimLeft(args[len(args)-1], "-")); f != nil && takesValue(f) {
			switch f.Names()[0] {
			case "to", "host":
				return cp.fromMaster("hosts")
			case "via":
				return []string{"direct", "indirect"}
			}
			return nil
		}
	}
	positional := 0
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			if f := findFlag(cmd.Flags, strings.TrimLeft(args[i], "-")); f != nil && takesValue(f) && !strings.Contains(args[i], "=") {
				i++
			}
			continue
		}
		positional++
	}
	switch e.path {
	case "kill":
		return cp.fromMaster("tids")
	case "migrate":
		if positional == 0 {
			return cp.fromMaster("tids")
		}
	case "delete":
		return cp.fromMaster("hosts")
	case "load inject":
		if positional == 0 {
			return cp.fromMaster("hosts")
		}
	case "checkpoint":
		if positional == 0 {
			return cp.fromMaster("jobs")
		}
	case "run", "spawn":
		if positional == 0 {
			var names []string
			for _, p := range task.Programs() {
				names = append(names, p.Name)
			}
			if e.path == "spawn" {
				names = append(names, task.Types()...)
			}
			return names
		}
	}
	return nil
}

// subcommands lists the second words of the commands of two words whose
// first is word ("sched": status).
func (cp *completer) subcommands(word string) []string {
	var out []string
	for _, e := range consoleCommands {
		if ew := e.words(); len(ew) > 1 && ew[0] == word {
			out = append(out, ew[1])
		}
	}
	return out
}

// fromMaster asks the master for the running tasks' TIDs ("tids"), the
// hosts' names ("hosts") or the running jobs' numbers ("jobs"). A master
// that does not answer offers nothing.
func (cp *completer) fromMaster(what string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), cp.con.timeout)
	defer cancel()
	cl, err := cp.con.client(ctx)
	if err != nil {
		return nil
	}
	var out []string
	switch what {
	case "hosts":
		hosts, err := cl.Hosts(ctx)
		if err != nil {
			return nil
		}
		for _, h := range hosts {
			out = append(out, h.Name)
		}
	case "tids", "jobs":
		ts, err := cl.Tasks(ctx, false)
		if err != nil {
			return nil
		}
		for _, t := range ts {
			switch {
			case what == "tids":
				out = append(out, t.TID.String())
			case t.Job != 0:
				out = append(out, fmt.Sprintf("j%d", t.Job))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

func takesValue(f cli.Flag) bool {
	tv, ok := f.(interface{ TakesValue() bool })
	return ok && tv.TakesValue()
}

// homeEndKeys rewrites the Home and End keys that terminals send in other
// forms (ESC O H, ESC [ 1 ~, ESC [ 7 ~ and their End twins) into the
// ESC [ H and ESC [ F the line editor knows. A sequence split between two
// reads is held back until its end arrives.
type homeEndKeys struct {
	r       io.Reader
	buf     []byte
	pending []byte // the start of a sequence, to be completed by the next read
	out     []byte // translated, not yet returned
	err     error  // the reader's error, returned once out is drained
}

// keyRewrites maps the sequences rewritten to what they become.
var keyRewrites = []struct{ from, to string }{
	{"\x1bOH", "\x1b[H"}, {"\x1b[1~", "\x1b[H"}, {"\x1b[7~", "\x1b[H"},
	{"\x1bOF", "\x1b[F"}, {"\x1b[4~", "\x1b[F"}, {"\x1b[8~", "\x1b[F"},
}

func (k *homeEndKeys) Read(p []byte) (int, error) {
	for len(k.out) == 0 {
		if k.err != nil {
			return 0, k.err
		}
		if k.buf == nil {
			k.buf = make([]byte, 256)
		}
		n, err := k.r.Read(k.buf)
		data := append(k.pending, k.buf[:n]...)
		k.err = err
		k.out, k.pending = rewriteKeys(data, err != nil)
	}
	n := copy(p, k.out)
	k.out = k.out[n:]
	return n, nil
}

// rewriteKeys rewrites the sequences of keyRewrites in data. Unless final,
// a trailing start of one of them is returned apart, as pending.
func rewriteKeys(data []byte, final bool) (out, pending []byte) {
	out = make([]byte, 0, len(data))
outer:
	for i := 0; i < len(data); {
		if data[i] != 0x1b {
			out = append(out, data[i])
			i++
			continue
		}
		rest := string(data[i:])
		for _, kr := range keyRewrites {
			if strings.HasPrefix(rest, kr.from) {
				out = append(out, kr.to...)
				i += len(kr.from)
				continue outer
			}
		}
		if !final {
			for _, kr := range keyRewrites {
				if len(rest) < len(kr.from) && strings.HasPrefix(kr.from, rest) {
					return out, append([]byte(nil), rest...)
				}
			}
		}
		out = append(out, data[i])
		i++
	}
	return out, nil
}
