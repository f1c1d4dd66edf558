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

// logFormatFlag is the global --log-format flag.
func logFormatFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "log-format",
		Value:   "text",
		Usage:   "log format: text (key=value) or json (one object a line)",
		EnvVars: []string{"DPVM_LOG_FORMAT"},
	}
}

// checkLogFlags rejects an unknown --log-level (or DPVM_LOG) or
// --log-format (or DPVM_LOG_FORMAT) before any command runs.
func checkLogFlags(c *cli.Context) error {
	if err := checkLogLevel(c); err != nil {
		return err
	}
	if f := c.String("log-format"); f != "text" && f != "json" {
		return cli.Exit(fmt.Sprintf("--log-format %q: want text or json (see 'dpvm --help')", f), exitUsage)
	}
	return nil
}

// loggerFrom returns a logger writing to the app's error stream at the
// level --log-level names, in the format --log-format names (both checked
// by checkLogFlags).
func loggerFrom(c *cli.Context) *slog.Logger {
	lvl, err := parseLogLevel(c.String("log-level"))
	if err != nil {
		lvl = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.String("log-format") == "json" {
		return slog.New(slog.NewJSONHandler(c.App.ErrWriter, opts))
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts))
}
