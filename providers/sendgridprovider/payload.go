package sendgridprovider

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/mail"
	"strings"
	"time"

	"github.com/outboxkit/outbox/providers"
)

// Limits on an Email payload, from SendGrid's documented limits.
const (
	// MaxRecipients is the most recipients over To, Cc and Bcc together,
	// of every personalization.
	MaxRecipients = 1000
	// MaxPersonalizations is the most Personalizations an Email may have.
	MaxPersonalizations = 1000
	// MaxTemplateDataBytes bounds each personalization's
	// dynamic_template_data as sent (Email.DynamicTemplateData merged with
	// the personalization's own), encoded as JSON.
	MaxTemplateDataBytes = 10000
	// MaxMessageBytes bounds the request Perform sends, attachments
	// included. SendGrid documents that "the total size of your email,
	// including attachments, must be less than 30MB"; the adapter reads
	// 30MB as 30,000,000 bytes, the stricter reading, and Validate refuses
	// an Email whose request could reach it.
	MaxMessageBytes = 30_000_000
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
//
// Recipients are given either as To, Cc and Bcc (one personalization, the
// common case) or as Personalizations (several, each its own copy of the
// email), not both. SendGrid sends one email to every address of every
// personalization, and refuses an address listed twice anywhere in one
// request.
//
// With TemplateID (a dynamic template), the template supplies the content
// and, usually, the subject: Text and HTML must then be empty, and Subject
// is optional (SendGrid uses it only when the template has no subject of
// its own). Without TemplateID, Subject and Text or HTML are required.
type Email struct {
	// From is the sender; its address must be a verified Sender Identity
	// in SendGrid, or SendGrid refuses the email with 403. Required.
	From *Address `json:"from"`
	// To lists the recipients of a single-personalization email, 1 to
	// MaxRecipients. Required unless Personalizations is used.
	To []Address `json:"to,omitempty"`
	// Cc and Bcc are optional; To, Cc and Bcc together hold at most
	// MaxRecipients addresses, each one at most once.
	Cc  []Address `json:"cc,omitempty"`
	Bcc []Address `json:"bcc,omitempty"`
	// Personalizations, instead of To, Cc and Bcc, send the email to
	// several groups of recipients, 1 to MaxPersonalizations of them, each
	// with its own template data. All of them together hold at most
	// MaxRecipients addresses, each one at most once.
	Personalizations []Personalization `json:"personalizations,omitempty"`
	// ReplyTo is optional.
	ReplyTo *Address `json:"reply_to,omitempty"`
	// Subject is required without TemplateID, optional with it.
	Subject string `json:"subject,omitempty"`
	// Text and HTML are the bodies; at least one is required without
	// TemplateID, and neither may be given with it (the template's content
	// would replace them).
	Text string `json:"text,omitempty"`
	HTML string `json:"html,omitempty"`
	// TemplateID is a SendGrid dynamic template's id ("d-" followed by
	// letters and digits, as SendGrid shows it). Legacy templates, whose ids
	// do not start with "d-", are not supported: they take substitutions,
	// not dynamic template data.
	TemplateID string `json:"template_id,omitempty"`
	// DynamicTemplateData is the data every recipient's template is
	// rendered with (any JSON values). SendGrid itself only reads
	// personalizations[].dynamic_template_data: Perform sends each
	// personalization this data merged with its own, key by key, the
	// personalization's value replacing the top-level one (one level deep:
	// a nested object is replaced whole, not merged). Requires TemplateID.
	// Treated as personal data: Redact hides its values.
	DynamicTemplateData map[string]json.RawMessage `json:"dynamic_template_data,omitempty"`
	// Attachments are optional files sent with the email (see Attachment).
	// The whole request, attachments included, must stay under
	// MaxMessageBytes.
	Attachments []Attachment `json:"attachments,omitempty"`
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

// Personalization is one group of recipients of an Email, sent its own copy
// of the email. To holds at least one address.
type Personalization struct {
	To  []Address `json:"to"`
	Cc  []Address `json:"cc,omitempty"`
	Bcc []Address `json:"bcc,omitempty"`
	// DynamicTemplateData overrides Email.DynamicTemplateData key by key
	// for these recipients. Requires Email.TemplateID.
	DynamicTemplateData map[string]json.RawMessage `json:"dynamic_template_data,omitempty"`
}

// Attachment is a file sent with an Email.
type Attachment struct {
	// Content is the file, base64-encoded (standard alphabet, padded, on
	// one line: SendGrid refuses line breaks). Required and non-empty.
	Content string `json:"content"`
	// Filename is the file's name as the recipient sees it, with its
	// extension. Required; no line breaks, ';' or ','.
	Filename string `json:"filename"`
	// Type is the file's MIME type ("application/pdf"); optional.
	Type string `json:"type,omitempty"`
	// Disposition is "attachment" (the default when empty) or "inline".
	Disposition string `json:"disposition,omitempty"`
	// ContentID names an inline attachment for the HTML to show it
	// (<img src="cid:logo">). Required with Disposition "inline".
	ContentID string `json:"content_id,omitempty"`
}

// personalizations returns the Email's recipients as personalizations, with
// the JSON path each one's fields are reported under: the single implicit
// one ("") when To is used, "personalizations[i]." otherwise.
func (e *Email) personalizations() ([]Personalization, []string) {
	if len(e.Personalizations) == 0 {
		return []Personalization{{To: e.To, Cc: e.Cc, Bcc: e.Bcc}}, []string{""}
	}
	prefixes := make([]string, len(e.Personalizations))
	for i := range e.Personalizations {
		prefixes[i] = fmt.Sprintf("personalizations[%d].", i)
	}
	return e.Personalizations, prefixes
}

// templateData is the dynamic template data SendGrid gets for p: the
// Email's, overridden key by key by p's. Nil when both are empty.
func (e *Email) templateData(p Personalization) map[string]json.RawMessage {
	if len(e.DynamicTemplateData) == 0 && len(p.DynamicTemplateData) == 0 {
		return nil
	}
	out := make(map[string]json.RawMessage, len(e.DynamicTemplateData)+len(p.DynamicTemplateData))
	for k, v := range e.DynamicTemplateData {
		out[k] = v
	}
	for k, v := range p.DynamicTemplateData {
		out[k] = v
	}
	return out
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
	if err := e.validateRecipients(); err != nil {
		return err
	}
	if e.ReplyTo != nil {
		if err := checkAddress("reply_to", *e.ReplyTo); err != nil {
			return err
		}
	}
	if err := e.validateContent(); err != nil {
		return err
	}
	// The files alone, before decoding tens of megabytes of them.
	files := 0
	for _, a := range e.Attachments {
		files += len(a.Content)
	}
	if files >= MaxMessageBytes-identityReserve {
		return bad("attachments", "are %d bytes of base64; SendGrid takes less than %d (30MB) per email, attachments included", files, MaxMessageBytes)
	}
	for i, a := range e.Attachments {
		if err := a.validate(fmt.Sprintf("attachments[%d]", i)); err != nil {
			return err
		}
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
	// Last, as it encodes the whole request: every field above is sound.
	return e.checkSize(MaxMessageBytes)
}

// checkSize refuses e when its request, with room for the intent's
// identity, would reach limit bytes.
func (e *Email) checkSize(limit int) error {
	if size := requestSize(e); size >= limit-identityReserve {
		field := ""
		if len(e.Attachments) > 0 {
			field = "attachments"
		}
		return &providers.PayloadError{Kind: KindEmail, Field: field, Reason: fmt.Sprintf(
			"makes a request of %d bytes; SendGrid takes less than %d (30MB) per email, attachments included, and %d are kept for the intent's identity", size, limit, identityReserve)}
	}
	return nil
}

// identityReserve is room kept in MaxMessageBytes for what Perform adds to
// the request: the namespace, key and intent id in custom_args, JSON-escaped
// at worst (6 bytes a byte), with their names.
const identityReserve = 6*MaxIdentityBytes + 256

// requestSize is the size of the request body Perform would send for e,
// without the intent's identity.
func requestSize(e *Email) int {
	b, err := json.Marshal(mailBody(e, providers.Request{}))
	if err != nil {
		return MaxMessageBytes
	}
	return len(b)
}

// validateRecipients checks the addresses of every personalization and
// SendGrid's limits over all of them: at most MaxPersonalizations and
// MaxRecipients, an address at most once in the whole request, and no ','
// or ';' in a recipient's name (SendGrid accepts them and then drops the
// name).
func (e *Email) validateRecipients() error {
	bad := func(field, format string, args ...any) error {
		return &providers.PayloadError{Kind: KindEmail, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(e.Personalizations) > 0 {
		switch {
		case len(e.To) > 0 || len(e.Cc) > 0 || len(e.Bcc) > 0:
			field := "to"
			if len(e.To) == 0 {
				field = "cc"
				if len(e.Cc) == 0 {
					field = "bcc"
				}
			}
			return bad(field, "must be empty when personalizations are given: list these recipients in a personalization")
		case len(e.Personalizations) > MaxPersonalizations:
			return bad("personalizations", "has %d personalizations, more than %d", len(e.Personalizations), MaxPersonalizations)
		}
	}
	ps, prefixes := e.personalizations()
	seen := map[string]string{}
	total := 0
	for i, p := range ps {
		if len(p.To) == 0 {
			return bad(prefixes[i]+"to", "needs at least one recipient")
		}
		for _, list := range []struct {
			name  string
			addrs []Address
		}{{"to", p.To}, {"cc", p.Cc}, {"bcc", p.Bcc}} {
			for j, a := range list.addrs {
				field := fmt.Sprintf("%s%s[%d]", prefixes[i], list.name, j)
				if err := checkAddress(field, a); err != nil {
					return err
				}
				if strings.ContainsAny(a.Name, ",;") {
					return bad(field+".name", "must not contain ',' or ';': SendGrid refuses them in a recipient's name")
				}
				key := strings.ToLower(a.Email)
				if first, dup := seen[key]; dup {
					return bad(field+".email", "duplicates %s.email: SendGrid refuses an address listed twice in one request (over to, cc, bcc and every personalization)", first)
				}
				seen[key] = field
			}
			total += len(list.addrs)
		}
		if len(p.DynamicTemplateData) > 0 && e.TemplateID == "" {
			return bad(prefixes[i]+"dynamic_template_data", "needs template_id: only a dynamic template reads it")
		}
		if data := e.templateData(p); data != nil {
			if b, err := json.Marshal(data); err == nil && len(b) > MaxTemplateDataBytes {
				field := prefixes[i] + "dynamic_template_data"
				if len(p.DynamicTemplateData) == 0 {
					field = "dynamic_template_data"
				}
				return bad(field, "is %d bytes of JSON as sent (merged with the top-level data), more than SendGrid's %d per personalization", len(b), MaxTemplateDataBytes)
			}
		}
	}
	if total > MaxRecipients {
		field := "to"
		if len(e.Personalizations) > 0 {
			field = "personalizations"
		}
		return bad(field, "to, cc and bcc hold %d recipients together, more than %d", total, MaxRecipients)
	}
	return nil
}

// validateContent checks the subject, bodies and template: a dynamic
// template replaces the bodies and may carry the subject; without one,
// both are required.
func (e *Email) validateContent() error {
	bad := func(field, format string, args ...any) error {
		return &providers.PayloadError{Kind: KindEmail, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.ContainsAny(e.Subject, "\r\n") {
		return bad("subject", "must not contain line breaks")
	}
	if e.TemplateID == "" {
		if len(e.DynamicTemplateData) > 0 {
			return bad("dynamic_template_data", "needs template_id: only a dynamic template reads it")
		}
		if strings.TrimSpace(e.Subject) == "" {
			return bad("subject", "is required (unless a dynamic template, template_id, supplies it)")
		}
		if e.Text == "" && e.HTML == "" {
			return bad("text", "text or html is required (unless a dynamic template, template_id, supplies the content)")
		}
		return nil
	}
	if !dynamicTemplateID(e.TemplateID) {
		return bad("template_id", "must be a dynamic template's id: \"d-\" followed by letters and digits (legacy templates are not supported)")
	}
	if e.Text != "" {
		return bad("text", "must be empty with template_id: the dynamic template's content replaces it")
	}
	if e.HTML != "" {
		return bad("html", "must be empty with template_id: the dynamic template's content replaces it")
	}
	if e.Subject != "" && strings.TrimSpace(e.Subject) == "" {
		return bad("subject", "must not be blank")
	}
	return nil
}

// dynamicTemplateID reports whether id has the shape of a dynamic
// template's id: "d-" and 1 to 64 ASCII letters and digits (SendGrid's are
// 32 hex digits).
func dynamicTemplateID(id string) bool {
	rest, ok := strings.CutPrefix(id, "d-")
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// validate checks an attachment as SendGrid does (content base64 on one
// line, filename required, no line breaks in the header fields) and that
// an inline one has a content id.
func (a Attachment) validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		return &providers.PayloadError{Kind: KindEmail, Field: field + "." + sub, Reason: fmt.Sprintf(format, args...)}
	}
	if a.Content == "" {
		return bad("content", "is required (the file, base64-encoded)")
	}
	if _, err := decodeBase64(a.Content); err != nil {
		return bad("content", "must be base64 (standard alphabet, padded, without line breaks): %v", err)
	}
	if a.Filename == "" {
		return bad("filename", "is required")
	}
	if strings.ContainsAny(a.Filename, "\r\n;,") {
		return bad("filename", "must not contain line breaks, ';' or ','")
	}
	if a.Type != "" {
		if strings.ContainsAny(a.Type, "\r\n;,") {
			return bad("type", "must not contain line breaks, ';' or ','")
		}
		if mt, params, err := mime.ParseMediaType(a.Type); err != nil || len(params) > 0 || !strings.Contains(mt, "/") {
			return bad("type", "must be a MIME type such as application/pdf")
		}
	}
	switch a.Disposition {
	case "", "attachment":
	case "inline":
		if a.ContentID == "" {
			return bad("content_id", "is required with disposition \"inline\": the HTML shows the file by it (cid:...)")
		}
	default:
		return bad("disposition", "must be \"attachment\" or \"inline\", not %q", a.Disposition)
	}
	if strings.ContainsAny(a.ContentID, "\r\n;") {
		return bad("content_id", "must not contain line breaks or ';'")
	}
	return nil
}

// decodeBase64 decodes s strictly: the standard alphabet with padding, and
// nothing else, not even the line breaks Go's decoder skips (SendGrid
// refuses them).
func decodeBase64(s string) ([]byte, error) {
	if i := strings.IndexAny(s, "\r\n \t"); i >= 0 {
		return nil, fmt.Errorf("whitespace at byte %d", i)
	}
	return base64.StdEncoding.Strict().DecodeString(s)
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
