package addrlimit_test

import (
	"testing"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/internal/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) addrlimit.Store {
			s, err := addrlimit.NewMemoryStore(1000)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Bubble: true,
	})
}
