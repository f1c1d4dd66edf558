package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon"
)

// versionFlag is the global --version flag.
func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Usage: "print the version, VCS revision and Go version, and exit"}
}

// versionCommand is `dpvm version`: the build this binary is, which every
// daemon of a virtual machine must share.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, VCS revision and Go version of this binary, and its task types",
		Description: "Every daemon of a virtual machine must run the same build: the master refuses\n" +
			"a host whose version or registry of task types (the fingerprint shown) differs.",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			return printVersion(c.App.Writer, c.Bool("json"))
		},
	}
}

// printVersion prints daemon.ThisBuild, as text or as JSON.
func printVersion(w io.Writer, asJSON bool) error {
	b := daemon.ThisBuild()
	if asJSON {
		return printJSON(w, b)
	}
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	_, err := fmt.Fprintf(w, "dpvm %s\nrevision %s\n%s\ntask types %d, registry %s\n", b.Version, rev, b.Go, b.Types, b.Registry)
	return err
}
