package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
)

// What Limiter.SetPolicies does to the buckets in Redis (docs/reload.md):
// Redis keys a client's buckets by the policy's name and limits, so a
// policy whose limits change starts there with full buckets (the memory
// store carries the tokens spent over); the old key stays until it would
// have refilled, so changing the limits back finds it again; a policy whose
// limits do not change keeps its key and its buckets. No decision fails.
func TestSetPoliciesOnRedis(t *testing.T) {
	needRedis(t)
	c := shared.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	perHour := func(n int) addrlimit.Policy {
		return addrlimit.Policy{Name: "default", Limits: []addrlimit.Limit{{Burst: n, Interval: time.Hour / time.Duration(n)}}}
	}
	lim, err := addrlimit.New(300, time.Hour, addrlimit.WithStore(s))
	if err != nil {
		t.Fatal(err)
	}
	take := func(policy string, n int) addrlimit.Decision {
		t.Helper()
		d := lim.AllowKey(ctx, policy, "client", n)
		if d.Err != nil || d.Degraded || d.Outcome != addrlimit.Allowed {
			t.Fatalf("AllowKey: %v, err %v, degraded %v", d.Outcome, d.Err, d.Degraded)
		}
		return d
	}
	remaining := func(policy string) int {
		t.Helper()
		d, err := lim.Peek(ctx, policy, "client")
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	take("", 250)
	if got := remaining(""); got != 50 {
		t.Fatalf("before the change: %d left, want 50", got)
	}
	api := addrlimit.Policy{Name: "api", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Minute}}}
	for _, step := range []struct {
		name     string
		policies []addrlimit.Policy
		want     int
	}{
		{"a named policy added, the default unchanged: its bucket is kept", []addrlimit.Policy{perHour(300), api}, 50},
		{"the default becomes 400/h: a fresh bucket in Redis", []addrlimit.Policy{perHour(400), api}, 400},
		{"back to 300/h: the old key, still there", []addrlimit.Policy{perHour(300), api}, 50},
	} {
		if err := lim.SetPolicies(step.policies...); err != nil {
			t.Fatal(err)
		}
		if got := remaining(""); got != step.want {
			t.Errorf("%s: %d left, want %d", step.name, got, step.want)
		}
		take("api", 1)
	}
	if got := remaining("api"); got != 7 {
		t.Errorf("api, unchanged through the changes: %d left, want 7", got)
	}
}
