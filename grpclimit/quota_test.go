package grpclimit_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// A call of cost 3 refused by an empty bucket, over a real loopback
// connection: its ratelimit metadata says the bucket's wait for one token,
// its pushback and RetryInfo the call's wait for its 3 tokens, 2 tokens (20
// minutes) longer.
//
// The waits shrink while the test runs, so the test derives the one-token
// wait from the RetryInfo delay the same call carries (exact to the
// nanosecond) instead of from the clock: a GCRA bucket of burst 6 can pay n
// tokens once it is 6-n tokens from full, so the one-token wait is the
// 3-token wait minus 2 intervals, exactly. Any load short of a 10-minute
// stall gives the same result.
func TestQuotaTIsTheBucketsOneTokenWaitPushbackTheCallsWait(t *testing.T) {
	const interval = 10 * time.Minute
	lim, _ := newLimiter(t, 6, 6*interval)
	c := serve(t, lim, []grpclimit.Option{grpclimit.WithMethodCost(checkMethod, 3), grpclimit.WithQuotaMetadata()})
	for n := range 2 {
		if _, err := check(c, context.Background()); err != nil {
			t.Fatalf("call %d of cost 3 into a bucket of 6: %v", n+1, err)
		}
	}
	tr, err := check(c, context.Background())
	wantCode(t, err, codes.ResourceExhausted, "third call of cost 3, 0 tokens left")
	trailer, info := pushback(t, err, tr)
	if want := ((info-1)/time.Millisecond + 1) * time.Millisecond; trailer != want {
		t.Errorf("pushback trailer %v, want RetryInfo's %v rounded up to milliseconds", trailer, info)
	}
	if info <= 2*interval || info > 3*interval {
		t.Fatalf("RetryInfo %v, want the wait for 3 tokens: more than 2 intervals (%v), at most 3 (%v)", info, 2*interval, 3*interval)
	}
	oneToken := info - 2*interval
	wantT := int64((oneToken-1)/time.Second) + 1
	if got, want := tr.Get("ratelimit"), fmt.Sprintf(`"default";r=0;t=%d`, wantT); len(got) != 1 || got[0] != want {
		t.Errorf("ratelimit %q, want %q: t is the bucket's wait for one token (RetryInfo %v minus 2 intervals)", got, want, info)
	}
	if got, want := tr.Get("ratelimit-policy"), `"default";q=6;w=3600`; len(got) != 1 || got[0] != want {
		t.Errorf("ratelimit-policy %q, want %q", got, want)
	}
}

// The quota metadata of a call is what the HTTP middleware sends for a
// request of the same cost to a Limiter of the same configuration at the
// same moment (one synctest clock for both), field for field, in each header
// style; a refused call's pushback is the request's Retry-After (rounded to
// milliseconds instead of seconds). The calls go through the interceptor in
// process: a synctest bubble cannot hold a real connection.
func TestQuotaMetadataIsWhatHTTPSends(t *testing.T) {
	for _, style := range []addrlimit.HeaderStyle{addrlimit.HeaderDraft, addrlimit.HeaderXRateLimit, addrlimit.HeaderNone} {
		t.Run(style.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { compareWithHTTP(t, style) })
		})
	}
}

func compareWithHTTP(t *testing.T, style addrlimit.HeaderStyle) {
	const burst, per = 6, time.Minute // one token per 10 s
	httpLim, err := addrlimit.New(burst, per, addrlimit.WithHeaders(style), addrlimit.WithCost(func(r *http.Request) int {
		n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
		return n
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := httpLim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	grpcLim, err := addrlimit.New(burst, per, addrlimit.WithHeaders(style))
	if err != nil {
		t.Fatal(err)
	}
	byCost := map[int]*grpclimit.Interceptor{}
	for n := 1; n <= burst; n++ {
		if byCost[n], err = grpclimit.New(grpcLim, grpclimit.WithMethodCost(checkMethod, n), grpclimit.WithQuotaMetadata()); err != nil {
			t.Fatal(err)
		}
	}
	type step struct {
		sleep time.Duration
		cost  int
	}
	// An empty bucket and a call of cost 3 (t=10, Retry-After 30), 2 tokens
	// left and cost 3, then a mixed sequence.
	steps := []step{{0, 6}, {0, 3}, {20 * time.Second, 3}}
	for i := range 40 {
		steps = append(steps, step{time.Duration(i%7) * 1300 * time.Millisecond, 1 + i*5%burst})
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	refused := 0
	for i, st := range steps {
		time.Sleep(st.sleep)
		r := httptest.NewRequest(http.MethodPost, checkMethod, nil)
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("X-Cost", strconv.Itoa(st.cost))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		s := &trailerStream{}
		ran, err := callUnary(byCost[st.cost], grpcContextWithStream(ctx, s))
		if ran != (w.Code == http.StatusOK) {
			t.Fatalf("step %d (cost %d): call ran %v (error %v), HTTP status %d", i, st.cost, ran, err, w.Code)
		}
		got := s.header
		if !ran {
			refused++
			got = s.trailer.Copy()
			ms, perr := strconv.ParseInt(first(got[grpclimit.PushbackTrailer]), 10, 64)
			if wantS := w.Header().Get("Retry-After"); perr != nil || strconv.FormatInt((ms+999)/1000, 10) != wantS {
				t.Errorf("step %d (cost %d): pushback %q ms, HTTP Retry-After %q s", i, st.cost, got[grpclimit.PushbackTrailer], wantS)
			}
			delete(got, grpclimit.PushbackTrailer)
		}
		want := metadata.MD{}
		for k, v := range w.Header() {
			switch k {
			case "Retry-After", "Cache-Control", "Content-Type", "X-Content-Type-Options":
				continue // the refusal, not the quota
			}
			want[strings.ToLower(k)] = v
		}
		if style != addrlimit.HeaderNone && len(want) == 0 {
			t.Fatalf("step %d: HTTP sent no quota fields in style %v", i, style)
		}
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("step %d (cost %d): metadata %v, HTTP fields %v", i, st.cost, map[string][]string(got), map[string][]string(want))
		}
	}
	if refused == 0 || refused == len(steps) {
		t.Fatalf("%d of %d steps refused: the sequence must have both outcomes", refused, len(steps))
	}
}
