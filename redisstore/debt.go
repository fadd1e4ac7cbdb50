package redisstore

import (
	"context"

	"github.com/addrlimit/addrlimit"
)

// opTakeDebt + d is the script's operation for a Take that first charges a
// debt of d tokens.
const opTakeDebt = 4

// TakeWithDebt implements addrlimit.DebtStore: in one script call (batched
// like Take), it charges debt tokens to key's bucket whatever it holds
// (leaving it at most one burst below empty), then takes n as Take does. It
// always asks Redis (the deny cache would not hear of the debt), and an
// empty bucket's answer enters the deny cache as a Take's would. A debt
// above 2 × burst is charged as 2 × burst, which already reaches the bound.
func (s *Store) TakeWithDebt(ctx context.Context, key string, p addrlimit.Policy, n, debt int) (addrlimit.Result, error) {
	if debt <= 0 || len(p.Limits) != 1 {
		return s.Take(ctx, key, p, n) // which refuses several limits
	}
	return s.do(ctx, key, p, opTakeDebt+min(debt, 2*p.Limits[0].Burst), n)
}

var _ addrlimit.DebtStore = (*Store)(nil)
