package redisstore

import (
	"context"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/store"
)

// opTakeDebt + d is the script's operation for a Take that first charges a
// debt of d tokens.
const opTakeDebt = 4

// TakeWithDebt implements store.DebtStore: in one script call (batched
// like Take), it charges debt tokens to each of key's buckets under p
// whatever it holds (leaving it at most one burst below empty), then takes
// n as Take does, from every limit or none. It always asks Redis (the deny
// cache would not hear of the debt), and a denial enters the deny cache as
// a Take's would. The Limiter passes a debt of at most 2 × the smallest
// burst of p; a larger one is charged as that.
func (s *Store) TakeWithDebt(ctx context.Context, key string, p addrlimit.Policy, n, debt int) (store.Result, error) {
	if debt <= 0 || len(p.Limits) == 0 {
		return s.Take(ctx, key, p, n) // which refuses a policy without limits
	}
	smallest := p.Limits[0].Burst
	for _, lim := range p.Limits[1:] {
		smallest = min(smallest, lim.Burst)
	}
	return s.do(ctx, key, p, opTakeDebt+min(debt, 2*smallest), n)
}

var _ store.DebtStore = (*Store)(nil)
