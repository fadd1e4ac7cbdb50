package grpclimit_test

import (
	"testing"

	"github.com/addrlimit/addrlimit/grpclimit"
)

// An Interceptor that New did not build (its error ignored, or a zero
// value) must fail when the server is set up, not panic in every call: grpc-go
// does not recover a panicking interceptor, so the first call would take the
// whole server down.
func TestUnbuiltInterceptorPanicsAtSetupNotPerCall(t *testing.T) {
	var nilGL *grpclimit.Interceptor
	for name, gl := range map[string]*grpclimit.Interceptor{"nil": nilGL, "zero": {}} {
		for kind, build := range map[string]func(){
			"Unary":  func() { gl.Unary() },
			"Stream": func() { gl.Stream() },
		} {
			t.Run(name+" "+kind, func(t *testing.T) {
				defer func() {
					if recover() == nil {
						t.Errorf("%s Interceptor: %s() returned an interceptor that would panic in every call", name, kind)
					}
				}()
				build()
			})
		}
	}
}
