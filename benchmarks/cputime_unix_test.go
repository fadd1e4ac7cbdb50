//go:build unix

package benchmarks

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used so far, user and system,
// all threads (the garbage collector's included); 0 if unknown.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
