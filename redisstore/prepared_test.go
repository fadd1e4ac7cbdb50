package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// A policy is validated once, not on every call: a Take that the deny
// cache answers allocates what it needs to find the key (the Redis key's
// buffer and string, the call record), not one allocation per limit for
// Policy.Validate, which builds each limit's name in the RateLimit fields,
// "<policy>-<limit>" (7 allocations per call with three limits before, 4
// after).
func TestPolicyIsValidatedOnce(t *testing.T) {
	needRedis(t)
	s := newStore(t, shared.client(t))
	ctx := context.Background()
	p := addrlimit.Policy{Name: "p", Limits: []addrlimit.Limit{
		{Name: "s", Burst: 1, Interval: time.Hour},
		{Name: "m", Burst: 2, Interval: time.Hour},
		{Name: "h", Burst: 3, Interval: time.Hour},
	}}
	if err := s.CheckPolicy(p); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		res, err := s.Take(ctx, "k", p, 1)
		if err != nil || res.Allowed != want {
			t.Fatalf("Take %d: %+v, %v, want Allowed %v", i+1, res, err, want)
		}
	}
	// The Redis key of several limits is built in one buffer and made a
	// string, the call record is made before the deny cache is asked, and
	// one more is the measured rest: 4 allocations, whatever the limits.
	const keyAllocs = 4
	allocs := testing.AllocsPerRun(100, func() {
		if res, err := s.Take(ctx, "k", p, 1); err != nil || res.Allowed {
			t.Fatalf("Take answered by the deny cache: %+v, %v", res, err)
		}
	})
	if allocs > keyAllocs {
		t.Errorf("a Take the deny cache answers allocates %v times, want at most %d (the key and the call record)", allocs, keyAllocs)
	}
}
