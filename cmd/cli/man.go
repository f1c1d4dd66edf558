package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// manCommand is `dpvm man`: the manual page, in roff, generated from the
// command tree.
func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page dpvm(1), in roff, generated from the command tree",
		Description: "Install it with, for example:\n" +
			"  dpvm man > /usr/local/share/man/man1/dpvm.1 && mandb\n" +
			"or read it at once with 'dpvm man | man -l -'.",
		Action: func(c *cli.Context) error {
			return writeMan(c.App.Writer)
		},
	}
}

// writeMan writes the manual page. It documents a command tree of its own,
// without the help commands urfave/cli adds to a tree as it runs (one of
// which, shared by every tree, may hold itself).
func writeMan(w io.Writer) error {
	app := newApp(w, io.Discard)
	app.HideHelpCommand = true
	page, err := app.ToManWithSection(1)
	if err != nil {
		return fmt.Errorf("man: %w", err)
	}
	_, err = io.WriteString(w, page)
	return err
}
