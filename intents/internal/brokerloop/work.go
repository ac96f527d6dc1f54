package brokerloop

import "sync"

// Work runs n workers, each taking deliveries from next and handling them
// one at a time until next reports false, and returns once every worker
// has stopped: a session that returns from Work has no handler in flight,
// so it may close its connection. next must return false once the session
// is stopping or lost; it is called by all n workers at once.
func Work[D any](n int, next func() (D, bool), handle func(D)) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				d, ok := next()
				if !ok {
					return
				}
				handle(d)
			}
		})
	}
	wg.Wait()
}
