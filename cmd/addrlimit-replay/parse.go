package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// record is one parsed access-log line (parse.go: the combined and ALB
// formats and the parsing they share; json.go: JSON lines). Its byte slices point into the line
// (or into the parser's scratch buffers) and are valid until the next line
// is parsed.
type record struct {
	time     int64  // Unix nanoseconds
	remote   []byte // the peer the logging server saw: "ip" or "ip:port"
	fwd      []byte // the proxy header it received ("" when absent)
	method   []byte
	path     []byte // the request target's path (query kept; a policy prefix matches either way)
	ua       []byte
	identity []byte // the verified internal identity ("" or "-": none)
	status   int    // 0 when the log has none
}

// parser parses one line into rec, reporting whether the line is a request.
type parser interface {
	parse(line []byte, rec *record) bool
}

// extraFields picks, in a combined line, the quoted or bare fields after the
// user agent (nginx's "main" format adds "$http_x_forwarded_for"): 1-based
// numbers, 0 for none.
type extraFields struct{ fwd, identity int }

// combinedParser reads the NCSA combined format of nginx and Apache:
//
//	127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 "http://ref/" "Mozilla/4.08" "extra" ...
//
// The time may carry a fraction of a second; a time without a zone is UTC.
type combinedParser struct {
	extra extraFields
	// The last time field and its value: lines of one second share it.
	lastStamp []byte
	lastTime  int64
}

func (p *combinedParser) parse(line []byte, rec *record) bool {
	*rec = record{}
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return false
	}
	rec.remote = line[:i]
	open := bytes.IndexByte(line[i:], '[')
	if open < 0 {
		return false
	}
	open += i + 1
	closing := bytes.IndexByte(line[open:], ']')
	if closing < 0 {
		return false
	}
	stamp := line[open : open+closing]
	if !bytes.Equal(stamp, p.lastStamp) {
		t, ok := parseCLFTime(stamp)
		if !ok {
			return false
		}
		p.lastStamp, p.lastTime = append(p.lastStamp[:0], stamp...), t
	}
	rec.time = p.lastTime
	rest := line[open+closing+1:]
	req, rest, ok := quoted(rest)
	if !ok {
		return false
	}
	rec.method, rec.path = splitRequest(req)
	status, rest := field(rest)
	rec.status = atoi(status)
	_, rest = field(rest)     // bytes
	_, rest, _ = quoted(rest) // referer
	rec.ua, rest, _ = quoted(rest)
	for n := 1; n <= max(p.extra.fwd, p.extra.identity); n++ {
		var f []byte
		if f, rest, ok = quotedOrBare(rest); !ok {
			break
		}
		if n == p.extra.fwd {
			rec.fwd = dash(f)
		}
		if n == p.extra.identity {
			rec.identity = f
		}
	}
	return true
}

// albParser reads AWS Application Load Balancer access logs:
//
//	https 2018-07-02T22:23:00.186641Z app/my-lb/50dc 192.168.131.39:2817 10.0.0.1:80 0.086 0.048 0.037 200 200 0 57 "GET https://example.com:443/ HTTP/1.1" "curl/7.46.0" ...
//
// The client field is the address the load balancer saw, which is what an
// application behind it resolves from X-Forwarded-For with the load
// balancer trusted: so it is the record's peer and no header is replayed.
type albParser struct{}

func (albParser) parse(line []byte, rec *record) bool {
	*rec = record{}
	var f [12][]byte
	rest := line
	for i := range f {
		if f[i], rest = field(rest); len(f[i]) == 0 {
			return false
		}
	}
	t, ok := parseRFC3339(f[1])
	if !ok {
		return false
	}
	rec.time, rec.remote = t, f[3]
	rec.status = atoi(f[8])
	req, rest, ok := quoted(rest)
	if !ok {
		return false
	}
	rec.method, rec.path = splitRequest(req)
	rec.path = stripOrigin(rec.path)
	rec.ua, _, _ = quoted(rest)
	return true
}

// stripOrigin turns an absolute-form target ("https://host:443/p?q") into
// its path ("/p?q").
func stripOrigin(t []byte) []byte {
	if i := bytes.Index(t, []byte("://")); i > 0 && bytes.IndexByte(t[:i], '/') < 0 {
		t = t[i+3:]
		if j := bytes.IndexByte(t, '/'); j >= 0 {
			return t[j:]
		}
		return []byte("/")
	}
	return t
}

// field returns the next space-separated field of b and what follows it.
func field(b []byte) (f, rest []byte) {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// quoted returns the next double-quoted field of b, without its quotes (a
// backslash escapes the next byte; the escapes stay in the field), and what
// follows it.
func quoted(b []byte) (f, rest []byte, ok bool) {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	if len(b) == 0 || b[0] != '"' {
		return nil, b, false
	}
	for i := 1; i < len(b); {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return nil, b, false
		}
		j += i
		if backslashes(b[i:j])%2 == 0 {
			return b[1:j], b[j+1:], true
		}
		i = j + 1
	}
	return nil, b, false
}

// backslashes counts the backslashes that end b.
func backslashes(b []byte) int {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	return n
}

func quotedOrBare(b []byte) (f, rest []byte, ok bool) {
	if f, rest, ok = quoted(b); ok {
		return f, rest, true
	}
	f, rest = field(b)
	return f, rest, len(f) > 0
}

// dash is f, or nothing for the "-" loggers write for an empty value.
func dash(f []byte) []byte {
	if len(f) == 1 && f[0] == '-' {
		return nil
	}
	return f
}

// splitRequest splits a request line "GET /p HTTP/1.1" into method and target.
func splitRequest(req []byte) (method, target []byte) {
	method, rest := field(req)
	target, _ = field(rest)
	return method, target
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' || n > 1e8 {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseCLFTime parses "10/Oct/2000:13:55:36[.frac] [-0700]" into Unix ns.
func parseCLFTime(b []byte) (int64, bool) {
	if len(b) < 20 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' {
		return 0, false
	}
	mon := -1
	for i, m := range months {
		if string(b[3:6]) == m {
			mon = i + 1
		}
	}
	return civil(num(b[7:11]), mon, num(b[0:2]), num(b[12:14]), num(b[15:17]), b[18:])
}

// parseRFC3339 parses "2018-07-02T22:23:00[.frac](Z|+hh:mm)" into Unix ns.
func parseRFC3339(b []byte) (int64, bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != ' ') || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	return civil(num(b[0:4]), num(b[5:7]), num(b[8:10]), num(b[11:13]), num(b[14:16]), b[17:])
}

// num is the decimal number b, or -1.
func num(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// civil returns the Unix ns of a date and time; secs is "ss[.frac][zone]",
// the zone "Z", "+hhmm", "+hh:mm" (optionally after a space) or nothing (UTC).
func civil(year, mon, day, hour, minute int, secs []byte) (int64, bool) {
	if len(secs) < 2 {
		return 0, false
	}
	sec := num(secs[:2])
	if year < 1970 || mon < 1 || mon > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 60 {
		return 0, false
	}
	rest := secs[2:]
	var frac int64
	if len(rest) > 0 && (rest[0] == '.' || rest[0] == ',') {
		digits := 0
		rest = rest[1:]
		for len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9' {
			if digits < 9 {
				frac = frac*10 + int64(rest[0]-'0')
				digits++
			}
			rest = rest[1:]
		}
		for ; digits < 9; digits++ {
			frac *= 10
		}
	}
	if len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	var offset int64
	switch {
	case len(rest) == 0 || string(rest) == "Z":
	case (rest[0] == '+' || rest[0] == '-') && (len(rest) == 5 || len(rest) == 6 && rest[3] == ':'):
		h, m := num(rest[1:3]), num(rest[len(rest)-2:])
		if h < 0 || m < 0 {
			return 0, false
		}
		offset = int64(h*3600+m*60) * 1e9
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	// Days from 1970-01-01 (Howard Hinnant's days_from_civil).
	y := year
	if mon <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (mon + 9) % 12
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	days := int64(era*146097 + doe - 719468)
	return ((days*24+int64(hour))*3600+int64(minute)*60+int64(sec))*1e9 + frac - offset, true
}

// newParser returns the parser of a -format value. fwd and identity are
// the -fwd-field and -identity-field values: field numbers after the user
// agent for the combined format, dotted paths for the JSON formats (which
// -json-field NAME=PATH overrides can also set).
func newParser(format, fwd, identity string, fields []string) (parser, error) {
	switch format {
	case "combined":
		if len(fields) > 0 {
			return nil, errors.New("-json-field is for the JSON formats")
		}
		var x extraFields
		for _, f := range []struct {
			flag, v string
			n       *int
		}{{"-fwd-field", fwd, &x.fwd}, {"-identity-field", identity, &x.identity}} {
			if f.v == "" {
				continue
			}
			n, err := strconv.Atoi(f.v)
			if err != nil || n < 1 || n > 32 {
				return nil, fmt.Errorf("%s %q: the combined format numbers the fields after the user agent from 1 (nginx's main format: -fwd-field 1)", f.flag, f.v)
			}
			*f.n = n
		}
		return &combinedParser{extra: x}, nil
	case "alb":
		if len(fields) > 0 || fwd != "" || identity != "" {
			return nil, errors.New("the alb format has fixed fields: no -json-field, -fwd-field or -identity-field")
		}
		return albParser{}, nil
	}
	paths, ok := jsonPresets[format]
	if !ok {
		return nil, fmt.Errorf("unknown -format %q (combined, caddy, json, alb)", format)
	}
	if fwd != "" {
		paths[jFwd] = fwd
	}
	if identity != "" {
		paths[jIdentity] = identity
	}
	for _, kv := range fields {
		name, path, ok := strings.Cut(kv, "=")
		i := slices.Index(jsonFieldNames[:], name)
		if !ok || i < 0 {
			return nil, fmt.Errorf("-json-field %q: want NAME=PATH, NAME one of %s", kv, strings.Join(jsonFieldNames[:], ", "))
		}
		paths[i] = path
	}
	return newJSONParser(paths)
}
