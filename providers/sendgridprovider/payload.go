package sendgridprovider

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/outboxkit/outbox/providers"
)

// Limits on an Email payload, from SendGrid's documented limits.
const (
	// MaxRecipients is the most recipients over To, Cc and Bcc together.
	MaxRecipients = 1000
	// MaxCategories is the most categories an email may have.
	MaxCategories = 10
	// MaxCategoryLength is the longest category, in bytes.
	MaxCategoryLength = 255
	// MaxCustomArgsBytes bounds Email.CustomArgs serialized as JSON. SendGrid
	// refuses custom_args of 10,000 bytes or more; the adapter keeps 1,000
	// bytes of that for the intent's identity it adds.
	MaxCustomArgsBytes = 9000
	// MaxSendAtAhead is how far ahead send_at may schedule an email,
	// measured on Config.Now when the intent is recorded and performed.
	MaxSendAtAhead = 72 * time.Hour
	// MaxIdentityBytes bounds a request's namespace and idempotency key
	// together, so that they fit the room MaxCustomArgsBytes leaves.
	// Perform refuses, without sending, a request whose identity is longer:
	// its email could never be told from another deployment's.
	MaxIdentityBytes = 900
)

// Reserved custom_args keys: Perform sets them, so a payload may not.
const (
	// ArgNamespace carries the deployment's namespace
	// (providers.Request.Namespace) when it has one.
	ArgNamespace = providers.MetadataNamespace
	// ArgKey carries the intent's idempotency key
	// (providers.Request.IdempotencyKey). With ArgNamespace it identifies
	// the intent; Reconcile looks it up by both.
	ArgKey = providers.MetadataKey
	// ArgIntentID carries the intent's id, for people reading SendGrid's
	// activity feed and for the test double's effect counts. Ids repeat
	// across databases: it never identifies an email.
	ArgIntentID = providers.MetadataIntentID
	// ArgIdempotencyKey is where earlier versions put the idempotency key.
	// It is no longer sent but stays reserved, so that no payload can pass
	// for an intent's identity.
	ArgIdempotencyKey = "idempotency_key"
)

// reservedArgs lists the custom_args keys payloads may not use.
var reservedArgs = []string{ArgNamespace, ArgKey, ArgIntentID, ArgIdempotencyKey}

// Address is an email address with an optional display name. SendGrid
// refuses a recipient's name containing ',' or ';'.
type Address struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

// Email is the payload of a KindEmail intent. Build it and json.Marshal it
// when recording the intent; Validate decodes it strictly (unknown fields
// are errors).
type Email struct {
	// From is the sender; its address must be a verified Sender Identity
	// in SendGrid, or SendGrid refuses the email with 403. Required.
	From *Address `json:"from"`
	// To lists the recipients, 1 to MaxRecipients. Required.
	To []Address `json:"to"`
	// Cc and Bcc are optional; To, Cc and Bcc together hold at most
	// MaxRecipients addresses, each one at most once.
	Cc  []Address `json:"cc,omitempty"`
	Bcc []Address `json:"bcc,omitempty"`
	// ReplyTo is optional.
	ReplyTo *Address `json:"reply_to,omitempty"`
	// Subject is required and non-empty.
	Subject string `json:"subject"`
	// Text and HTML are the bodies; at least one is required.
	Text string `json:"text,omitempty"`
	HTML string `json:"html,omitempty"`
	// Categories are optional, at most MaxCategories distinct ones of at
	// most MaxCategoryLength bytes each, in printable ASCII.
	Categories []string `json:"categories,omitempty"`
	// CustomArgs are optional tracking arguments, shown in SendGrid's
	// activity feed and webhooks (SendGrid does not treat them as personal
	// data: put none in them). The keys ArgNamespace, ArgKey, ArgIntentID
	// and ArgIdempotencyKey are reserved.
	CustomArgs map[string]string `json:"custom_args,omitempty"`
	// SendAt optionally schedules the email (Unix seconds). SendGrid
	// refuses a time more than MaxSendAtAhead after the attempt; Validate
	// refuses it against Config.Now when the intent is recorded.
	SendAt int64 `json:"send_at,omitempty"`
}

// decodeEmail decodes and validates a payload; now is the provider's clock,
// for send_at.
func decodeEmail(payload json.RawMessage, now time.Time) (*Email, error) {
	var e Email
	if err := providers.DecodePayload(KindEmail, payload, &e); err != nil {
		return nil, err
	}
	if err := e.validate(now); err != nil {
		return nil, err
	}
	return &e, nil
}

func (e *Email) validate(now time.Time) error {
	bad := func(field, format string, args ...any) error {
		return &providers.PayloadError{Kind: KindEmail, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if e.From == nil {
		return bad("from", "is required")
	}
	if err := checkAddress("from", *e.From); err != nil {
		return err
	}
	if len(e.To) == 0 {
		return bad("to", "needs at least one recipient")
	}
	seen := map[string]string{}
	for _, list := range []struct {
		name  string
		addrs []Address
	}{{"to", e.To}, {"cc", e.Cc}, {"bcc", e.Bcc}} {
		for i, a := range list.addrs {
			field := fmt.Sprintf("%s[%d]", list.name, i)
			if err := checkAddress(field, a); err != nil {
				return err
			}
			if strings.ContainsAny(a.Name, ",;") {
				return bad(field+".name", "must not contain ',' or ';': SendGrid refuses them in a recipient's name")
			}
			key := strings.ToLower(a.Email)
			if first, dup := seen[key]; dup {
				return bad(field+".email", "duplicates %s.email: SendGrid refuses an address listed twice over to, cc and bcc", first)
			}
			seen[key] = field
		}
	}
	if n := len(e.To) + len(e.Cc) + len(e.Bcc); n > MaxRecipients {
		return bad("to", "to, cc and bcc hold %d recipients together, more than %d", n, MaxRecipients)
	}
	if e.ReplyTo != nil {
		if err := checkAddress("reply_to", *e.ReplyTo); err != nil {
			return err
		}
	}
	if strings.TrimSpace(e.Subject) == "" {
		return bad("subject", "is required")
	}
	if strings.ContainsAny(e.Subject, "\r\n") {
		return bad("subject", "must not contain line breaks")
	}
	if e.Text == "" && e.HTML == "" {
		return bad("text", "text or html is required")
	}
	if len(e.Categories) > MaxCategories {
		return bad("categories", "has %d categories, more than %d", len(e.Categories), MaxCategories)
	}
	categories := map[string]int{}
	for i, c := range e.Categories {
		field := fmt.Sprintf("categories[%d]", i)
		if c == "" || len(c) > MaxCategoryLength {
			return bad(field, "must be 1 to %d bytes long", MaxCategoryLength)
		}
		if !printableASCII(c) {
			return bad(field, "must be printable ASCII: SendGrid refuses other characters in categories")
		}
		if first, dup := categories[c]; dup {
			return bad(field, "duplicates categories[%d]: SendGrid refuses a category listed twice", first)
		}
		categories[c] = i
	}
	for _, k := range reservedArgs {
		if _, ok := e.CustomArgs[k]; ok {
			return bad("custom_args."+k, "is reserved: the outbox sets it")
		}
	}
	if len(e.CustomArgs) > 0 {
		b, _ := json.Marshal(e.CustomArgs)
		if len(b) > MaxCustomArgsBytes {
			return bad("custom_args", "is %d bytes as JSON, more than %d", len(b), MaxCustomArgsBytes)
		}
	}
	if e.SendAt < 0 {
		return bad("send_at", "must be a Unix time in seconds")
	}
	if latest := now.Add(MaxSendAtAhead); e.SendAt > latest.Unix() {
		return bad("send_at", "is %s ahead; SendGrid schedules at most %s ahead (send_at %d, latest %d)",
			time.Unix(e.SendAt, 0).Sub(now).Round(time.Minute), MaxSendAtAhead, e.SendAt, latest.Unix())
	}
	return nil
}

func checkAddress(field string, a Address) error {
	if a.Email == "" {
		return &providers.PayloadError{Kind: KindEmail, Field: field + ".email", Reason: "is required"}
	}
	if !validAddress(a.Email) {
		return &providers.PayloadError{Kind: KindEmail, Field: field + ".email", Reason: "is not a valid email address (want a bare address such as user@example.com)"}
	}
	if strings.ContainsAny(a.Name, "\r\n") {
		return &providers.PayloadError{Kind: KindEmail, Field: field + ".name", Reason: "must not contain line breaks"}
	}

	return nil
}

// validAddress accepts a bare address ("user@example.com"), as SendGrid's
// email fields require.
func validAddress(s string) bool {
	if len(s) > 320 {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && len(local) <= 64
}

// printableASCII reports whether s holds only printable ASCII characters.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
