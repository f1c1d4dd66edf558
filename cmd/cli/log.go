package cli

import (
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"
)

// logLevelFlag is the global --log-level flag.
var logLevelFlag = &cli.StringFlag{
	Name:    "log-level",
	Value:   "warn",
	Usage:   "log level: debug, info, warn or error (logs go to standard error)",
	EnvVars: []string{"DPVM_LOG"},
}

// logFormatFlag is the global --log-format flag.
var logFormatFlag = &cli.StringFlag{
	Name:    "log-format",
	Value:   "text",
	Usage:   "log format: text (key=value) or json (one object a line)",
	EnvVars: []string{"DPVM_LOG_FORMAT"},
	Action: func(_ *cli.Context, v string) error {
		if v != "text" && v != "json" {
			return cli.Exit(fmt.Sprintf("--log-format %q: want text or json", v), 2)
		}
		return nil
	},
}

// loggerFrom returns a logger writing to the app's error stream at the
// level --log-level names, in the format --log-format names.
func loggerFrom(c *cli.Context) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		lvl = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.String("log-format") == "json" {
		return slog.New(slog.NewJSONHandler(c.App.ErrWriter, opts))
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts))
}
