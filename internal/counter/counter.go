// Package counter provides a striped event counter: cheap to increment from
// many goroutines at once, exact when read.
package counter

import (
	"math/rand/v2"
	"sync/atomic"
)

const stripes = 16

// Striped counts events. Add spreads increments over cache-line-padded
// stripes chosen at random, so concurrent writers rarely touch the same line;
// Load sums them. The zero value is ready to use; it must not be copied after
// first use.
type Striped struct {
	cells [stripes]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

// Inc adds one.
func (c *Striped) Inc() { c.cells[rand.Uint32()%stripes].n.Add(1) }

// Load returns the total. It is exact once concurrent Inc calls have returned.
func (c *Striped) Load() uint64 {
	var n uint64
	for i := range c.cells {
		n += c.cells[i].n.Load()
	}
	return n
}
