package cli

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestReorderArgs(t *testing.T) {
	app := &cli.App{
		Flags: []cli.Flag{&cli.StringFlag{Name: "log-level"}},
		Commands: []*cli.Command{
			{Name: "migrate", Flags: []cli.Flag{
				&cli.StringFlag{Name: "to"},
				&cli.StringFlag{Name: "via"},
				&cli.BoolFlag{Name: "json"},
			}},
			{Name: "run", Flags: []cli.Flag{&cli.IntFlag{Name: "hosts"}}},
			{Name: "sched", Subcommands: []*cli.Command{
				{Name: "plan", Flags: []cli.Flag{&cli.StringFlag{Name: "state"}, &cli.BoolFlag{Name: "json"}}},
			}},
		},
	}
	cases := []struct{ in, want []string }{
		{[]string{"dpvm", "migrate", "t1:7", "--to", "h2"}, []string{"dpvm", "migrate", "--to", "h2", "t1:7"}},
		{[]string{"dpvm", "migrate", "t1:7", "--json", "--via=indirect", "--to", "h2"},
			[]string{"dpvm", "migrate", "--json", "--via=indirect", "--to", "h2", "t1:7"}},
		{[]string{"dpvm", "--log-level", "debug", "migrate", "t1:7", "-to", "h2"},
			[]string{"dpvm", "--log-level", "debug", "migrate", "-to", "h2", "t1:7"}},
		{[]string{"dpvm", "migrate", "t1:7", "--", "--to"}, []string{"dpvm", "migrate", "t1:7", "--", "--to"}},
		// After a program's name in run, the rest belongs to the program.
		{[]string{"dpvm", "run", "--hosts", "2", "hello", "--hosts", "3"},
			[]string{"dpvm", "run", "--hosts", "2", "hello", "--hosts", "3"}},
		{[]string{"dpvm", "sched", "plan", "x", "--state", "f.json", "--json"},
			[]string{"dpvm", "sched", "plan", "--state", "f.json", "--json", "x"}},
		// Negative numbers are arguments, not flags.
		{[]string{"dpvm", "migrate", "-1", "--to", "h2"}, []string{"dpvm", "migrate", "--to", "h2", "-1"}},
		{[]string{"dpvm", "unknown", "a", "--b"}, []string{"dpvm", "unknown", "a", "--b"}},
		{[]string{"dpvm"}, []string{"dpvm"}},
	}
	for _, c := range cases {
		if got := reorderArgs(app, slices.Clone(c.in)); !slices.Equal(got, c.want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
