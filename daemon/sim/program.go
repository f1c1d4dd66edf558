package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dpvm/dpvm/task"
)

// ErrUnknownProgram: no program is registered under the name.
var ErrUnknownProgram = fmt.Errorf("unknown program: %w", task.ErrUnknownType)

// ProgramFromArgs returns the registered program name with its flags and
// arguments args (as `dpvm run` takes them), as a Program that builds a
// fresh root task for each run. The flags are checked once here.
func ProgramFromArgs(name string, args []string) (Program, error) {
	p, ok := task.LookupProgram(name)
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrUnknownProgram)
	}
	build := func() (task.Task, error) { return p.Task(args...) }
	if _, err := build(); err != nil {
		return nil, err
	}
	return build, nil
}

// ReplayCommand is the command line (of the binary cmd) that runs seed
// again, alone, as cfg ran it: program name with its args.
func ReplayCommand(cmd string, cfg Config, name string, args []string) string {
	parts := []string{cmd, "sim", "vm", "--first-seed", strconv.FormatUint(cfg.Seed, 10), "--seeds", "1",
		"--hosts", strconv.Itoa(cfg.withDefaults().Hosts), "--faults", cfg.Faults.String()}
	if cfg.Routes != RoutesDemand {
		parts = append(parts, "--routes", cfg.Routes.String())
	}
	parts = append(parts, name)
	for _, a := range args {
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

// quote quotes s for a POSIX shell where it needs it.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
