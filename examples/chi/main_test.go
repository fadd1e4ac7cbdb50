package main

import (
	"fmt"
	"net/http/httptest"
	"testing"
)

const token = "chi-example-token-0123456789abcdef"

func TestRouter(t *testing.T) {
	h, err := newRouter(token)
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, xff, auth string, n int) string {
		var codes []int
		for range n {
			r := httptest.NewRequest(method, path, nil)
			r.RemoteAddr = "10.0.0.1:443" // the load balancer
			r.Header.Set("X-Forwarded-For", xff)
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes = append(codes, w.Code)
		}
		return fmt.Sprint(codes)
	}
	tests := []struct {
		name, method, path, xff, auth string
		n                             int
		want                          string
	}{
		{"login is limited per client, behind the proxy", "POST", "/login", "6.6.6.6, 203.0.113.9", "", 6, "[200 200 200 200 200 429]"},
		{"a spoofed leftmost address does not reset the login budget", "POST", "/login", "7.7.7.7, 203.0.113.9", "", 1, "[429]"},
		{"another client has its own budget", "POST", "/login", "203.0.113.10", "", 1, "[200]"},
		{"internal route with the token", "PUT", "/internal/agents/42/progress", "10.0.0.5", "Bearer " + token, 3, "[200 200 200]"},
		{"internal route with a forged token", "PUT", "/internal/agents/42/progress", "203.0.113.11", "Bearer forged-token-000000000000", 1, "[401]"},
		{"public route", "GET", "/sites", "203.0.113.12", "", 2, "[200 200]"},
	}
	for _, tc := range tests {
		if got := do(tc.method, tc.path, tc.xff, tc.auth, tc.n); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
