package npb

import (
	"runtime"
	"syscall"
)

// osYield lets the task's goroutines and then the machine's other threads
// run (sched_yield): while a receive polls, a partner task or another
// process waiting for this CPU gets it.
func osYield() {
	runtime.Gosched()
	syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
