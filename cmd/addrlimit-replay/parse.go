package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// record is one parsed access-log line. Its byte slices point into the line
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

// Fields of a JSON-lines log, in jsonParser.paths order.
const (
	jTime = iota
	jRemote
	jFwd
	jMethod
	jPath
	jStatus
	jUA
	jIdentity
	jFields
)

var jsonFieldNames = [jFields]string{"time", "remote", "fwd", "method", "path", "status", "ua", "identity"}

// jsonPresets are the field maps of the JSON logs the command knows. A
// field is a dotted path through nested objects; an array value (Caddy's
// header lists) is read as its elements joined by ", ", as HTTP joins
// repeated header lines.
var jsonPresets = map[string][jFields]string{
	// Caddy's access log (log { format json }): the peer, and the headers
	// as received. Caddy redacts Authorization in its logs.
	"caddy": {"ts", "request.remote_ip", "request.headers.X-Forwarded-For", "request.method", "request.uri", "status", "request.headers.User-Agent", ""},
	// A flat map, as nginx's log_format escape=json or an application
	// logger would write it.
	"json": {"time", "remote_addr", "x_forwarded_for", "method", "path", "status", "user_agent", ""},
}

// jsonParser reads one JSON object per line and picks the fields of its map.
// Times are a number of Unix seconds (a fraction allowed; milli-, micro- or
// nanoseconds when the integer part is too large for seconds), or a string
// in RFC 3339 or the combined log's format.
type jsonParser struct {
	paths   [jFields][]byte
	path    []byte          // the dotted path of the value being read
	scratch [jFields][]byte // unescaped strings and joined arrays
	vals    [jFields][]byte // this line's values
	kinds   [jFields]byte   // '"' string, '0' number
	prefix  map[string]bool // every proper prefix of a wanted path
}

func newJSONParser(paths [jFields]string) (*jsonParser, error) {
	p := &jsonParser{prefix: map[string]bool{}}
	for f, s := range paths {
		if s == "" {
			continue
		}
		p.paths[f] = []byte(s)
		for i := range len(s) {
			if s[i] == '.' {
				p.prefix[s[:i]] = true
			}
		}
	}
	if p.paths[jTime] == nil || p.paths[jRemote] == nil {
		return nil, errors.New("a JSON field map needs at least the time and remote fields")
	}
	return p, nil
}

func (p *jsonParser) parse(line []byte, rec *record) bool {
	*rec = record{}
	p.vals, p.kinds = [jFields][]byte{}, [jFields]byte{}
	p.path = p.path[:0]
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return false
	}
	if _, ok := p.object(line, i); !ok {
		return false
	}
	t, ok := p.time()
	if !ok {
		return false
	}
	rec.time = t
	rec.remote = p.vals[jRemote]
	if len(rec.remote) == 0 {
		return false
	}
	rec.fwd, rec.method, rec.path, rec.ua, rec.identity = dash(p.vals[jFwd]), p.vals[jMethod], p.vals[jPath], p.vals[jUA], p.vals[jIdentity]
	rec.status = atoi(p.vals[jStatus])
	return true
}

func (p *jsonParser) time() (int64, bool) {
	v := p.vals[jTime]
	if p.kinds[jTime] == '"' {
		if t, ok := parseRFC3339(v); ok {
			return t, true
		}
		return parseCLFTime(v)
	}
	// A number: integer part and up to 9 fraction digits, exactly.
	var whole, frac int64
	i, digits := 0, 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if whole > (math.MaxInt64-9)/10 {
			return 0, false
		}
		whole = whole*10 + int64(v[i]-'0')
	}
	if i == 0 {
		return 0, false
	}
	if i < len(v) && v[i] == '.' {
		for i++; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
			if digits < 9 {
				frac = frac*10 + int64(v[i]-'0')
				digits++
			}
		}
	}
	if i != len(v) {
		return 0, false // exponent or garbage
	}
	for ; digits < 9; digits++ {
		frac *= 10
	}
	switch {
	case whole < 1e11: // seconds until the year 5138
		return whole*1e9 + frac, true
	case whole < 1e14:
		return whole*1e6 + frac/1e3, true
	case whole < 1e17:
		return whole*1e3 + frac/1e6, true
	}
	return whole, true
}

// wanted returns the field whose path is p.path, or -1.
func (p *jsonParser) wanted() int {
	for f := range p.paths {
		if p.paths[f] != nil && bytes.Equal(p.paths[f], p.path) {
			return f
		}
	}
	return -1
}

// object reads the object at line[i] ('{'), returning the index after it.
func (p *jsonParser) object(line []byte, i int) (int, bool) {
	base := len(p.path)
	i = skipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		return i + 1, true
	}
	for i < len(line) {
		if line[i] != '"' {
			return 0, false
		}
		end, ok := stringEnd(line, i)
		if !ok {
			return 0, false
		}
		key := line[i+1 : end-1]
		p.path = p.path[:base]
		if base > 0 {
			p.path = append(p.path, '.')
		}
		p.path = append(p.path, key...)
		i = skipSpace(line, end)
		if i >= len(line) || line[i] != ':' {
			return 0, false
		}
		i = skipSpace(line, i+1)
		if i >= len(line) {
			return 0, false
		}
		if f := p.wanted(); f >= 0 {
			i, ok = p.capture(line, i, f)
		} else if line[i] == '{' && p.prefix[string(p.path)] {
			i, ok = p.object(line, i)
		} else {
			i, ok = skipValue(line, i)
		}
		if !ok {
			return 0, false
		}
		i = skipSpace(line, i)
		if i < len(line) && line[i] == ',' {
			i = skipSpace(line, i+1)
			continue
		}
		if i < len(line) && line[i] == '}' {
			p.path = p.path[:base]
			return i + 1, true
		}
		return 0, false
	}
	return 0, false
}

// capture reads the value at line[i] into field f: a string, a number, a
// boolean, or an array of strings (joined by ", ").
func (p *jsonParser) capture(line []byte, i, f int) (int, bool) {
	switch c := line[i]; {
	case c == '"':
		end, ok := stringEnd(line, i)
		if !ok {
			return 0, false
		}
		p.vals[f], p.kinds[f] = p.unquote(f, line[i+1:end-1]), '"'
		return end, true
	case c == '[':
		p.scratch[f] = p.scratch[f][:0]
		i = skipSpace(line, i+1)
		for i < len(line) && line[i] != ']' {
			if line[i] != '"' {
				return 0, false
			}
			end, ok := stringEnd(line, i)
			if !ok {
				return 0, false
			}
			if len(p.scratch[f]) > 0 {
				p.scratch[f] = append(p.scratch[f], ", "...)
			}
			p.scratch[f] = unescape(p.scratch[f], line[i+1:end-1])
			i = skipSpace(line, end)
			if i < len(line) && line[i] == ',' {
				i = skipSpace(line, i+1)
			}
		}
		if i >= len(line) {
			return 0, false
		}
		p.vals[f], p.kinds[f] = p.scratch[f], '"'
		return i + 1, true
	default:
		end, ok := skipValue(line, i)
		if !ok || c == '{' {
			return end, ok
		}
		p.vals[f], p.kinds[f] = line[i:end], '0'
		if string(p.vals[f]) == "null" {
			p.vals[f] = nil
		}
		return end, true
	}
}

// unquote returns the JSON string contents s unescaped (into field f's
// scratch buffer when it has escapes).
func (p *jsonParser) unquote(f int, s []byte) []byte {
	if bytes.IndexByte(s, '\\') < 0 {
		return s
	}
	p.scratch[f] = unescape(p.scratch[f][:0], s)
	return p.scratch[f]
}

// unescape appends the JSON string contents s, unescaped, to dst. A \u
// escape is written as UTF-8 (surrogate pairs as U+FFFD each; header values
// are ASCII).
func unescape(dst, s []byte) []byte {
	for len(s) > 0 {
		i := bytes.IndexByte(s, '\\')
		if i < 0 || i == len(s)-1 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		c := s[i+1]
		s = s[i+2:]
		switch c {
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			if len(s) >= 4 {
				if v, err := strconv.ParseUint(string(s[:4]), 16, 16); err == nil {
					r := rune(v)
					if r >= 0xD800 && r < 0xE000 {
						r = 0xFFFD
					}
					dst = utf8.AppendRune(dst, r)
					s = s[4:]
					continue
				}
			}
			dst = append(dst, '\\', 'u')
		default: // " \ /
			dst = append(dst, c)
		}
	}
	return dst
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index after the JSON string starting at b[i] ('"').
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		k += j
		if backslashes(b[j:k])%2 == 0 {
			return k + 1, true
		}
		j = k + 1
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if b[i] == '"' {
		return stringEnd(b, i)
	}
	if b[i] != '{' && b[i] != '[' {
		for j := i; j < len(b); j++ {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j, j > i
			}
		}
		return len(b), len(b) > i
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, ok := stringEnd(b, j)
			if !ok {
				return 0, false
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
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
