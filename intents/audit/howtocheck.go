package audit

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
)

// Check tells an operator how to find an intent's effect at its provider,
// before resolving or resending an in_doubt intent: the adapters carry the
// intent's identity in the provider's metadata (providers.MetadataNamespace,
// providers.MetadataKey, providers.MetadataIntentID), so the object can be
// searched for by it.
type Check struct {
	// Provider is the intent's provider.
	Provider string `json:"provider"`
	// Search is what to search for at the provider (a Stripe search query,
	// SendGrid custom args, or the identity to look for).
	Search string `json:"search"`
	// URL is where to search, when the provider has a page for it.
	URL string `json:"url,omitempty"`
	// ObjectURL is the provider's page of the object the intent's attempt
	// reported, when one is known.
	ObjectURL string `json:"object_url,omitempty"`
	// Note explains what a match must carry and what to do next.
	Note string `json:"note"`
}

// Stripe's and SendGrid's consoles.
const (
	stripeSearchURL   = "https://dashboard.stripe.com/search?query="
	stripePaymentsURL = "https://dashboard.stripe.com/payments/"
	sendgridActivity  = "https://app.sendgrid.com/email_activity"
)

// HowToCheck says how to look in's effect up at its provider: per
// provider, what to search for and where. It needs no connection.
func HowToCheck(in intenttype.Intent) Check {
	c := Check{Provider: in.Provider}
	// What to do about what is found, only for an intent that waits for an
	// operator's verdict: a finished one needs none.
	var advice string
	var terms []searchTerm
	if in.ProviderKey != "" {
		terms = append(terms, term(providers.MetadataKey, in.ProviderKey))
	}
	if in.Namespace != "" {
		terms = append(terms, term(providers.MetadataNamespace, in.Namespace))
	}
	legacy := in.ProviderKey == ""
	if legacy {
		// Attempted before namespaces and provider keys existed, or not
		// attempted yet: the adapters also carry the intent's id.
		terms = append(terms, term(providers.MetadataIntentID, strconv.FormatInt(in.ID, 10)))
	}
	both := "its " + providers.MetadataKey + " and " + providers.MetadataNamespace + " both match"
	switch in.Provider {
	case "stripe":
		parts := make([]string, len(terms))
		for i, t := range terms {
			parts[i] = fmt.Sprintf("metadata['%s']:'%s'", t.name, strings.ReplaceAll(t.value, "'", `\'`))
		}
		c.Search = strings.Join(parts, " AND ")
		c.URL = stripeSearchURL + url.QueryEscape(c.Search)
		if strings.HasPrefix(in.ProviderRef, "pi_") {
			c.ObjectURL = stripePaymentsURL + url.PathEscape(in.ProviderRef)
		}
		c.Note = "Search PaymentIntents by metadata (Stripe's search can lag by a minute). A PaymentIntent belongs to this intent only if " +
			both + " and its amount, currency and customer are the payload's."
		advice = " Found and succeeded: resolve --as succeeded. " +
			"Not found, and not found by listing the customer's PaymentIntents around the creation time: retry."
	case "sendgrid":
		parts := make([]string, len(terms))
		for i, t := range terms {
			parts[i] = fmt.Sprintf("unique_args['%s']=%q", t.name, t.value)
		}
		c.Search = strings.Join(parts, " AND ")
		c.URL = sendgridActivity
		c.Note = "In Email Activity, search by these custom args (the query works as is in the Email Activity API, GET /v3/messages?query=...). A message belongs to this intent only if " + both +
			" and its recipient is one of the payload's (a reveal shows them: Reveal on the intent's dashboard page, or intents show --reveal; one request is accepted or refused whole, so one recipient's message proves all)."
		advice = " Delivered or processed: resolve --as succeeded. None found proves nothing: the feed lags by minutes and holds nothing without the Email Activity add-on; " +
			"retry only once you know the email was not sent (the recipient, your mail logs), or resolve --as failed with that evidence."
	default:
		parts := make([]string, len(terms))
		for i, t := range terms {
			parts[i] = t.name + "=" + t.value
		}
		c.Search = strings.Join(parts, " ")
		c.Note = "Look at the receiving side for a message or request carrying this key and namespace (the idempotency key, header or message id the adapter sends)."
	}
	if in.State == intenttype.StateInDoubt {
		c.Note += advice
	}
	if legacy && in.AttemptCount > 0 {
		c.Note += " This intent has no provider key recorded: its objects carry only " + providers.MetadataIntentID + ", which another deployment's objects may share; check the parameters."
	}
	return c
}

// MayHaveActedNote says what "an attempt may have reached the provider"
// means for what an operator may do with in now, or "" when it changes
// nothing: no attempt may have acted, or the intent is finished (its
// outcome says whether the provider acted; nothing is left to do).
// `outboxd intents show` and the dashboard show it, so both say the same
// thing for the same state.
func MayHaveActedNote(in intenttype.Intent) string {
	if !in.MayHaveActed || in.State.Terminal() {
		return ""
	}
	if in.State == intenttype.StateInDoubt {
		return "yes: an attempt may have reached the provider, so check there before you resolve or resend it"
	}
	// Pending or dispatching: the dispatcher goes on with it, and an
	// operator may not cancel it (DESIGN.md, invariant 3).
	return "yes: an attempt may have reached the provider, so it cannot be cancelled: it ends succeeded, or in_doubt for an operator"
}

type searchTerm struct{ name, value string }

func term(name, value string) searchTerm { return searchTerm{name, value} }
