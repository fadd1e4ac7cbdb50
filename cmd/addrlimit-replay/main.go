// Command addrlimit-replay answers "who would this limit throttle?" before
// the limit ships: it replays access logs through addrlimit's own decision
// code in virtual time and reports, per client key, the requests, the
// refusals, the first refusal and the peak rates; which keys look like a
// shared egress address (many user agents or paths behind one key: your own
// services, a NAT); and which requests carried an internal identity and so
// would be exempt.
//
//	go install github.com/addrlimit/addrlimit/cmd/addrlimit-replay@latest
//	addrlimit-replay -limit 300 -per 1m access.log
//	addrlimit-replay -format caddy -limit 300 -per 1m -html report.html caddy.log
//	zcat alb/*.log.gz | addrlimit-replay -format alb -limit 300 -per 1m -json > report.json
//
// Formats (-format): combined (nginx and Apache; -fwd-field and
// -identity-field number the fields after the user agent, so nginx's "main"
// format has X-Forwarded-For as -fwd-field 1), caddy (Caddy's JSON access
// log), json (one object per line; -json-field NAME=PATH maps the fields
// time, remote, fwd, method, path, status, ua, identity to dotted paths),
// alb (AWS Application Load Balancer). Files ending in .gz are
// decompressed; no file, or "-", reads standard input.
//
// Each line becomes a request given to Limiter.Allow of a Limiter built
// with the flags' options (limit, burst, -policy and -cost by path prefix,
// -trusted proxies and -proxy-header, -max-keys) and WithClock set to the
// line's time: the same keys, exemption, policies, costs and bucket
// arithmetic as the middleware. -trusted names the proxies in front of the
// server that wrote the log (the log's remote field is that server's peer).
// A line whose -identity-field names an identity (anything but empty, "-"
// or "null") carries the internal token, as it did in production: log an
// identity only after verifying the token (nginx: a map on
// $http_authorization). The log's time resolution is the replay's: requests
// logged in the same second count as simultaneous. Logs are read in order;
// a line earlier than the lines before it refills no bucket: it is decided
// at the latest time its bucket's table has seen (WithClock).
//
// Memory is bounded whatever the log's size: the Limiter's own tables
// (-max-keys exact buckets per policy, as in production), -keys entries in
// the report's key table (space-saving: every key with more than N/keys of
// N requests is kept), 64 identity names and 1024 timeline slots.
package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/addrlimit/addrlimit"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage was printed
		}
		fmt.Fprintln(os.Stderr, "addrlimit-replay:", err)
		os.Exit(2)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// options are the command's flags.
type options struct {
	limits
	format, fwdField, identityField string
	jsonFields                      []string
	keys, rows                      int
	egress                          egress
	json                            bool
	html                            string
	files                           []string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("addrlimit-replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: addrlimit-replay [flags] [file ...]\n\nReplays access logs through addrlimit's decisions: who would this limit throttle?\n\nFlags:")
		fs.PrintDefaults()
	}
	o := &options{}
	var per, trusted string
	var policies, costs multiFlag
	fs.IntVar(&o.Limit, "limit", 300, "requests per `period` (-per) of the default policy, as addrlimit.New(limit, per)")
	fs.StringVar(&per, "per", "1m", "the period of -limit: a Go duration, or s, m, h")
	fs.IntVar(&o.Burst, "burst", 0, "bucket capacity of the default policy (WithBurst); 0: the limit")
	fs.Var(&policies, "policy", "a named policy for a path prefix: NAME=LIMIT/PER[,BURST]@PREFIX (repeatable; longest prefix wins)")
	fs.Var(&costs, "cost", "the cost of requests under a path prefix: PREFIX=N (repeatable; longest prefix wins)")
	fs.StringVar(&o.Header, "proxy-header", "", "the header your trusted proxies set (X-Forwarded-For, Forwarded, X-Real-IP, …), with -trusted")
	fs.StringVar(&trusted, "trusted", "", "comma-separated addresses or CIDR ranges of the proxies in front of the logging server")
	fs.BoolVar(&o.Exempt, "exempt-identities", true, "requests whose -identity-field names an identity carry the internal token (false: replay them as if unexempt)")
	fs.IntVar(&o.MaxKeys, "max-keys", addrlimit.DefaultMaxKeys, "exact buckets per policy, as WithMaxKeys in production")
	fs.StringVar(&o.format, "format", "combined", "log format: combined, caddy, json or alb")
	fs.StringVar(&o.fwdField, "fwd-field", "", "where the proxy header's value is: a field number after the user agent (combined), a dotted path (JSON)")
	fs.StringVar(&o.identityField, "identity-field", "", "where a verified internal identity is: a field number after the user agent (combined), a dotted path (JSON)")
	fs.Var((*multiFlag)(&o.jsonFields), "json-field", "JSON field map override NAME=PATH, NAME one of time, remote, fwd, method, path, status, ua, identity (repeatable)")
	fs.IntVar(&o.keys, "keys", 10000, "keys the report keeps (the most frequent; bounds its memory)")
	fs.IntVar(&o.rows, "top", 20, "keys in the terminal summary and the HTML report")
	fs.IntVar(&o.egress.uas, "egress-uas", 3, "a key with at least this many distinct user agents is flagged as shared egress (0: never)")
	fs.IntVar(&o.egress.paths, "egress-paths", 0, "a key with at least this many distinct paths is flagged as shared egress (0: never)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON instead of the summary")
	fs.StringVar(&o.html, "html", "", "also write an HTML report (self-contained, with charts) to this `file`")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.Per, err = parsePer(per); err != nil || o.Per <= 0 {
		return nil, fmt.Errorf("-per %q: want a positive duration such as 1m", per)
	}
	for _, s := range policies {
		p, err := parsePolicy(s)
		if err != nil {
			return nil, err
		}
		o.Policies = append(o.Policies, p)
	}
	for _, s := range costs {
		c, err := parseCost(s)
		if err != nil {
			return nil, err
		}
		o.Costs = append(o.Costs, c)
	}
	if trusted != "" {
		o.Trusted = strings.Split(trusted, ",")
	}
	if o.keys < 1 || o.rows < 1 {
		return nil, errors.New("-keys and -top must be at least 1")
	}
	o.files = fs.Args()
	if len(o.files) == 0 {
		o.files = []string{"-"}
	}
	return o, nil
}

// setup parses the flags and builds the parser and the engine they describe.
func setup(args []string, stderr io.Writer) (*options, parser, *engine, error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	if o.Header != "" && o.fwdField == "" && (o.format == "combined" || o.format == "alb") {
		return nil, nil, nil, fmt.Errorf("-proxy-header %s: the %s format records no header unless -fwd-field says where (alb: the client field is already the address behind the load balancer)", o.Header, o.format)
	}
	p, err := newParser(o.format, o.fwdField, o.identityField, o.jsonFields)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := newEngine(o.limits)
	if err != nil {
		return nil, nil, nil, err
	}
	return o, p, e, nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, p, e, err := setup(args, stderr)
	if err != nil {
		return err
	}
	t := newTally(o.keys)
	for _, name := range o.files {
		if err := replayFile(name, stdin, p, e, t); err != nil {
			return err
		}
	}
	r := buildReport(t, o.limits, o.egress)
	if o.html != "" {
		if err := writeHTMLFile(o.html, r, o.rows); err != nil {
			return err
		}
	}
	if o.json {
		return r.writeJSON(stdout)
	}
	return r.writeText(stdout, o.rows)
}

func replayFile(name string, stdin io.Reader, p parser, e *engine, t *tally) error {
	var in io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	br := bufio.NewReaderSize(in, maxLine)
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, maxLine)
	}
	if err := replay(br, p, e, t); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// maxLine bounds a line: longer ones are skipped, never buffered whole.
const maxLine = 1 << 16

// replay decides every line of r in order.
func replay(r *bufio.Reader, p parser, e *engine, t *tally) error {
	var rec record
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			t.lines++
			t.skipped++
			for err == bufio.ErrBufferFull { // the rest of a line over maxLine
				_, err = r.ReadSlice('\n')
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			continue
		}
		if len(line) > 0 {
			t.lines++
			line = trimEOL(line)
			if p.parse(line, &rec) {
				d := e.decide(&rec)
				t.add(&rec, &d)
			} else {
				t.skipped++
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
