package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what --json prints: the figures of the terminal summary and the
// HTML report, for scripts. Times are RFC 3339; keys are client addresses
// (IPv6 as their /64): treat the report as personal data.
type Report struct {
	Limits  limits `json:"limits"`
	Lines   uint64 `json:"lines"`
	Skipped uint64 `json:"skipped_lines"` // not a request in the chosen format

	Start time.Time `json:"start"`
	End   time.Time `json:"end"`

	Requests    uint64 `json:"requests"`
	Allowed     uint64 `json:"allowed"`
	Refused     uint64 `json:"refused"`
	Exempt      uint64 `json:"exempt"`
	KeyWarnings uint64 `json:"key_warnings"` // key, policy or cost not clean (still charged)

	// WithIdentity counts the requests whose log line named an internal
	// identity; Identities breaks them down (at most 64 names, then "(other)").
	WithIdentity uint64          `json:"with_identity"`
	Identities   []identityStats `json:"identities,omitempty"`

	// KeyCapacity bounds Keys (space-saving); KeysReplaced counts keys that
	// took the place of a less frequent one, so their counts include an
	// overestimate (Key.Overestimate).
	KeyCapacity  int    `json:"key_capacity"`
	KeysReplaced uint64 `json:"keys_replaced"`
	Keys         []Key  `json:"keys"` // one per bucket (policy and key); refused first, then by requests

	Timeline Timeline `json:"timeline"`
}

// Key is one client key's line of the report.
type Key struct {
	Key          string     `json:"key"`
	Policy       string     `json:"policy"`
	Requests     uint64     `json:"requests"`
	Allowed      uint64     `json:"allowed"`
	Refused      uint64     `json:"refused"`
	Overestimate uint64     `json:"overestimate,omitempty"`
	FirstRefusal *time.Time `json:"first_refusal,omitempty"`
	PeakPerSec   uint32     `json:"peak_per_second"`
	PeakPerMin   uint32     `json:"peak_per_minute"`
	UserAgents   int        `json:"distinct_user_agents"` // estimated
	Paths        int        `json:"distinct_paths"`       // estimated
	SampleUAs    []string   `json:"sample_user_agents,omitempty"`
	SamplePaths  []string   `json:"sample_paths,omitempty"`
	SharedEgress bool       `json:"shared_egress"`
}

// Timeline is requests, refusals and exemptions per slot of Step seconds
// from Start (at most 1024 slots: long logs get wider slots).
type Timeline struct {
	Start    time.Time `json:"start"`
	Step     float64   `json:"step_seconds"`
	Requests []uint64  `json:"requests"`
	Refused  []uint64  `json:"refused"`
	Exempt   []uint64  `json:"exempt"`
}

// egress says when a key looks like a shared egress address.
type egress struct{ uas, paths int }

func (e egress) shared(k *keyStats) bool {
	return e.uas > 0 && k.uas.count() >= e.uas || e.paths > 0 && k.paths.count() >= e.paths
}

func buildReport(t *tally, l limits, eg egress) *Report {
	r := &Report{
		Limits: l, Lines: t.lines, Skipped: t.skipped,
		Requests: t.requests, Allowed: t.allowed, Refused: t.refused, Exempt: t.exempt,
		KeyWarnings: t.keyWarnings, WithIdentity: t.withIdentity,
		KeyCapacity: t.keys.capacity, KeysReplaced: t.keys.replaced,
	}
	if t.requests > 0 {
		r.Start, r.End = time.Unix(0, t.first).UTC(), time.Unix(0, t.last).UTC()
	}
	for _, id := range t.ids.byName {
		r.Identities = append(r.Identities, *id)
	}
	slices.SortFunc(r.Identities, func(a, b identityStats) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), strings.Compare(a.Name, b.Name))
	})
	for _, e := range t.keys.h {
		k := e.k
		out := Key{
			Key: k.key, Policy: k.policy, Requests: k.requests, Allowed: k.allowed, Refused: k.refused,
			Overestimate: k.over, PeakPerSec: k.peakSec, PeakPerMin: k.peakMin,
			UserAgents: k.uas.count(), Paths: k.paths.count(),
			SampleUAs: k.uaSamples.strings(), SamplePaths: k.pathSamples.strings(),
			SharedEgress: eg.shared(k),
		}
		if k.firstRefusal != 0 {
			ft := time.Unix(0, k.firstRefusal).UTC()
			out.FirstRefusal = &ft
		}
		r.Keys = append(r.Keys, out)
	}
	slices.SortFunc(r.Keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(b.Requests, a.Requests), strings.Compare(a.Key, b.Key))
	})
	tl := &t.time
	r.Timeline = Timeline{Start: time.Unix(0, tl.start).UTC(), Step: time.Duration(tl.width).Seconds(),
		Requests: []uint64{}, Refused: []uint64{}, Exempt: []uint64{}}
	for _, s := range tl.slots {
		r.Timeline.Requests = append(r.Timeline.Requests, s.Requests)
		r.Timeline.Refused = append(r.Timeline.Refused, s.Refused)
		r.Timeline.Exempt = append(r.Timeline.Exempt, s.Exempt)
	}
	return r
}

func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeText prints the terminal summary, with at most rows keys.
func (r *Report) writeText(w io.Writer, rows int) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	span := r.End.Sub(r.Start)
	p("%d lines, %d skipped (not a request in this format)\n", r.Lines, r.Skipped)
	if r.Requests == 0 {
		p("no requests to replay\n")
		return nil
	}
	p("%d requests from %s to %s (%s)\n", r.Requests, r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), span.Round(time.Second))
	p("decisions: %d allowed, %d refused (%.2f %%), %d exempt", r.Allowed, r.Refused, 100*float64(r.Refused)/float64(r.Requests), r.Exempt)
	if r.KeyWarnings > 0 {
		p(", %d with a key, policy or cost warning (still charged)", r.KeyWarnings)
	}
	p("\n")
	refusedKeys := 0
	for _, k := range r.Keys {
		if k.Refused > 0 {
			refusedKeys++
		}
	}
	p("\nkeys refused at least once: %d", refusedKeys)
	if r.KeysReplaced > 0 {
		p(" (among the %d most frequent keys kept; %d rarer keys were replaced,\nand a count marked (≤+n) may include up to n of their requests)", r.KeyCapacity, r.KeysReplaced)
	}
	p("\n")
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tpolicy\trequests\trefused\tfirst refusal\tpeak/s\tpeak/min\tUAs\tpaths\t\t")
	for i, k := range r.Keys {
		if i == rows {
			break
		}
		first := "-"
		if k.FirstRefusal != nil {
			first = k.FirstRefusal.Format("15:04:05.000")
		}
		note := ""
		if k.SharedEgress {
			note = "shared egress?"
		}
		requests := fmt.Sprint(k.Requests)
		if k.Overestimate > 0 {
			requests += fmt.Sprintf(" (≤+%d)", k.Overestimate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t\n", k.Key, k.Policy, requests, k.Refused, first, k.PeakPerSec, k.PeakPerMin, k.UserAgents, k.Paths, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) { // without the padding of an empty last cell
		p("%s\n", strings.TrimRight(line, " \n"))
	}
	var shared []Key
	for _, k := range r.Keys {
		if k.SharedEgress {
			shared = append(shared, k)
		}
	}
	if len(shared) > 0 {
		p("\nshared egress? (many user agents or paths behind one key: give your own services an identity, not an address)\n")
		for i, k := range shared {
			if i == rows {
				p("  … %d more (--json lists them)\n", len(shared)-rows)
				break
			}
			p("  %s: %d requests, %d refused, ~%d user agents, ~%d paths; e.g. %s\n", k.Key, k.Requests, k.Refused, k.UserAgents, k.Paths, strings.Join(quoteAll(k.SampleUAs), ", "))
		}
	}
	if r.WithIdentity > 0 {
		p("\nrequests carrying an internal identity: %d\n", r.WithIdentity)
		for _, id := range r.Identities {
			p("  %s: %d requests, %d exempt, %d refused\n", id.Name, id.Requests, id.Exempt, id.Refused)
		}
	}
	return nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
