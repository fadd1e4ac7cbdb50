package main

import (
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
)

// distinct estimates how many distinct values (hashes) it was given: exactly
// up to exactLimit, then by a HyperLogLog of 64 one-byte registers
// (Flajolet et al. 2007, with linear counting below 160), within about 13 %
// (one standard error). 137 bytes whatever it counts.
type distinct struct {
	exact [exactLimit]uint64
	n     uint8 // exact values held; exactLimit+1 once there were more
	h     hll
}

const exactLimit = 8

func (d *distinct) add(x uint64) {
	d.h.add(x)
	if int(d.n) > exactLimit {
		return
	}
	for _, v := range d.exact[:d.n] {
		if v == x {
			return
		}
	}
	if int(d.n) < exactLimit {
		d.exact[d.n] = x
	}
	d.n++
}

func (d *distinct) count() int {
	if int(d.n) <= exactLimit {
		return int(d.n)
	}
	return max(d.h.count(), exactLimit+1)
}

// hll is a HyperLogLog of 64 one-byte registers.
type hll [64]uint8

func (h *hll) add(x uint64) {
	i := x >> 58
	rank := uint8(bits.LeadingZeros64(x<<6|1<<5) + 1)
	if rank > h[i] {
		h[i] = rank
	}
}

func (h *hll) count() int {
	const m = 64.0
	sum, zeros := 0.0, 0
	for _, r := range h {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.709 * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return int(math.Round(e))
}

// sampleSet keeps the first few distinct values of a key's user agents or
// paths, for the report to name what shares an address: in place (no
// allocation per key), each cut to maxSampleLen bytes.
const (
	maxSamples   = 3
	maxSampleLen = 64
)

type sampleSet struct {
	hash [maxSamples]uint64
	val  [maxSamples][maxSampleLen]byte
	len  [maxSamples]uint8
	n    int
}

func (s *sampleSet) add(h uint64, v []byte) {
	if s.n == maxSamples || len(v) == 0 {
		return
	}
	for i := range s.n {
		if s.hash[i] == h {
			return
		}
	}
	s.hash[s.n] = h
	s.len[s.n] = uint8(copy(s.val[s.n][:], v))
	s.n++
}

// strings returns the samples, each a valid UTF-8 string.
func (s *sampleSet) strings() []string {
	out := make([]string, s.n)
	for i := range s.n {
		out[i] = printable(string(s.val[i][:s.len[i]]))
	}
	return out
}

// keyStats is what the report knows of one client key under one policy
// (one bucket).
type keyStats struct {
	key                        string
	hash                       uint64
	policy                     string
	requests, allowed, refused uint64
	over                       uint64 // space-saving overestimate: requests counted before the key entered the table
	firstRefusal               int64  // Unix ns, 0: none
	secEnd, minEnd             int64  // Unix ns: the ends of the current second and minute
	lastUA, lastPath           uint64 // hashes of the last user agent and path
	inSec, inMin               uint32 // requests in them
	peakSec, peakMin           uint32
	uas, paths                 distinct
	uaSamples, pathSamples     sampleSet
	idx                        int // in the heap
}

// keyTable counts per key with the space-saving algorithm (Metwally et al.
// 2005) over at most capacity keys: when a new key arrives at a full table
// it takes the place of the key with the fewest requests, inheriting that
// count as its overestimate. So memory is bounded by capacity entries
// (about 1 KB each with the key, so 10 MB at the default -keys), every key
// with more than N/capacity of N requests is in the table, and a key's
// counts are exact while its overestimate is 0. A key is a bucket: the same
// address under two policies is two keys.
// The overall totals are counted apart and are always exact.
type keyTable struct {
	seed     maphash.Seed
	capacity int
	byKey    map[uint64]*keyStats // by the hash of (policy, key), 64 bits: a collision is negligible at this size
	h        keyHeap
	replaced uint64 // keys that took another's place
	// The last policy name hashed, and its hash.
	policy     string
	policyHash uint64
}

func newKeyTable(capacity int) *keyTable {
	return &keyTable{seed: maphash.MakeSeed(), capacity: capacity, byKey: make(map[uint64]*keyStats, min(capacity, 1<<16))}
}

// hash is the table's hash of a bucket: its key's hash plus its policy's
// (the few policy names are hashed once each).
func (t *keyTable) hash(policy, key string) uint64 {
	if policy != t.policy {
		t.policy, t.policyHash = policy, maphash.String(t.seed, policy)
	}
	return maphash.String(t.seed, key) + t.policyHash*0x9e3779b97f4a7c15
}

func (t *keyTable) add(rec *record, d *addrlimit.Decision) {
	hk := t.hash(d.Policy, d.Key)
	k := t.byKey[hk]
	if k == nil {
		if len(t.byKey) < t.capacity {
			k = &keyStats{}
			t.h.push(k)
		} else {
			k = t.evict()
		}
		k.key, k.policy, k.hash = d.Key, d.Policy, hk
		t.byKey[hk] = k
	}
	k.requests++
	if d.Outcome == addrlimit.Limited {
		k.refused++
		if k.firstRefusal == 0 {
			k.firstRefusal = rec.time
		}
	} else {
		k.allowed++
	}
	if rec.time >= k.secEnd { // a new second (or minute): no division per line
		k.secEnd, k.inSec = rec.time-rec.time%1e9+1e9, 0
		if rec.time >= k.minEnd {
			k.minEnd, k.inMin = rec.time-rec.time%60e9+60e9, 0
		}
	}
	k.inSec++
	k.inMin++
	k.peakSec = max(k.peakSec, k.inSec)
	k.peakMin = max(k.peakMin, k.inMin)
	// A user agent or path like the key's last one changes no count.
	if hu := maphash.Bytes(t.seed, rec.ua); hu != k.lastUA {
		k.lastUA = hu
		k.uas.add(hu)
		k.uaSamples.add(hu, rec.ua)
	}
	path := pathOnly(rec.path)
	if hp := maphash.Bytes(t.seed, path); hp != k.lastPath {
		k.lastPath = hp
		k.paths.add(hp)
		k.pathSamples.add(hp, path)
	}
}

// evict empties the entry of the key with the fewest requests for a new
// key, which inherits that count as its overestimate. The heap is ordered
// by each entry's count when it was last placed (ranked), which only grows
// into requests; so counting a request costs no heap work, and the root is
// the true minimum once its ranked count is current: every other entry has
// requests >= ranked >= the root's.
func (t *keyTable) evict() *keyStats {
	for t.h[0].ranked != t.h[0].k.requests {
		t.h[0].ranked = t.h[0].k.requests
		t.h.down(0)
	}
	k := t.h[0].k
	delete(t.byKey, k.hash)
	over := k.requests
	*k = keyStats{idx: k.idx, over: over, requests: over}
	t.h[0].ranked = over
	t.replaced++
	return k
}

// pathOnly is a target without its query.
func pathOnly(p []byte) []byte {
	for i, c := range p {
		if c == '?' {
			return p[:i]
		}
	}
	return p
}

// keyHeap is a binary min-heap of the table's entries by ranked count. The
// counts are in the array, so sifting reads no entry.
type keyHeap []heapEntry

type heapEntry struct {
	ranked uint64 // the entry's requests when last placed
	k      *keyStats
}

func (h *keyHeap) push(k *keyStats) {
	*h = append(*h, heapEntry{ranked: k.requests, k: k})
	k.idx = len(*h) - 1
	h.up(k.idx)
}

func (h keyHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].k.idx, h[j].k.idx = i, j
}

func (h keyHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].ranked <= h[i].ranked {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h keyHeap) down(i int) {
	for {
		m, l := i, 2*i+1
		if l < len(h) && h[l].ranked < h[m].ranked {
			m = l
		}
		if r := l + 1; r < len(h) && h[r].ranked < h[m].ranked {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// maxIdentities bounds the identity table; further names are counted as
// otherIdentity.
const (
	maxIdentities = 64
	otherIdentity = "(other)"
)

type identityStats struct {
	Name     string `json:"name"`
	Requests uint64 `json:"requests"`
	Exempt   uint64 `json:"exempt"`
	Refused  uint64 `json:"refused"`
}

type identityTable struct{ byName map[string]*identityStats }

// maxIdentityLen bounds an identity name as the report keeps it.
const maxIdentityLen = 64

func (t *identityTable) add(id []byte, d *addrlimit.Decision) {
	id = id[:min(len(id), maxIdentityLen)]
	s := t.byName[string(id)]
	if s == nil {
		name := string(id)
		if len(t.byName) >= maxIdentities {
			name = otherIdentity
		}
		if s = t.byName[name]; s == nil {
			s = &identityStats{Name: printable(name)}
			t.byName[name] = s
		}
	}
	s.Requests++
	switch d.Outcome {
	case addrlimit.Exempt:
		s.Exempt++
	case addrlimit.Limited:
		s.Refused++
	}
}

// maxSlots bounds the timeline: when the log spans more slots than this, the
// slot width doubles and neighbours merge.
const maxSlots = 1024

type slot struct{ Requests, Refused, Exempt uint64 }

// timeline counts requests per slot of time since its first record.
type timeline struct {
	start int64 // Unix ns of slot 0
	width int64 // ns
	slots []slot
}

func (t *timeline) add(at int64, d *addrlimit.Decision) {
	if t.width == 0 {
		t.start, t.width = at-at%1e9, int64(time.Second)
	}
	i := max(at-t.start, 0) / t.width
	for i >= maxSlots {
		for j := range (len(t.slots) + 1) / 2 {
			a, b := t.slots[2*j], slot{}
			if 2*j+1 < len(t.slots) {
				b = t.slots[2*j+1]
			}
			t.slots[j] = slot{a.Requests + b.Requests, a.Refused + b.Refused, a.Exempt + b.Exempt}
		}
		t.slots = t.slots[:(len(t.slots)+1)/2]
		t.width *= 2
		i = max(at-t.start, 0) / t.width
	}
	for int64(len(t.slots)) <= i {
		t.slots = append(t.slots, slot{})
	}
	s := &t.slots[i]
	s.Requests++
	switch d.Outcome {
	case addrlimit.Limited:
		s.Refused++
	case addrlimit.Exempt:
		s.Exempt++
	}
}

// tally is everything the report counts.
type tally struct {
	lines, skipped                     uint64
	requests, allowed, refused, exempt uint64
	keyWarnings                        uint64 // decisions with Err set (still charged)
	withIdentity                       uint64
	first, last                        int64
	keys                               *keyTable
	ids                                identityTable
	time                               timeline
}

func newTally(capacity int) *tally {
	return &tally{keys: newKeyTable(capacity), ids: identityTable{byName: map[string]*identityStats{}}}
}

func (t *tally) add(rec *record, d *addrlimit.Decision) {
	t.requests++
	if t.first == 0 || rec.time < t.first {
		t.first = rec.time
	}
	t.last = max(t.last, rec.time)
	if d.Err != nil {
		t.keyWarnings++
	}
	if hasIdentity(rec.identity) {
		t.withIdentity++
		t.ids.add(rec.identity, d)
	}
	t.time.add(rec.time, d)
	switch d.Outcome {
	case addrlimit.Exempt:
		t.exempt++
		return // exempt requests have no key
	case addrlimit.Limited:
		t.refused++
	default:
		t.allowed++
	}
	t.keys.add(rec, d)
}

// printable is s as the report may print it on a terminal: valid UTF-8, with
// control characters (escape sequences included) replaced by '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
