package main

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

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
