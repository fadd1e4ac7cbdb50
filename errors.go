package addrlimit

import "errors"

// Errors that Decision.Err may wrap, for observers and alerts: test them with
// errors.Is. None of them means the limit was skipped: each says which bucket
// the request was charged to instead, and none is ever sent to a client.
var (
	// ErrNoClientAddress: RemoteAddr is no IP address (a Unix socket peer),
	// or a Call has neither Addr nor Key: charged to UnkeyedKey.
	ErrNoClientAddress = errors.New("addrlimit: RemoteAddr is not an IP address")
	// ErrEmptyKey: a KeyFunc or an AllowKey caller gave an empty key;
	// charged to UnkeyedKey.
	ErrEmptyKey = errors.New("addrlimit: empty key")
	// ErrProxyHeader: the trusted proxies' header was missing, malformed or
	// longer than addrlimit walks. The request was charged to the nearest
	// trusted hop, never to anything a client wrote. It means the proxies or
	// the trusted ranges are misconfigured.
	ErrProxyHeader = errors.New("addrlimit: proxy header")
	// ErrUnknownPolicy: a policy selector, a Call or an AllowKey caller
	// named a policy the Limiter does not have: charged to the default one.
	ErrUnknownPolicy = errors.New("addrlimit: unknown policy")
	// ErrInvalidCost: a cost below 1 (from WithCost or AllowKey, or a
	// negative Call.Cost): charged 1 token.
	ErrInvalidCost = errors.New("addrlimit: cost must be at least 1")
	// ErrCostOverBurst: a cost larger than the policy's burst, which no bucket
	// can ever pay; the request was refused by the policy alone, without a
	// Store call, and charged nothing. Its Decision has an unknown quota
	// (Limit 0: the bucket was not asked) and a zero RetryAfter, and Handler
	// answers 413 Content Too Large without Retry-After and without quota
	// fields (see WithCost).
	ErrCostOverBurst = errors.New("addrlimit: cost exceeds the burst")
)

// proxyError wraps a clientip problem so that it matches ErrProxyHeader and
// keeps the header name and the detail in its text.
type proxyError struct {
	header string
	err    error
}

func (e *proxyError) Error() string {
	return "addrlimit: " + e.header + ": " + e.err.Error()
}

func (e *proxyError) Is(target error) bool { return target == ErrProxyHeader }

func (e *proxyError) Unwrap() error { return e.err }
