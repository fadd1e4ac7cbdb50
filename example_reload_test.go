package addrlimit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/addrlimit/addrlimit"
)

// This file is the recipe of docs/reload.md: reload the internal secrets
// from a mounted Kubernetes secret and the policy table from a JSON file,
// without a restart. Copy it; it is not part of the package's API.

// policyFile is the JSON policy table:
//
//	{"policies": [
//	  {"name": "default", "limits": [{"requests": 300, "per": "1m"}]},
//	  {"name": "api", "limits": [{"requests": 10, "per": "1s"}, {"requests": 1000, "per": "1h", "burst": 200}]}
//	]}
//
// The first policy is the default one. A limit lets requests per per, in
// bursts of burst (default: requests).
type policyFile struct {
	Policies []struct {
		Name   string `json:"name"`
		Limits []struct {
			Name     string `json:"name,omitempty"`
			Requests int    `json:"requests"`
			Per      string `json:"per"`
			Burst    int    `json:"burst,omitempty"`
		} `json:"limits"`
	} `json:"policies"`
}

// parsePolicies reads a policy table. Its errors name the policy and the
// limit; SetPolicies checks the rest.
func parsePolicies(data []byte) ([]addrlimit.Policy, error) {
	var f policyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	var out []addrlimit.Policy
	for i, p := range f.Policies {
		pol := addrlimit.Policy{Name: p.Name}
		for j, l := range p.Limits {
			per, err := time.ParseDuration(l.Per)
			if err != nil || per <= 0 || l.Requests < 1 {
				return nil, fmt.Errorf("policy %d (%q) limit %d: want requests >= 1 per a positive duration, got %d per %q", i+1, p.Name, j+1, l.Requests, l.Per)
			}
			burst := l.Burst
			if burst == 0 {
				burst = l.Requests
			}
			pol.Limits = append(pol.Limits, addrlimit.Limit{Name: l.Name, Burst: burst, Interval: per / time.Duration(l.Requests)})
		}
		out = append(out, pol)
	}
	return out, nil
}

// readSecrets reads a mounted secret: one file per identity (the secret's
// keys), one accepted secret per line. Kubernetes updates the mount by
// swapping a symlink (..data) to a new directory, so the files are read
// whole, through it, and entries starting with "." are skipped.
func readSecrets(dir string) ([]addrlimit.Identity, []byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var ids []addrlimit.Identity
	h := sha256.New()
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(h, "%q=%x;", e.Name(), sha256.Sum256(b))
		ids = append(ids, addrlimit.Identity{Name: e.Name(), Secrets: strings.Fields(string(b))})
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Name < ids[j].Name })
	return ids, h.Sum(nil), nil
}

// reloader polls a policy file and a secret directory and applies what
// changed. A file that does not parse or that the Limiter refuses is logged
// (the error names the problem, never a secret), counted in Refused, and the
// running configuration stays; it is not retried until its content changes.
type reloader struct {
	lim        *addrlimit.Limiter
	tok        *addrlimit.InternalToken
	policyPath string
	secretDir  string
	log        *slog.Logger

	seenPolicies, seenSecrets []byte // digests of the content last seen
	Applied, Refused          atomic.Uint64
}

// check reads both sources once and applies what changed. It returns the
// errors of this check (nil if nothing was refused).
func (r *reloader) check() error {
	var errs []error
	if data, err := os.ReadFile(r.policyPath); err != nil {
		errs = append(errs, err)
	} else if sum := sha256.Sum256(data); !bytes.Equal(sum[:], r.seenPolicies) {
		r.seenPolicies = sum[:]
		ps, err := parsePolicies(data)
		if err == nil {
			err = r.lim.SetPolicies(ps...)
		}
		errs = append(errs, r.outcome(r.policyPath, err))
	}
	if ids, sum, err := readSecrets(r.secretDir); err != nil {
		errs = append(errs, err)
	} else if !bytes.Equal(sum, r.seenSecrets) {
		r.seenSecrets = sum
		tok, err := addrlimit.NewIdentities(ids...)
		if err == nil {
			err = r.tok.Replace(tok)
		}
		errs = append(errs, r.outcome(r.secretDir, err))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// outcome counts and logs the result of applying what changed in source.
func (r *reloader) outcome(source string, err error) error {
	if err != nil {
		r.Refused.Add(1)
		r.log.Error("configuration refused, the running one stays", "source", filepath.Base(source), "err", err)
		return fmt.Errorf("%s: %w", filepath.Base(source), err)
	}
	r.Applied.Add(1)
	r.log.Info("configuration applied", "source", filepath.Base(source))
	return nil
}

// run checks at every tick (a time.Ticker's C in production) until ctx
// ends, and tells checked (if not nil) each result.
func (r *reloader) run(ctx context.Context, tick <-chan time.Time, checked func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			err := r.check()
			if checked != nil {
				checked(err)
			}
		}
	}
}

// writeMountedSecret writes files into dir as the kubelet updates a secret
// volume: into a fresh directory, then one rename of the ..data symlink,
// with each file a symlink through ..data.
func writeMountedSecret(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries { // files gone from the secret
		if !strings.HasPrefix(e.Name(), ".") {
			if _, ok := files[e.Name()]; !ok {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// Reload the secrets of a mounted Kubernetes secret and a JSON policy table
// while the Limiter runs: rotated secrets and changed limits apply at the
// next poll, buckets keep the tokens they spent, and a bad file is refused
// with the running configuration kept.
func Example_reload() {
	dir, _ := os.MkdirTemp("", "reload")
	defer os.RemoveAll(dir)
	secrets, policies := filepath.Join(dir, "secrets"), filepath.Join(dir, "policies.json")
	_ = writeMountedSecret(secrets, map[string]string{"edge": "edge-secret-november-0001\n"})
	_ = os.WriteFile(policies, []byte(`{"policies": [{"name": "default", "limits": [{"requests": 300, "per": "1m"}]}]}`), 0o600)

	tok, _ := addrlimit.NewInternalToken("placeholder-until-the-first-check") // replaced by check
	lim, _ := addrlimit.New(1, time.Minute, addrlimit.WithInternalToken(tok))
	r := &reloader{lim: lim, tok: tok, policyPath: policies, secretDir: secrets, log: slog.New(slog.DiscardHandler)}
	if err := r.check(); err != nil { // at startup: fail if the files are bad
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	exempt := func(secret string) bool {
		return lim.Allow(req("192.0.2.1:1", "Authorization", "Bearer "+secret)).Outcome == addrlimit.Exempt
	}
	for range 250 {
		lim.AllowKey(ctx, "", "client", 1)
	}
	fmt.Println("edge exempt:", exempt("edge-secret-november-0001"))

	// Rotation: the new secret beside the old one, then a bigger limit.
	_ = writeMountedSecret(secrets, map[string]string{"edge": "edge-secret-december-0002\nedge-secret-november-0001\n", "gate": "gate-secret-december-0003\n"})
	_ = os.WriteFile(policies, []byte(`{"policies": [{"name": "default", "limits": [{"requests": 400, "per": "1m"}]}]}`), 0o600)
	fmt.Println("check:", r.check())
	fmt.Println("new secrets exempt:", exempt("edge-secret-december-0002"), exempt("gate-secret-december-0003"))
	d, _ := lim.Peek(ctx, "", "client")
	fmt.Println("client's tokens after 300/min became 400/min:", d.Remaining)

	// A bad file: refused, the running configuration stays.
	_ = os.WriteFile(policies, []byte(`{"policies": [{"name": "default", "limits": [{"requests": 400, "per": "1m", "burst": -5}]}]}`), 0o600)
	_ = writeMountedSecret(secrets, map[string]string{"edge": "too-short\n"})
	fmt.Println("check:", r.check())
	fmt.Println("still:", lim.Policies()[0].Limits[0].Burst, "burst, edge exempt:", exempt("edge-secret-december-0002"))
	fmt.Println("applied:", r.Applied.Load(), "refused:", r.Refused.Load())
	// Output:
	// edge exempt: true
	// check: <nil>
	// new secrets exempt: true true
	// client's tokens after 300/min became 400/min: 150
	// check: policies.json: addrlimit: policy "default": burst must be at least 1, got -5
	// still: 400 burst, edge exempt: true
	// applied: 4 refused: 2
}
