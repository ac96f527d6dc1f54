// Package idemstore is the idempotency store of the provider test doubles
// that honour a key (Stripe's, a webhook receiver's): the first request
// with a key claims it while it runs; its response, once saved, answers
// every repeat; a repeat with other parameters, or while the first is still
// running, is told so.
package idemstore

import (
	"sync"
	"time"
)

// Outcome is what Begin found for a key.
type Outcome int

const (
	// Fresh: the key is new (or forgotten); the request now holds it and
	// must Finish or Release its Claim.
	Fresh Outcome = iota
	// InFlight: another request with the key is still running.
	InFlight
	// Mismatch: the key was first used with other parameters.
	Mismatch
	// Saved: the key's saved response answers this request.
	Saved
)

// Store maps keys to saved responses of type R. It is safe for concurrent
// use.
type Store[R any] struct {
	mu        sync.Mutex
	keys      map[string]*entry[R]
	retention time.Duration
}

type entry[R any] struct {
	fingerprint string
	firstUsed   time.Time
	inFlight    bool
	saved       *R
}

// New returns a store that forgets a finished key retention after its first
// use (0: never), as Stripe prunes keys after 24 hours.
func New[R any](retention time.Duration) *Store[R] {
	return &Store[R]{keys: map[string]*entry[R]{}, retention: retention}
}

// Claim is a request's hold on a fresh key. A nil Claim does nothing, so a
// request without a key can call Finish and Release freely.
type Claim[R any] struct {
	store *Store[R]
	key   string
	e     *entry[R]
}

// Begin looks key up at now for a request whose parameters have the given
// fingerprint. For Fresh it returns the Claim; for Saved, the saved
// response.
func (s *Store[R]) Begin(key, fingerprint string, now time.Time) (*Claim[R], Outcome, R) {
	var zero R
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e != nil && !e.inFlight && s.retention > 0 && !now.Before(e.firstUsed.Add(s.retention)) {
		delete(s.keys, key) // pruned: a reuse executes afresh
		e = nil
	}
	switch {
	case e == nil:
		e = &entry[R]{fingerprint: fingerprint, firstUsed: now, inFlight: true}
		s.keys[key] = e
		return &Claim[R]{store: s, key: key, e: e}, Fresh, zero
	case e.inFlight:
		return nil, InFlight, zero
	case e.fingerprint != fingerprint:
		return nil, Mismatch, zero
	}
	return nil, Saved, *e.saved
}

// Finish saves resp as the key's answer to every repeat.
func (c *Claim[R]) Finish(resp R) {
	if c == nil {
		return
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	c.e.inFlight = false
	c.e.saved = &resp
	c.store.keys[c.key] = c.e
}

// Release forgets the key: the request ended with nothing worth saving, so
// a repeat executes afresh.
func (c *Claim[R]) Release() {
	if c == nil {
		return
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	if c.store.keys[c.key] == c.e {
		delete(c.store.keys, c.key)
	}
}
