package stripeprovider

import (
	"github.com/outboxkit/outbox/providers"
	"github.com/stripe/stripe-go/v76"
)

// ownedList is a strongly consistent Stripe list that Reconcile reads for
// the objects an intent made (PaymentIntents, refunds): both are paged,
// bounded and filtered by the intent's metadata the same way.
type ownedList[T any] struct {
	// params are the list's paging parameters, moved on page by page.
	params *stripe.ListParams
	// page lists one page with params.
	page func() *stripe.Iter
	// lastResponse is the answer a page was read from (stripe-go keeps it
	// on the typed list only).
	lastResponse func(stripe.ListContainer) *stripe.APIResponse
	// ident is an object's id and metadata.
	ident func(T) (id string, metadata map[string]string)
}

// scanOwned reads l one page at a time, at most Config.ReconcileMaxPages
// pages, and calls visit with each object carrying req's namespace and
// key, in Stripe's order; visit's error ends the scan. A failed call is
// classified as classifyLookup does. It returns the last page's HTTP
// status and whether the listing was read to its end: only then does
// finding nothing prove absence.
func scanOwned[T any](p *Provider, req providers.Request, l ownedList[T], visit func(T) error) (status int, complete bool, err error) {
	for page := 0; page < p.cfg.ReconcileMaxPages; page++ {
		iter := l.page()
		var last string
		for iter.Next() {
			obj := iter.Current().(T)
			id, md := l.ident(obj)
			last = id
			if md[NamespaceMetadataKey] != req.Namespace || md[KeyMetadataKey] != req.IdempotencyKey {
				continue // another deployment's, or another intent's
			}
			if err := visit(obj); err != nil {
				return status, false, err
			}
		}
		if err := iter.Err(); err != nil {
			return status, false, p.classifyLookup(err)
		}
		if lr := l.lastResponse(iter.List()); lr != nil {
			status = lr.StatusCode
		}
		if !iter.Meta().HasMore {
			return status, true, nil
		}
		if last == "" {
			break // has_more with an empty page: nothing to go on from
		}
		l.params.StartingAfter = stripe.String(last)
	}
	return status, false, nil
}
