package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// passthrough lists commands whose positional arguments end flag parsing for
// good: after the program's name in `dpvm run`, the rest belongs to the
// program.
var passthrough = map[string]bool{
	"run":    true,
	"slurm":  true,
	"sim vm": true,
}

// reorderArgs lets users type flags after positional arguments
// (`dpvm migrate t1:7 --to h2`). urfave/cli v2 stops parsing flags at the
// first positional argument, so the flags of the addressed command are moved
// in front of its positional arguments, keeping their relative order. A "--"
// ends the reordering; commands in passthrough are left untouched.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags, then the command path.
	var flags []cli.Flag = app.Flags
	cmds := app.Commands
	var path []string
	for len(rest) > 0 {
		tok := rest[0]
		if tok == "--" {
			return append(out, rest...)
		}
		if isFlag(tok) {
			n := flagArity(flags, tok)
			if n > len(rest) {
				n = len(rest)
			}
			out = append(out, rest[:n]...)
			rest = rest[n:]
			continue
		}
		cmd := findCommand(cmds, tok)
		if cmd == nil {
			break
		}
		out = append(out, tok)
		rest = rest[1:]
		path = append(path, cmd.Name)
		if passthrough[strings.Join(path, " ")] {
			return append(out, rest...)
		}
		flags = cmd.Flags
		cmds = cmd.Subcommands
	}
	if len(path) == 0 {
		return append(out, rest...)
	}
	var moved, positional []string
	for len(rest) > 0 {
		tok := rest[0]
		if tok == "--" {
			positional = append(positional, rest...)
			break
		}
		if isFlag(tok) {
			n := flagArity(flags, tok)
			if n > len(rest) {
				n = len(rest)
			}
			moved = append(moved, rest[:n]...)
			rest = rest[n:]
			continue
		}
		positional = append(positional, tok)
		rest = rest[1:]
	}
	out = append(out, moved...)
	return append(out, positional...)
}

func isFlag(tok string) bool {
	return len(tok) > 1 && tok[0] == '-' && tok != "--" && !isNumber(tok)
}

// isNumber reports whether tok is a negative number, which is an argument
// rather than a flag.
func isNumber(tok string) bool {
	if len(tok) < 2 || tok[0] != '-' {
		return false
	}
	for _, r := range tok[1:] {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return true
}

// flagArity is how many tokens the flag token tok consumes: 2 for a flag that
// takes a value given as the next token, 1 otherwise.
func flagArity(flags []cli.Flag, tok string) int {
	name := strings.TrimLeft(tok, "-")
	if strings.Contains(name, "=") {
		return 1
	}
	if name == "h" || name == "help" {
		return 1
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if tv, ok := f.(interface{ TakesValue() bool }); ok && tv.TakesValue() {
				return 2
			}
			return 1
		}
	}
	return 1
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
