package headers

import (
	"math/bits"
	"net/http"
	"sync"
	"unsafe"
)

// arena hands out header value slots and the bytes of rendered values, so
// that setting the fields of a response does not allocate on its own: memory
// is carved from chunks, one allocation per chunkSlots values (and one per
// chunkBytes bytes of rendered values) instead of one or more per response.
//
// Sharing rules, which make the strings and slices handed out safe:
//   - A chunk is held by one goroutine at a time: it circulates through a
//     sync.Pool, whose Get removes it and whose Put hands it on (the pool
//     orders the two, also for the race detector). The holder is the only
//     writer of the chunk.
//   - Slots and bytes are handed out in increasing order and never handed out
//     again: a used-up chunk or byte block is dropped, never reset, and the
//     garbage collector frees it once no response refers to it (an interior
//     pointer keeps the whole block alive). So each slot belongs to exactly one
//     response: no two responses share a []string element, and a handler that
//     edits its own header values in place cannot affect another response.
//   - A rendered value is a string whose bytes are written once, by the
//     holder, before the string exists, and never again: it is as immutable as
//     any Go string. Such strings may be shared afterwards (they are values).
//
// The cost of this: a handler that keeps one value (or its header map) keeps
// the whole chunk or byte block it came from alive, a few kilobytes.
//
// The pool keeps chunks local to a processor, so concurrent requests neither
// contend nor share cache lines. Safe for concurrent use; the zero value is
// ready.
type arena struct {
	pool sync.Pool // of *chunk
}

// A chunk fills the 2304-byte allocation size class (TestChunkSize): 139
// slots, so that the garbage of a response is as close as it gets to its
// slots, 16 bytes each (2 for the draft fields of an allowed response).
const (
	chunkSize  = 2304
	chunkSlots = (chunkSize - int(unsafe.Sizeof(rendered{})) - 8) / 16
	chunkBytes = 2048
)

type chunk struct {
	vals [chunkSlots]string
	used int // slots handed out
	rendered
}

// rendered is the part of a chunk that outlives its slots.
type rendered struct {
	bytes *[chunkBytes]byte // block for rendered values; nil until one is needed
	off   int               // bytes of the block handed out
	// The last values rendered, for reuse (a flood of denials sees the same
	// wait, to the second, for a whole second). Zero: none.
	lastInt, lastWait   int
	lastIntS, lastWaitS string
}

// get returns a chunk with at least n free slots (n <= chunkSlots), held by
// the caller until put.
func (a *arena) get(n int) *chunk {
	c, _ := a.pool.Get().(*chunk)
	if c == nil {
		return new(chunk)
	}
	if c.used+n > chunkSlots {
		// Drop the used-up slots; keep the byte block and the memo.
		return &chunk{rendered: c.rendered}
	}
	return c
}

// put hands c back for later responses, unless it has no slot left.
func (a *arena) put(c *chunk) {
	if c.used < chunkSlots {
		a.pool.Put(c)
	}
}

// set sets h[name] to a one-element slice of a fresh slot holding v. The
// slice's capacity is 1, so appending to it copies instead of writing into the
// next slot.
func (c *chunk) set(h http.Header, name, v string) {
	i := c.used
	c.vals[i] = v
	h[name] = c.vals[i : i+1 : i+1]
	c.used = i + 1
}

// buf returns an empty slice with room for at least n bytes (n <= chunkBytes)
// that nothing else refers to. Render into it with append and pass the
// result to keep.
func (c *chunk) buf(n int) []byte {
	if c.bytes == nil || c.off+n > chunkBytes {
		c.bytes = new([chunkBytes]byte)
		c.off = 0
	}
	return c.bytes[c.off:c.off:chunkBytes]
}

// keep turns b, rendered into the slice from buf, into a string and hands its
// bytes out for good: they are never written again. (Had an append outgrown
// the room, b would be a fresh array nobody else refers to, equally safe.)
func (c *chunk) keep(b []byte) string {
	c.off += len(b)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// itoa returns the decimal form of n >= 0.
func (c *chunk) itoa(n int) string {
	if n < len(smallInts) {
		return smallInts[n]
	}
	if n == c.lastInt {
		return c.lastIntS
	}
	b := c.buf(maxDigits)
	c.lastInt, c.lastIntS = n, c.keep(b[:putUint(b[:maxDigits], uint64(n))])
	return c.lastIntS
}

// rateLimit renders the draft RateLimit value prefix+r;t=t, for r, t >= 0.
// The arena of a Writer serves one prefix.
func (c *chunk) rateLimit(prefix string, r, t int) string {
	if r == 0 && t == c.lastWait && c.lastWaitS != "" {
		return c.lastWaitS
	}
	b := c.buf(len(prefix) + 2*maxDigits + 3)
	b = b[:cap(b)]
	n := copy(b, prefix)
	n += putUint(b[n:], uint64(r))
	n += copy(b[n:], ";t=")
	n += putUint(b[n:], uint64(t))
	v := c.keep(b[:n])
	if r == 0 {
		c.lastWait, c.lastWaitS = t, v
	}
	return v
}

// list renders the draft RateLimit value of several limits: for each
// limit's Writer w[i] and state m[i], its member w[i].prefix r;t=t,
// separated by ", ".
func (c *chunk) list(w []*Writer, m []Member) string {
	size := 0
	for _, x := range w {
		size += len(x.prefix) + 2*maxDigits + 5
	}
	b := c.buf(size)
	b = b[:cap(b)]
	n := 0
	for i, x := range w {
		if i > 0 {
			n += copy(b[n:], ", ")
		}
		r := max(m[i].Remaining, 0)
		n += copy(b[n:], x.prefix)
		n += putUint(b[n:], uint64(r))
		n += copy(b[n:], ";t=")
		n += putUint(b[n:], uint64(wait(r, m[i].NextToken)))
	}
	return c.keep(b[:n])
}

// maxDigits is the length of the longest uint64 in decimal.
const maxDigits = 20

const pairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// putUint writes the decimal form of v at the start of b, which must have
// room for it, and returns its length.
func putUint(b []byte, v uint64) int {
	n := digits(v)
	i := n
	for v >= 100 {
		q := v / 100
		j := (v - q*100) * 2
		i -= 2
		b[i], b[i+1] = pairs[j], pairs[j+1]
		v = q
	}
	if v >= 10 {
		b[i-2], b[i-1] = pairs[v*2], pairs[v*2+1]
	} else {
		b[i-1] = byte('0' + v)
	}
	return n
}

// digits returns the number of decimal digits of v (1 for 0).
func digits(v uint64) int {
	t := bits.Len64(v|1) * 1233 >> 12 // floor(log10(2^len)), a guess off by at most one
	if v < pow10[t] {
		return max(t, 1)
	}
	return t + 1
}

var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}
