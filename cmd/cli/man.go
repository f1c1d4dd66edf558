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
			return writeMan(c.App, c.App.Writer)
		},
	}
}

// writeMan writes app's manual page.
func writeMan(app *cli.App, w io.Writer) error {
	page, err := app.ToManWithSection(1)
	if err != nil {
		return fmt.Errorf("man: %w", err)
	}
	_, err = io.WriteString(w, page)
	return err
}
