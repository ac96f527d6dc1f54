package providers

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Registry maps intent kinds to the providers that perform them. It is
// immutable once built and safe for concurrent use.
type Registry struct {
	byKind map[string]Provider
	byName map[string]Provider
}

// NewRegistry builds a registry. It fails when a provider has no name or no
// kinds, when two providers share a name, or when two declare the same kind,
// and when a provider declares idempotency keys without a key window.
func NewRegistry(ps ...Provider) (*Registry, error) {
	r := &Registry{byKind: map[string]Provider{}, byName: map[string]Provider{}}
	for _, p := range ps {
		if p == nil {
			return nil, errors.New("providers: nil provider")
		}
		name := p.Name()
		if name == "" {
			return nil, errors.New("providers: provider with an empty name")
		}
		if _, dup := r.byName[name]; dup {
			return nil, fmt.Errorf("providers: provider %q registered twice", name)
		}
		caps := p.Capabilities()
		if caps.IdempotencyKeys && caps.KeyWindow <= 0 {
			return nil, fmt.Errorf("providers: provider %q accepts idempotency keys but declares no key window", name)
		}
		if len(p.Kinds()) == 0 {
			return nil, fmt.Errorf("providers: provider %q declares no intent kinds", name)
		}
		r.byName[name] = p
		for _, kind := range p.Kinds() {
			if other, dup := r.byKind[kind]; dup {
				return nil, fmt.Errorf("providers: kind %q declared by both %q and %q", kind, other.Name(), name)
			}
			r.byKind[kind] = p
		}
	}
	return r, nil
}

// ForKind returns the provider that performs kind, or an error wrapping
// ErrUnknownKind that lists the kinds that are known.
func (r *Registry) ForKind(kind string) (Provider, error) {
	if p, ok := r.byKind[kind]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q (known kinds: %v)", ErrUnknownKind, kind, r.Kinds())
}

// ByName returns the provider registered under name.
func (r *Registry) ByName(name string) (Provider, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// Validate finds the provider for kind and validates payload with it.
func (r *Registry) Validate(kind string, payload json.RawMessage) (Provider, error) {
	p, err := r.ForKind(kind)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(kind, payload); err != nil {
		return nil, err
	}
	return p, nil
}

// Kinds returns every registered kind, sorted.
func (r *Registry) Kinds() []string {
	kinds := make([]string, 0, len(r.byKind))
	for k := range r.byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Providers returns the registered providers, sorted by name.
func (r *Registry) Providers() []Provider {
	ps := make([]Provider, 0, len(r.byName))
	for _, p := range r.byName {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Provider) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	return ps
}
