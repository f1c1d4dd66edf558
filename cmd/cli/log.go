package cli

import (
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

// auditLogger returns the logger of a daemon's audit lines: standard
// error, whatever --log-level says.
func auditLogger(c *cli.Context) *slog.Logger {
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// loggerFrom returns a logger writing to the app's error stream at the
// level --log-level names.
func loggerFrom(c *cli.Context) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: lvl}))
}
