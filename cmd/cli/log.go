package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"
)

// logLevelFlag is the global --log-level flag.
func logLevelFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "log-level",
		Value:   "warn",
		Usage:   "log level: debug, info, warn or error (logs go to standard error)",
		EnvVars: []string{"DPVM_LOG"},
	}
}

// parseLogLevel reads a --log-level value: debug, info, warn or error, in
// any case.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
}

// checkLogLevel rejects an unknown --log-level (or DPVM_LOG) before any
// command runs.
func checkLogLevel(c *cli.Context) error {
	if _, err := parseLogLevel(c.String("log-level")); err != nil {
		return cli.Exit(err.Error()+" (see 'dpvm --help')", exitUsage)
	}
	return nil
}

// loggerFrom returns a logger writing to the app's error stream at the
// level --log-level names (checked by checkLogLevel).
func loggerFrom(c *cli.Context) *slog.Logger {
	lvl, err := parseLogLevel(c.String("log-level"))
	if err != nil {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: lvl}))
}
