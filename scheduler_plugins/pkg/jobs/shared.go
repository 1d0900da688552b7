package jobs

import (
	"sync"

	"k8s.io/client-go/informers"
)

var (
	sharedMu sync.Mutex
	shared   = map[informers.SharedInformerFactory]*Registry{}
)

// Shared returns the one Registry of a scheduler process, keyed by its
// informer factory, and registers the registry's pod handler on first use.
// The queue-sort, gang and co-location plugins (in every profile) thus read
// the same job state.
func Shared(f informers.SharedInformerFactory) *Registry {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if r, ok := shared[f]; ok {
		return r
	}
	r := NewRegistry()
	shared[f] = r
	if f != nil {
		_, _ = f.Core().V1().Pods().Informer().AddEventHandler(r.EventHandler())
	}
	return r
}
