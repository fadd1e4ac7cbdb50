package addrlimit

import (
	"fmt"
	"strconv"

	"github.com/addrlimit/addrlimit/internal/headers"
	"github.com/addrlimit/addrlimit/internal/limits"
	"github.com/addrlimit/addrlimit/store"
)

// Limit is one token bucket: N requests per period P in bursts of B is
// Limit{Burst: B, Interval: P / N} (store.Limit).
type Limit = store.Limit

// Policy is a set of limits applied together to each key, all or nothing
// (store.Policy has its fields and rule); give it to WithPolicy.
type Policy = store.Policy

// maxLimits bounds the limits of one policy (store.MaxLimits).
const maxLimits = store.MaxLimits

// named returns a copy of p with every limit named (see Limit.Name).
func named(p Policy) Policy {
	q := Policy{Name: p.Name, Limits: make([]Limit, len(p.Limits)), InFlight: p.InFlight}
	for i, lim := range p.Limits {
		lim.Name = limits.Name(lim.Name, lim.Burst, lim.Interval)
		q.Limits[i] = lim
	}
	return q
}

// headerLimits is p's limits as the header fields name them.
func headerLimits(p Policy) []headers.Limit {
	out := make([]headers.Limit, len(p.Limits))
	for i, lim := range p.Limits {
		out[i] = headers.Limit{Name: lim.Name, Burst: lim.Burst, Interval: lim.Interval}
	}
	return out
}

// policyID is p's identity in a Store (see store.Store): its Name and each
// limit's Burst and Interval, in order. Policies with equal ids share
// buckets.
func policyID(p Policy) string {
	b := []byte(p.Name)
	for _, lim := range p.Limits {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Burst), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(lim.Interval), 10)
	}
	return string(b)
}

// DefaultPolicyName names the default policy unless WithName says otherwise.
const DefaultPolicyName = "default"

// maxPolicyName bounds the length of a policy name.
const maxPolicyName = headers.MaxNameLen

// checkPolicyName reports whether name may name a policy (headers.CheckName).
func checkPolicyName(name string) error {
	if err := headers.CheckName(name); err != nil {
		return fmt.Errorf("addrlimit: %w", err)
	}
	return nil
}
