//go:build !unix

package benchmarks

import "time"

// cpuTime is unknown here: 0.
func cpuTime() time.Duration { return 0 }
