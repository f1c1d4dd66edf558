package replica

import (
	"context"
	"fmt"
	"log/slog"
)

// logger gives raft's log to a *slog.Logger, with the replica's ID.
// raft's Panic and Fatal panic after logging: raft calls them when its
// invariants fail and does not expect them to return (Step turns the
// panic into EffStopped).
type logger struct {
	l *slog.Logger
}

func newLogger(l *slog.Logger, id uint64) logger {
	return logger{l.With("replica", id)}
}

func (g logger) log(level slog.Level, msg string) {
	if g.l.Enabled(context.Background(), level) {
		g.l.Log(context.Background(), level, "raft: "+msg)
	}
}

func (g logger) Debug(v ...any)                 { g.log(slog.LevelDebug, fmt.Sprint(v...)) }
func (g logger) Debugf(format string, v ...any) { g.log(slog.LevelDebug, fmt.Sprintf(format, v...)) }
func (g logger) Info(v ...any)                  { g.log(slog.LevelInfo, fmt.Sprint(v...)) }
func (g logger) Infof(format string, v ...any)  { g.log(slog.LevelInfo, fmt.Sprintf(format, v...)) }
func (g logger) Warning(v ...any)               { g.log(slog.LevelWarn, fmt.Sprint(v...)) }
func (g logger) Warningf(format string, v ...any) {
	g.log(slog.LevelWarn, fmt.Sprintf(format, v...))
}
func (g logger) Error(v ...any)                 { g.log(slog.LevelError, fmt.Sprint(v...)) }
func (g logger) Errorf(format string, v ...any) { g.log(slog.LevelError, fmt.Sprintf(format, v...)) }
func (g logger) Fatal(v ...any)                 { g.Panic(v...) }
func (g logger) Fatalf(format string, v ...any) { g.Panicf(format, v...) }
func (g logger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	g.log(slog.LevelError, s)
	panic(s)
}
func (g logger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	g.log(slog.LevelError, s)
	panic(s)
}
