package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTimesAgreeWithTimePackage: the hand-written time parsers give the
// time package's instant for 10^5 random times, zones and fractions.
func TestTimesAgreeWithTimePackage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		zone := time.FixedZone("", (rng.IntN(28*4)-14*4)*15*60)
		want := time.Unix(rng.Int64N(9e9), rng.Int64N(1e9)).In(zone)
		for _, layout := range []string{"02/Jan/2006:15:04:05.000000000 -0700", time.RFC3339Nano} {
			s := want.Format(layout)
			parse := parseRFC3339
			if layout[0] == '0' {
				parse = parseCLFTime
			}
			got, ok := parse([]byte(s))
			if !ok || got != want.UnixNano() {
				t.Fatalf("%s: got %v (%v), want %v", s, time.Unix(0, got).UTC(), ok, want.UTC())
			}
		}
	}
}

// got is a record's fields as strings, for comparisons.
type got struct {
	time                                 time.Time
	remote, fwd, method, path, ua, ident string
	status                               int
}

func fields(r *record) got {
	return got{time.Unix(0, r.time).UTC(), string(r.remote), string(r.fwd), string(r.method), string(r.path), string(r.ua), string(r.identity), r.status}
}

func mustParser(t *testing.T, format, fwd, identity string, jsonFields ...string) parser {
	t.Helper()
	p, err := newParser(format, fwd, identity, jsonFields)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsers(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UTC()
	}
	for _, tc := range []struct {
		name, format, fwd, identity, line string
		want                              got
	}{
		{"apache combined", "combined", "", "",
			`127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`,
			got{at("2000-10-10T20:55:36Z"), "127.0.0.1", "", "GET", "/apache_pb.gif", "Mozilla/4.08 [en] (Win98; I ;Nav)", "", 200}},
		{"nginx main with X-Forwarded-For and an identity", "combined", "1", "2",
			`10.0.0.7 - - [03/Dec/2026:09:00:00 +0100] "POST /login?x=1 HTTP/1.1" 429 0 "-" "curl/8.5" "198.51.100.9, 192.0.2.1" "edge"`,
			got{at("2026-12-03T08:00:00Z"), "10.0.0.7", "198.51.100.9, 192.0.2.1", "POST", "/login?x=1", "curl/8.5", "edge", 429}},
		{"escaped quotes, fractional seconds, no zone, no extra field", "combined", "1", "",
			`2001:db8::1 - - [03/Dec/2026:09:00:00.250] "GET /a\"b HTTP/1.1" 200 1 "-" "say \"hi\""`,
			got{at("2026-12-03T09:00:00.25Z"), "2001:db8::1", "", "GET", `/a\"b`, `say \"hi\"`, "", 200}},
		{"nginx dash for an empty header", "combined", "1", "",
			`192.0.2.3 - - [03/Dec/2026:09:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "ua" "-"`,
			got{at("2026-12-03T09:00:00Z"), "192.0.2.3", "", "GET", "/", "ua", "", 200}},
		{"caddy", "caddy", "", "",
			`{"level":"info","ts":1796288400.1234567,"logger":"http.log.access","msg":"handled request","request":{"remote_ip":"127.0.0.2","remote_port":"40000","client_ip":"127.0.0.2","proto":"HTTP/1.1","method":"GET","host":"127.0.0.1:8080","uri":"/r/1?x","headers":{"User-Agent":["Go-http-client/1.1"],"X-Forwarded-For":["203.0.113.1","203.0.113.2"],"Authorization":["REDACTED"]}},"bytes_read":0,"user_id":"","duration":0.001,"size":2,"status":429,"resp_headers":{"Retry-After":["1"]}}`,
			got{time.Unix(1796288400, 123456700).UTC(), "127.0.0.2", "203.0.113.1, 203.0.113.2", "GET", "/r/1?x", "Go-http-client/1.1", "", 429}},
		{"json with escapes, string time, identity path", "json", "", "auth.svc",
			`{"time":"2026-12-03T09:00:00.5+01:00","remote_addr":"192.0.2.4","user_agent":"a\"b\u00e9","path":"/p","method":"PUT","status":"201","auth":{"svc":"gate"},"x":[1,{"y":"}"}]}`,
			got{at("2026-12-03T08:00:00.5Z"), "192.0.2.4", "", "PUT", "/p", `a"bé`, "gate", 201}},
		{"json time in milliseconds", "json", "", "",
			`{"time":1796288400123,"remote_addr":"192.0.2.4"}`,
			got{time.Unix(1796288400, 123e6).UTC(), "192.0.2.4", "", "", "", "", "", 0}},
		{"alb", "alb", "", "",
			`https 2018-07-02T22:23:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2817 10.0.0.1:80 0.086 0.048 0.037 200 200 0 57 "GET https://www.example.com:443/p/q?r HTTP/1.1" "curl/7.46.0" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/my-targets/73e2d6bc24d8a067 "Root=1-58337281-1d84f3d73c47ec4e58577259" "www.example.com" "arn:aws:acm:us-east-2:123456789012:certificate/12345678-1234-1234-1234-123456789012" 1 2018-07-02T22:22:48.364000Z "authenticate,forward" "-" "-" "10.0.0.1:80" "200" "-" "-"`,
			got{at("2018-07-02T22:23:00.186641Z"), "192.168.131.39:2817", "", "GET", "/p/q?r", "curl/7.46.0", "", 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec record
			if !mustParser(t, tc.format, tc.fwd, tc.identity).parse([]byte(tc.line), &rec) {
				t.Fatalf("does not parse: %s", tc.line)
			}
			if g := fields(&rec); g != tc.want {
				t.Errorf("got  %+v\nwant %+v", g, tc.want)
			}
		})
	}
}

func TestParsersRefuse(t *testing.T) {
	for _, tc := range []struct{ format, line string }{
		{"combined", ""},
		{"combined", "garbage"},
		{"combined", `192.0.2.1 - - [03/Dec/2026:09:00:00 +0000] "GET / HTTP/1.1`},
		{"combined", `192.0.2.1 - - [32/Dec/2026:09:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-"`},
		{"combined", `192.0.2.1 - - [03/Foo/2026:09:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-"`},
		{"caddy", `{"ts":1,"request":{"remote_ip":"192.0.2.1"}`},
		{"caddy", `{"ts":"yesterday","request":{"remote_ip":"192.0.2.1"}}`},
		{"caddy", `{"ts":1796288400,"request":{}}`},
		{"json", `[1,2]`},
		{"alb", `https 2018-07-02T22:23:00Z app/x 192.0.2.1:1 - -1 -1 -1 460 - 0 0`},
	} {
		var rec record
		if mustParser(t, tc.format, "", "").parse([]byte(tc.line), &rec) {
			t.Errorf("%s parsed %q: %+v", tc.format, tc.line, fields(&rec))
		}
	}
	for _, tc := range []struct {
		format, fwd, identity string
		fields                []string
	}{
		{"xml", "", "", nil},
		{"combined", "x", "", nil},
		{"combined", "", "", []string{"time=ts"}},
		{"alb", "1", "", nil},
		{"json", "", "", []string{"color=x"}},
		{"json", "", "", []string{"time="}},
	} {
		if _, err := newParser(tc.format, tc.fwd, tc.identity, tc.fields); err == nil {
			t.Errorf("newParser(%q, %q, %q, %q) accepted", tc.format, tc.fwd, tc.identity, tc.fields)
		}
	}
}

// FuzzParsers: no line makes a parser panic, and a line a parser accepts has
// a remote address.
func FuzzParsers(f *testing.F) {
	f.Add(`192.0.2.1 - - [03/Dec/2026:09:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "ua" "x, y" "edge"`)
	f.Add(`{"ts":1796288400.5,"request":{"remote_ip":"192.0.2.1","headers":{"X-Forwarded-For":["a","b\"c"]}}}`)
	f.Add(`{"time":"2026-12-03T09:00:00Z","remote_addr":"x","auth":{"svc":"\u0041"}}`)
	f.Add(`https 2018-07-02T22:23:00.186641Z app/x 192.0.2.1:1 10.0.0.1:80 0 0 0 200 200 0 57 "GET https://h/ HTTP/1.1" "ua"`)
	ps := []parser{
		&combinedParser{extra: extraFields{fwd: 1, identity: 2}},
		albParser{},
	}
	for _, format := range []string{"caddy", "json"} {
		p, err := newParser(format, "", "auth.svc", nil)
		if err != nil {
			f.Fatal(err)
		}
		ps = append(ps, p)
	}
	f.Fuzz(func(t *testing.T, line string) {
		for _, p := range ps {
			var rec record
			if p.parse([]byte(line), &rec) && len(rec.remote) == 0 {
				t.Errorf("%T parsed %q with no remote address", p, line)
			}
		}
	})
}
