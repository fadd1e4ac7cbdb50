// Package grpclimit limits gRPC calls per client address with an
// addrlimit.Limiter: unary and stream server interceptors that share the
// Limiter's policies, store, failure policy, counters and observers with its
// HTTP middleware.
//
//	lim, err := addrlimit.New(300, time.Minute, addrlimit.WithInternalToken(tok))
//	gl, err := grpclimit.New(lim, grpclimit.WithInternalMethods(tok, "/pkg.Internal/"))
//	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
//
// # What a call is charged
//
// The key is the peer address (peer.FromContext), normalised as on the HTTP
// path (addrlimit.AddrKey: IPv4-mapped addresses unmapped, IPv6 grouped by
// /64). Behind proxies, WithTrustedProxies applies addrlimit.TrustedProxies'
// rules to the header's metadata (x-forwarded-for, in lower case): a header
// from an untrusted peer is never read. A call carrying one of the Limiter's
// internal token secrets (addrlimit.WithInternalToken) in its "authorization"
// metadata is exempt: not counted and not charged, as on the HTTP path. A
// wrong, forged or retired token is charged like any call, and a retired one
// is flagged (Decision.RetiredToken, Stats.RetiredTokenLimited). The
// Limiter's WithExempt is an HTTP rule and is not consulted; WithExempt of
// this package is its counterpart for calls. WithInternalMethods is the
// counterpart of InternalToken.Require: calls of the methods it names need
// the token, and are charged before they are refused without it.
//
// A call costs 1 token of the Limiter's default policy unless
// WithMethodPolicy and WithMethodCost say otherwise for its method. A stream
// is charged once, when it opens, and its messages are not counted, unless
// WithStreamMessageCost charges each message the client sends. The
// Limiter's PolicySelector, KeyFunc and WithCost are HTTP rules and are not
// consulted. A rule's method is not checked against the server when it is
// set (New runs before the services are registered): call CheckServer at
// start-up, so that a misspelt method cannot stay on the default policy.
//
// # Unknown methods
//
// grpc-go answers a call of a method the server does not register with
// codes.Unimplemented before any interceptor runs: such calls (a scanner's
// probes) are not limited, counted or observed. With
// grpc.UnknownServiceHandler, grpc-go runs the stream interceptor for them
// (unary calls included), so they are charged at the default cost under
// the method name the client chose; an observer that labels by method then
// sees names chosen by clients.
//
// # Refusals
//
// A refused call ends with codes.ResourceExhausted, the fixed message "rate
// limit exceeded", a google.rpc.RetryInfo detail whose RetryDelay is
// Decision.RetryAfter, and the trailer grpc-retry-pushback-ms (gRFC A6) with
// the same delay in milliseconds, rounded up. A client whose retry policy
// lists RESOURCE_EXHAUSTED retries after exactly that delay instead of its own
// backoff. When the Store fails under addrlimit.FailClosed the quota is
// unknown: the call ends with codes.Unavailable, "rate limiter unavailable",
// and a delay of one second (the HTTP path's 503 with Retry-After: 1). No
// status carries the key, the error or anything else internal.
//
// # Design: a call described as an addrlimit.Call
//
// Each call is decided by Limiter.Decide, the path of the Limiter's HTTP
// middleware, described as an addrlimit.Call: the client address
// (ClientAddr, with the proxy header's warning as Call.Err), the
// "authorization" metadata values, WithExempt's verdict, the method's
// policy and cost, and the full method as the route observers see
// (Decision.Route; LogObserver logs it as route). So the exemption, the
// counters and every observer work exactly as for HTTP, and the quota
// metadata is rendered by Limiter.QuotaFields, the code of the HTTP fields. Deciding an allowed
// call costs 2 allocations and 32 bytes (the authorization values' copy
// that grpc-go's metadata API makes, and Decision.Key;
// BenchmarkUnaryInterceptor), where a whole unary call over loopback
// costs grpc-go 145 allocations and 8.7 kB (BenchmarkLoopbackCheck). The
// call's context reaches the Store without its cancellation, so a client's
// hang-up never looks like a Store failure (the Store's own timeout bounds
// the decision).
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/addrlimit/addrlimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// PushbackTrailer is the trailer of gRFC A6 that tells a client's retry
// policy how many milliseconds to wait before the next attempt.
const PushbackTrailer = "grpc-retry-pushback-ms"

// Interceptor limits the calls of a gRPC server with a Limiter. Build it
// with New; it is immutable and safe for concurrent use.
type Interceptor struct {
	config
	lim *addrlimit.Limiter
}

// config is what the options set.
type config struct {
	rules   map[string]rule // by full method, or "/pkg.Service/" for a whole service
	proxies *addrlimit.TrustedProxies
	proxyMD string // the proxies' header as a metadata key (lower case)
	exempt  func(ctx context.Context, method string) bool
	quota   bool
	token   *addrlimit.InternalToken // WithInternalMethods' guard
}

// rule is what WithMethodPolicy, WithMethodCost, WithStreamMessageCost and
// WithInternalMethods set for one method or service; zero fields are unset.
type rule struct {
	policy  string
	cost    int
	msgCost int  // per message received on a client stream; 0: not charged
	guarded bool // WithInternalMethods: the internal token is required
}

// An Option configures an Interceptor in New.
type Option func(*config) error

// WithMethodPolicy charges calls of method to the Limiter's policy named
// policy (one added with addrlimit.WithPolicy, or the default policy's name).
// method is a full method name, "/pkg.Service/Method", or a service,
// "/pkg.Service/", for all its methods; a method's own rule wins over its
// service's.
func WithMethodPolicy(method, policy string) Option {
	return func(i *config) error {
		if err := checkMethod(method); err != nil {
			return err
		}
		if policy == "" {
			return fmt.Errorf("grpclimit: WithMethodPolicy(%q) given an empty policy name", method)
		}
		r := i.rules[method]
		r.policy = policy
		i.rules[method] = r
		return nil
	}
}

// WithMethodCost makes a call of method cost n tokens (1 without it); method
// is named as for WithMethodPolicy. n must be at least 1 and at most the
// burst of the method's policy, which New checks, since a larger cost could
// never be paid.
func WithMethodCost(method string, n int) Option {
	return costOption("WithMethodCost", method, n, func(r *rule) { r.cost = n })
}

// costOption is the Option named opt that sets a cost n of method's rule.
func costOption(opt, method string, n int, set func(*rule)) Option {
	return func(i *config) error {
		if err := checkMethod(method); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("grpclimit: %s(%q): cost must be at least 1, got %d", opt, method, n)
		}
		r := i.rules[method]
		set(&r)
		i.rules[method] = r
		return nil
	}
}

// WithStreamMessageCost charges each message a client sends on a
// client-streaming or bidirectional stream of method n tokens, to the
// stream's key and policy, on top of the stream's own cost when it opens;
// method is named as for WithMethodPolicy. Without it a stream is charged
// once, however many messages it carries. n must be at least 1 and at most
// the burst of the method's policy.
//
// Each message is decided when the handler's RecvMsg (stream.Recv in
// generated code) has received it, and is one decision in Stats and for
// the observers, as a call is. When one is refused, RecvMsg returns the
// refusal's status (ResourceExhausted with RetryInfo, as for a call) and
// sets the pushback trailer; a handler that returns RecvMsg's error, as
// generated handlers do, ends the stream with it. Every later RecvMsg
// returns the same error and receives nothing. A stream exempt when it
// opened (the internal token) is exempt for all its messages. Messages the
// server sends are never charged.
func WithStreamMessageCost(method string, n int) Option {
	return costOption("WithStreamMessageCost", method, n, func(r *rule) { r.msgCost = n })
}

// WithInternalMethods guards methods as InternalToken.Require guards
// internal HTTP routes: a call of one of them that does not carry one of
// tok's accepted secrets as its single "authorization" metadata value
// ("Bearer <secret>", InternalToken.Match's rules) ends with
// codes.Unauthenticated and the fixed message "unauthenticated", and its
// handler does not run. tok is the token given to the Limiter with
// addrlimit.WithInternalToken, so the calls that pass the guard are also
// exempt from the limit.
//
// The guard runs inside the limiter's interceptors, after the decision, so
// it cannot be ordered before them: a call without the token, or with a
// wrong, forged or retired one, is charged first (guessing is rate-limited,
// and a retired secret is flagged) and refused with ResourceExhausted once
// its budget is spent, as lim.Handler(tok.Require(h)) answers 429 before
// 401. A call exempt by WithExempt still needs the token. methods are named
// as for WithMethodPolicy: full methods, or services ("/pkg.Service/") for
// all their methods, including, with grpc.UnknownServiceHandler, the
// methods a client makes up under the service's name; without one, grpc-go
// answers an unregistered method Unimplemented before any interceptor.
// Options may be repeated to add methods, with the same token.
func WithInternalMethods(tok *addrlimit.InternalToken, methods ...string) Option {
	return func(i *config) error {
		switch {
		case tok == nil:
			return errors.New("grpclimit: WithInternalMethods given a nil token")
		case i.token != nil && i.token != tok:
			return errors.New("grpclimit: WithInternalMethods given two different tokens")
		case len(methods) == 0:
			return errors.New("grpclimit: WithInternalMethods given no method")
		}
		for _, m := range methods {
			if err := checkMethod(m); err != nil {
				return err
			}
		}
		i.token = tok
		for _, m := range methods {
			r := i.rules[m]
			r.guarded = true
			i.rules[m] = r
		}
		return nil
	}
}

// errUnauthenticated ends a call of an internal method without the token.
var errUnauthenticated = status.Error(codes.Unauthenticated, "unauthenticated")

// authenticated reports whether the call in ctx carries an accepted secret
// of the token of WithInternalMethods, by InternalToken.Match's rules.
func (i *config) authenticated(ctx context.Context) bool {
	r := http.Request{Header: http.Header{"Authorization": metadata.ValueFromIncomingContext(ctx, "authorization")}}
	return i.token.Match(&r)
}

// WithTrustedProxies keys calls by the client address that t resolves from
// the peer and the metadata of t's header (t.Header() in lower case, such as
// x-forwarded-for), instead of the peer address: for servers behind a
// load balancer or an ingress proxy. A peer outside t's ranges is the
// client, whatever it sends; a malformed header is charged to the nearest
// trusted hop and reported to observers as addrlimit.ErrProxyHeader.
func WithTrustedProxies(t *addrlimit.TrustedProxies) Option {
	return func(i *config) error {
		if t == nil {
			return errors.New("grpclimit: WithTrustedProxies given nil")
		}
		i.proxies, i.proxyMD = t, strings.ToLower(t.Header())
		return nil
	}
}

// WithExempt sets a predicate for calls that bypass the limit, as the
// Limiter's WithExempt does for HTTP requests (which it is not consulted
// for): such a call touches no bucket and is counted (Stats.Exempt) and
// observed as Exempt, and a stream exempt when it opens is exempt for all
// its messages. f gets the call's context and full method, and is called
// concurrently for every call. It is a bypass: base it on what a client
// cannot forge, such as the method (a health check) or the peer's verified
// TLS identity (peer.FromContext(ctx).AuthInfo), never on metadata.
func WithExempt(f func(ctx context.Context, method string) bool) Option {
	return func(i *config) error {
		if f == nil {
			return errors.New("grpclimit: WithExempt given a nil function")
		}
		i.exempt = f
		return nil
	}
}

// WithQuotaMetadata sends the quota of every counted call as the quota
// fields the Limiter's HTTP responses carry, rendered by the same code, with
// lower-case names as metadata keys: by default "ratelimit" and
// "ratelimit-policy" (for example `"default";r=299;t=0` and
// `"default";q=300;w=60`), the x-ratelimit-* keys with
// addrlimit.HeaderXRateLimit, none with addrlimit.HeaderNone. They go in the
// response header of an allowed call and the trailer of a refused one. As
// on HTTP they describe the bucket: a refused call's ratelimit t is the
// bucket's wait for one token, while its pushback and RetryInfo are the
// call's own wait for its cost. It costs a few allocations per call.
func WithQuotaMetadata() Option {
	return func(i *config) error {
		i.quota = true
		return nil
	}
}

// checkMethod validates a method or service name of an option.
func checkMethod(m string) error {
	if len(m) < 3 || m[0] != '/' || strings.Count(m, "/") != 2 || strings.HasPrefix(m, "//") {
		return fmt.Errorf("grpclimit: method %q is not a full method name (\"/pkg.Service/Method\") or service (\"/pkg.Service/\")", m)
	}
	return nil
}

// New returns an Interceptor that limits calls with lim. It checks every
// option against lim: policies must exist, and a method's cost may not
// exceed its policy's burst.
func New(lim *addrlimit.Limiter, opts ...Option) (*Interceptor, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: New given a nil Limiter")
	}
	i := &Interceptor{config: config{rules: map[string]rule{}}, lim: lim}
	for n, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("grpclimit: option %d is nil", n+1)
		}
		if err := o(&i.config); err != nil {
			return nil, err
		}
	}
	policies := lim.Policies()
	bursts := make(map[string]int, len(policies))
	for n, p := range policies {
		burst := math.MaxInt // no rate limit (an in-flight limit alone): any cost
		for _, l := range p.Limits {
			burst = min(burst, l.Burst) // the largest cost every limit can pay
		}
		bursts[p.Name] = burst
		if n == 0 {
			bursts[""] = burst
		}
	}
	if len(i.rules) == 0 {
		i.rules = nil
	}
	for m := range i.rules {
		r := i.rule(m)
		burst, ok := bursts[r.policy]
		if !ok {
			return nil, fmt.Errorf("grpclimit: method %q: the Limiter has no policy %q", m, r.policy)
		}
		if r.cost > burst {
			return nil, fmt.Errorf("grpclimit: method %q costs %d, more than the burst %d of its policy, so no call could ever pay", m, r.cost, burst)
		}
		if r.msgCost > burst {
			return nil, fmt.Errorf("grpclimit: method %q: a message costs %d, more than the burst %d of its policy, so no message could ever pay", m, r.msgCost, burst)
		}
	}
	return i, nil
}

// rule returns the rule of method, its own fields before its service's: the
// policy ("" for the default one), the cost (at least 1), the cost of a
// message (0: messages are not charged) and whether the token is required.
func (i *config) rule(method string) rule {
	if i.rules == nil {
		return rule{cost: 1}
	}
	r := i.rules[method]
	if r.policy == "" || r.cost == 0 || r.msgCost == 0 || !r.guarded {
		if s := strings.LastIndexByte(method, '/'); s > 0 {
			svc := i.rules[method[:s+1]]
			r.policy = cmpOr(r.policy, svc.policy)
			r.cost = cmpOr(r.cost, svc.cost)
			r.msgCost = cmpOr(r.msgCost, svc.msgCost)
			r.guarded = r.guarded || svc.guarded
		}
	}
	r.cost = max(r.cost, 1)
	return r
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// Unary returns the unary server interceptor: it decides each call before
// the handler runs and returns the refusal's status instead of calling it,
// or, for a method of WithInternalMethods without the token, once the call
// is charged, Unauthenticated. Under a policy with an in-flight limit
// (addrlimit.Policy.InFlight) an allowed call holds its slot until the
// handler returns.
// It panics if i was not built by New (a nil or zero Interceptor), so that
// the mistake stops the server's setup instead of every call.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	i.mustBeBuilt()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r := i.rule(info.FullMethod)
		d := i.decide(ctx, info.FullMethod, r.policy, r.cost, false)
		if d.Denied() {
			md, err := i.refusal(&d)
			_ = grpc.SetTrailer(ctx, md)
			return nil, err
		}
		defer i.lim.Release(ctx, d)
		if i.quota && d.Outcome != addrlimit.Exempt {
			_ = grpc.SetHeader(ctx, i.quotaMD(&d))
		}
		if r.guarded && !i.authenticated(ctx) {
			return nil, errUnauthenticated
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: it decides each stream when
// it opens, at the cost of its method, and refuses it before the handler
// runs (Unauthenticated, as Unary, for an internal method without the
// token); with WithStreamMessageCost it also charges each message the client
// sends. Under a policy with an in-flight limit an allowed stream holds its
// slot until the handler returns, for the stream's whole life; its messages
// take none. It panics as Unary does if i was not built by New.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	i.mustBeBuilt()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		r := i.rule(info.FullMethod)
		d := i.decide(ss.Context(), info.FullMethod, r.policy, r.cost, false)
		if d.Denied() {
			md, err := i.refusal(&d)
			ss.SetTrailer(md)
			return err
		}
		defer i.lim.Release(ss.Context(), d)
		exempt := d.Outcome == addrlimit.Exempt
		if i.quota && !exempt {
			_ = ss.SetHeader(i.quotaMD(&d))
		}
		if r.guarded && !i.authenticated(ss.Context()) {
			return errUnauthenticated
		}
		if r.msgCost > 0 && info.IsClientStream && !exempt {
			ss = &chargedStream{ServerStream: ss, i: i, method: info.FullMethod, policy: r.policy, cost: r.msgCost}
		}
		return handler(srv, ss)
	}
}

// chargedStream charges each message it receives (WithStreamMessageCost).
// Like any ServerStream, it is not for concurrent RecvMsg calls.
type chargedStream struct {
	grpc.ServerStream
	i      *Interceptor
	method string
	policy string
	cost   int
	err    error // the refusal, once a message was refused
}

// RecvMsg receives a message and decides it; a refused message is not
// handed on, and neither is any later one.
func (s *chargedStream) RecvMsg(m any) error {
	if s.err != nil {
		return s.err
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	d := s.i.decide(s.Context(), s.method, s.policy, s.cost, true)
	if d.Denied() {
		var md metadata.MD
		md, s.err = s.i.refusal(&d)
		s.SetTrailer(md)
		return s.err
	}
	return nil
}

// mustBeBuilt panics if i was not built by New.
func (i *Interceptor) mustBeBuilt() {
	if i == nil || i.lim == nil {
		panic("grpclimit: Interceptor not built by New (nil or zero value)")
	}
}

// ClientAddr returns the address a call is keyed by (before AddrKey's
// grouping): the peer, or with WithTrustedProxies the client its header
// names. Errors are those of addrlimit.TrustedProxies.ClientAddr. Handlers
// may call it to log the client.
func (i *Interceptor) ClientAddr(ctx context.Context) (netip.Addr, error) {
	a, unix := peerAddr(ctx)
	switch {
	case i.proxies != nil && (a.IsValid() || unix):
		return i.proxies.ClientAddrFrom(a, metadata.ValueFromIncomingContext(ctx, i.proxyMD))
	case !a.IsValid():
		return netip.Addr{}, addrlimit.ErrNoClientAddress
	}
	return a.Unmap().WithZone(""), nil
}

// peerAddr is the IP address of the call's peer (or the zero Addr) and
// whether the peer came over a Unix socket.
func peerAddr(ctx context.Context) (netip.Addr, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	if t, ok := p.Addr.(*net.TCPAddr); ok {
		return t.AddrPort().Addr(), false
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return ap.Addr(), false
	}
	return netip.Addr{}, p.Addr.Network() == "unix" || p.LocalAddr != nil && p.LocalAddr.Network() == "unix"
}

// decide has the Limiter decide cost tokens of policy for the call of
// method in ctx: its client address (ClientAddr), its authorization
// metadata (the internal token), WithExempt's verdict, and the method as
// the route observers see. A message of a stream (message) takes no
// in-flight slot: its stream holds one.
func (i *Interceptor) decide(ctx context.Context, method, policy string, cost int, message bool) addrlimit.Decision {
	a, err := i.ClientAddr(ctx)
	return i.lim.Decide(ctx, addrlimit.Call{
		Addr:          a,
		Err:           err,
		Authorization: metadata.ValueFromIncomingContext(ctx, "authorization"),
		Exempt:        i.exempt != nil && i.exempt(ctx, method),
		Policy:        policy,
		Cost:          cost,
		Route:         method,
		NoSlot:        message,
	})
}

// refusal returns the status and trailer of the denied decision d.
func (i *Interceptor) refusal(d *addrlimit.Decision) (metadata.MD, error) {
	code, msg, delay := codes.ResourceExhausted, "rate limit exceeded", d.RetryAfter
	if d.InFlightLimited {
		msg = "too many calls in flight"
	}
	if d.QuotaUnknown { // the store failed under FailClosed
		code, msg, delay = codes.Unavailable, "rate limiter unavailable", time.Second
	}
	delay = max(delay, time.Millisecond)
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		st = withInfo
	}
	md := metadata.MD{PushbackTrailer: {strconv.FormatInt(ceilDiv(delay, time.Millisecond), 10)}}
	if i.quota {
		md = metadata.Join(md, i.quotaMD(d))
	}
	return md, st.Err()
}

// quotaMD returns the quota fields of d as metadata: what the Limiter's
// HTTP responses send for d, rendered by the same code
// (Limiter.QuotaFields), so the two cannot disagree. For a refused call too
// they describe the bucket, not the call: RateLimit's t is the wait for one
// token, while the pushback and RetryInfo are the call's wait for its cost.
func (i *Interceptor) quotaMD(d *addrlimit.Decision) metadata.MD {
	var md metadata.MD
	i.lim.QuotaFields(*d, func(name, value string) {
		if md == nil {
			md = make(metadata.MD, 3)
		}
		md[name] = append(md[name], value)
	})
	return md
}

// ceilDiv returns d / unit rounded up, for a positive d; unlike
// (d+unit-1)/unit it cannot overflow, so a Store's longest delay never
// wraps around to a negative pushback ("do not retry").
func ceilDiv(d, unit time.Duration) int64 {
	return int64((d-1)/unit) + 1
}
