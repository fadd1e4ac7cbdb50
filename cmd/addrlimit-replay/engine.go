package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/addrlimit/addrlimit"
)

// limits is what the replayed Limiter is built from: the options the
// middleware in production is given, as flags.
type limits struct {
	Limit    int           `json:"limit"`
	Per      time.Duration `json:"per_ns"`
	Burst    int           `json:"burst,omitempty"`
	Policies []routePolicy `json:"policies,omitempty"`
	Costs    []routeCost   `json:"costs,omitempty"`
	Header   string        `json:"proxy_header,omitempty"`
	Trusted  []string      `json:"trusted_proxies,omitempty"`
	// Exempt: requests whose log line names an internal identity carry the
	// internal token, as they did in production (WithInternalToken).
	Exempt  bool `json:"exempt_identities"`
	MaxKeys int  `json:"max_keys"`
}

// routePolicy is a -policy flag: requests whose path starts with Prefix are
// charged to the named policy (the longest prefix wins).
type routePolicy struct {
	addrlimit.Policy
	Prefix string `json:"prefix"`
}

// routeCost is a -cost flag: requests whose path starts with Prefix cost N
// tokens (the longest prefix wins).
type routeCost struct {
	Prefix string `json:"prefix"`
	N      int    `json:"n"`
}

// parsePolicy parses "NAME=LIMIT/PER[,BURST]@PREFIX", e.g. "login=5/1m@/login".
func parsePolicy(s string) (routePolicy, error) {
	bad := func(why string) (routePolicy, error) {
		return routePolicy{}, fmt.Errorf("-policy %q: %s (want NAME=LIMIT/PER[,BURST]@PREFIX, e.g. login=5/1m@/login)", s, why)
	}
	name, rest, ok1 := strings.Cut(s, "=")
	spec, prefix, ok2 := strings.Cut(rest, "@")
	if !ok1 || !ok2 || !strings.HasPrefix(prefix, "/") {
		return bad("malformed")
	}
	rate, burstStr, hasBurst := strings.Cut(spec, ",")
	limitStr, perStr, ok := strings.Cut(rate, "/")
	limit, err1 := strconv.Atoi(limitStr)
	per, err2 := parsePer(perStr)
	if !ok || err1 != nil || err2 != nil || limit < 1 || per <= 0 {
		return bad("bad rate")
	}
	burst := limit
	if hasBurst {
		var err error
		if burst, err = strconv.Atoi(burstStr); err != nil || burst < 1 {
			return bad("bad burst")
		}
	}
	p := addrlimit.Policy{Name: name, Limits: []addrlimit.Limit{{Burst: burst, Interval: per / time.Duration(limit)}}}
	if err := p.Validate(); err != nil {
		return bad(err.Error())
	}
	return routePolicy{Policy: p, Prefix: prefix}, nil
}

// parsePer parses a period: a Go duration, or "s", "m", "h" for one of each.
func parsePer(s string) (time.Duration, error) {
	switch s {
	case "s", "second":
		return time.Second, nil
	case "m", "min", "minute":
		return time.Minute, nil
	case "h", "hour":
		return time.Hour, nil
	}
	return time.ParseDuration(s)
}

// parseCost parses "PREFIX=N".
func parseCost(s string) (routeCost, error) {
	prefix, n, ok := strings.Cut(s, "=")
	c, err := strconv.Atoi(n)
	if !ok || err != nil || c < 1 || !strings.HasPrefix(prefix, "/") {
		return routeCost{}, fmt.Errorf("-cost %q: want PREFIX=N with N >= 1, e.g. /batch=10", s)
	}
	return routeCost{Prefix: prefix, N: c}, nil
}

// engine replays records through a real addrlimit.Limiter in virtual time.
// It is not safe for concurrent use.
//
// Each record becomes one reused *http.Request given to Limiter.Allow, the
// function Handler calls: the key (the peer, behind TrustedProxies when
// configured, IPv6 by /64, NAT64 by the IPv4 it embeds), the exemption,
// the policy and the cost are the middleware's own code, not a copy of it.
// When the core decides from a transport-neutral description of a call,
// decide is the one place to change.
type engine struct {
	lim  *addrlimit.Limiter
	now  time.Time // the virtual clock: the current record's time
	req  *http.Request
	fwd  string    // canonical proxy header name, "" for none
	vals [1]string // the proxy header's value, pointing into the line
	auth [1]string // "Bearer <a random secret>": never printed
	tok  bool      // exempt identities
	// Whether req carries the proxy header and Authorization: set or
	// deleted only when that changes.
	hasFwd, hasAuth bool
}

func newEngine(c limits) (*engine, error) {
	if c.MaxKeys == 0 {
		c.MaxKeys = addrlimit.DefaultMaxKeys
	}
	// The Limiter's epoch is the clock's first reading: the Unix epoch, so
	// that every log time after 1970 (and before 2262) is a reading after it.
	e := &engine{tok: c.Exempt, now: time.Unix(0, 0)}
	opts := []addrlimit.Option{
		addrlimit.WithClock(func() time.Time { return e.now }),
		addrlimit.WithHeaders(addrlimit.HeaderNone),
		addrlimit.WithMaxKeys(c.MaxKeys),
	}
	if c.Burst > 0 {
		opts = append(opts, addrlimit.WithBurst(c.Burst))
	}
	if c.Header != "" || len(c.Trusted) > 0 {
		if c.Header == "" || len(c.Trusted) == 0 {
			return nil, errors.New("-proxy-header and -trusted go together: the header your proxies set and the ranges they connect from")
		}
		var ps []netip.Prefix
		for _, t := range c.Trusted {
			p, err := netip.ParsePrefix(t)
			if err != nil {
				a, err2 := netip.ParseAddr(t)
				if err2 != nil {
					return nil, fmt.Errorf("-trusted %q: not an address or CIDR range", t)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			ps = append(ps, p)
		}
		tp, err := addrlimit.NewTrustedProxies(c.Header, ps...)
		if err != nil {
			return nil, err
		}
		e.fwd = tp.Header()
		opts = append(opts, addrlimit.WithKeyFunc(tp.Key))
	}
	if c.Exempt {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		secret := hex.EncodeToString(b)
		tok, err := addrlimit.NewInternalToken(secret)
		if err != nil {
			return nil, err
		}
		e.auth[0] = "Bearer " + secret
		opts = append(opts, addrlimit.WithInternalToken(tok))
	}
	for _, p := range c.Policies {
		opts = append(opts, addrlimit.WithPolicy(p.Policy))
	}
	if len(c.Policies) > 0 {
		ps := c.Policies
		opts = append(opts, addrlimit.WithPolicySelector(func(r *http.Request) (string, string, error) {
			name, best := "", -1
			for _, p := range ps {
				if len(p.Prefix) > best && strings.HasPrefix(r.URL.Path, p.Prefix) {
					name, best = p.Name, len(p.Prefix)
				}
			}
			return name, "", nil
		}))
	}
	if len(c.Costs) > 0 {
		cs := c.Costs
		opts = append(opts, addrlimit.WithCost(func(r *http.Request) int {
			n, best := 1, -1
			for _, c := range cs {
				if len(c.Prefix) > best && strings.HasPrefix(r.URL.Path, c.Prefix) {
					n, best = c.N, len(c.Prefix)
				}
			}
			return n
		}))
	}
	per := c.Per
	lim, err := addrlimit.New(c.Limit, per, opts...)
	if err != nil {
		return nil, err
	}
	e.lim = lim
	e.req = &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	return e, nil
}

// decide takes the middleware's decision for rec at rec's time.
func (e *engine) decide(rec *record) addrlimit.Decision {
	e.now = time.Unix(0, rec.time)
	r := e.req
	r.RemoteAddr = transient(rec.remote)
	r.Method = "GET"
	if len(rec.method) > 0 {
		r.Method = transient(rec.method)
	}
	path := rec.path
	for i, c := range path {
		if c == '?' || c == '#' {
			path = path[:i]
			break
		}
	}
	r.URL.Path = transient(path)
	if e.fwd != "" {
		switch {
		case len(rec.fwd) > 0:
			e.vals[0] = transient(rec.fwd)
			if !e.hasFwd {
				r.Header[e.fwd], e.hasFwd = e.vals[:], true
			}
		case e.hasFwd:
			delete(r.Header, e.fwd)
			e.hasFwd = false
		}
	}
	if auth := e.tok && hasIdentity(rec.identity); auth != e.hasAuth {
		if auth {
			r.Header["Authorization"] = e.auth[:]
		} else {
			delete(r.Header, "Authorization")
		}
		e.hasAuth = auth
	}
	d := e.lim.Allow(r)
	d.Route = "" // the path, transient: it points into the line
	return d
}

// hasIdentity reports whether a log's identity field names one ("", "-"
// and "null" name none).
func hasIdentity(id []byte) bool {
	return len(id) > 0 && string(id) != "-" && string(id) != "null"
}

// transient is b as a string without a copy, for the request fields of one
// decision: the Limiter reads them during Allow and keeps none of them
// (Decision.Key is a string of its own; decide drops Decision.Route, the
// path), and b is not changed until Allow returns. Nothing else may hold
// the result.
func transient(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
