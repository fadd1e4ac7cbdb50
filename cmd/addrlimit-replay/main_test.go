package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsRefused: a misconfiguration is an error naming the flag, never a
// replay of something else.
func TestFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-per", "0s"}, "-per"},
		{[]string{"-limit", "0"}, "limit must be"},
		{[]string{"-policy", "login=5/1m"}, "-policy"},
		{[]string{"-policy", "login=5/1m,0@/login"}, "bad burst"},
		{[]string{"-policy", "bad name=5/1m@/login"}, "-policy"},
		{[]string{"-cost", "/batch=0"}, "-cost"},
		{[]string{"-proxy-header", "X-Forwarded-For"}, "-fwd-field"},
		{[]string{"-proxy-header", "X-Forwarded-For", "-fwd-field", "1"}, "go together"},
		{[]string{"-trusted", "10.0.0.0/8", "-proxy-header", "X-Forwarded-For", "-fwd-field", "1", "-trusted", "nonsense"}, "-trusted"},
		{[]string{"-trusted", "0.0.0.0/0", "-proxy-header", "X-Forwarded-For", "-fwd-field", "1"}, "every address"},
		{[]string{"-format", "alb", "-identity-field", "1"}, "fixed fields"},
		{[]string{"-keys", "0"}, "-keys"},
	} {
		_, _, _, err := setup(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
