package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestJoinRetrySaysWhyItStopped: a join a busy master keeps refusing ends
// after JoinTimeout, saying so; one interrupted (a signal cancels its
// context) says it was interrupted, not that it gave up after the timeout.
func TestJoinRetrySaysWhyItStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &Daemon{cfg: Config{Name: "h2", JoinTimeout: time.Minute}, log: slog.New(slog.DiscardHandler)}
		busy := func(context.Context) error { return &BusyError{RetryAfter: time.Second} }
		err := d.joinRetry(t.Context(), time.Second, busy)
		if err == nil || !strings.Contains(err.Error(), "gave up after 1m0s") {
			t.Errorf("join timed out: %v", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		tries := 0
		err = d.joinRetry(ctx, time.Second, func(ctx context.Context) error {
			if tries++; tries == 3 {
				cancel()
			}
			return busy(ctx)
		})
		if err == nil || strings.Contains(err.Error(), "gave up") || !strings.Contains(err.Error(), "interrupted") {
			t.Errorf("join interrupted: %v", err)
		}
	})
}
