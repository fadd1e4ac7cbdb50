package addrlimit_test

import (
	"testing"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:    func(t *testing.T) addrlimit.Store { return addrlimit.NewTestMemoryStore(1000) },
		Bubble: true,
	})
}
