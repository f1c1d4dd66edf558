//go:build !linux

package npb

import "runtime"

// osYield lets the task's other goroutines run.
func osYield() { runtime.Gosched() }
