// Package sendgridprovider is the outbox's adapter for SendGrid's v3 Mail
// Send API, built on the official sendgrid-go SDK. It performs intents of
// kind KindEmail, whose payload is an Email: plain or from a dynamic
// template, to one or several personalizations, with attachments. One
// intent is one request, which SendGrid accepts or refuses as a whole, and
// which sends one email to each recipient.
//
// SendGrid keeps no idempotency of any kind, so the adapter declares none:
// the dispatcher commits a write-ahead attempt before every call and never
// repeats an attempt classified OutcomeAmbiguous (a 5xx, a timeout or a lost
// connection after the request was written). Each request carries the
// intent's identity in custom_args: the deployment's namespace
// ("outbox_namespace"), the intent's key ("outbox_key") and, for people
// reading the activity feed, its id ("intent_id"). When Config.Reconcile is
// enabled, an ambiguous attempt can be looked up by namespace and key in
// SendGrid's Email Activity API, which is eventually consistent: a lookup
// finds an email or proves nothing, never its absence.
//
// The API key is a secret: it is sent only in the Authorization header and
// never appears in errors, in AttemptError messages or in the output of
// fmt on Config or Provider.
package sendgridprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sendgrid/rest"
	"github.com/sendgrid/sendgrid-go"

	"github.com/outboxkit/outbox/internal/scrub"
	"github.com/outboxkit/outbox/providers"
)

const (
	// Name is the provider's stable name, stored with each intent.
	Name = "sendgrid"
	// KindEmail is the intent kind for one email; its payload is an Email.
	KindEmail = "sendgrid.email"
	// DefaultBaseURL is SendGrid's global API host.
	DefaultBaseURL = "https://api.sendgrid.com"
	// DefaultTimeout bounds one HTTP call when Config.HTTPClient is nil.
	// A call that times out after the request was written is ambiguous.
	DefaultTimeout = 30 * time.Second
	// DefaultActivityRequestsPerMinute is Config.ActivityRequestsPerMinute's
	// default: SendGrid's limit on the Email Activity API since 9 December
	// 2025 (PROVIDERS.md).
	DefaultActivityRequestsPerMinute = 6

	mailSendPath = "/v3/mail/send"
	messagesPath = "/v3/messages"

	// CodeProviderAuth is the AttemptError Code of an attempt SendGrid
	// refused for the account (401, 403 other than an unverified sender):
	// OutcomeRetry with DidNotAct, so that a rolled key holds the queue
	// instead of failing it.
	CodeProviderAuth = "provider_auth"

	// msgNoAPIKey is the failure of an attempt made without an API key.
	msgNoAPIKey = "SENDGRID API key is not configured"
)

// Config configures a Provider.
type Config struct {
	// APIKey is the SendGrid API key (a secret: it is never logged and
	// never put in errors). It may be empty for a Provider used only to
	// Validate and Redact; Perform and Reconcile then fail without sending
	// anything.
	APIKey string
	// BaseURL is the API's scheme and host, such as
	// "https://api.eu.sendgrid.com" or a test double's URL. It must be an
	// absolute http or https URL without credentials, query or fragment.
	// Defaults to DefaultBaseURL.
	BaseURL string
	// HTTPClient makes the calls. Defaults to a client with Timeout
	// DefaultTimeout over providers.NewUnkeyedHTTPTransport (HTTP/1.1).
	// A client without a timeout can hang an attempt forever:
	// sendgrid-go's rest.DefaultClient is such a client and is never used.
	//
	// SendGrid has no idempotency key, so the client is always used
	// through providers.UnkeyedClient, default or not: redirects are not
	// followed (the client's CheckRedirect is ignored) and no layer of
	// net/http may send a request twice (its HTTP/2 retry after a stream
	// reset, a keep-alive replay). The given client is not modified.
	HTTPClient *http.Client
	// Reconcile enables looking ambiguous attempts up in SendGrid's Email
	// Activity API. That API is a paid add-on, allows 6 requests a minute
	// and is eventually consistent (an email can take minutes to appear),
	// so it is off by default: Capabilities().CanReconcile is then false
	// and Reconcile returns providers.ErrReconcileUnsupported. When on,
	// Reconcile can find an email but never proves one absent.
	Reconcile bool
	// ActivityRequestsPerMinute paces Reconcile's look-ups to SendGrid's
	// limit on the Email Activity API, per process: a look-up past it is
	// not sent but answered with a *providers.LookupError whose RetryAfter
	// is when the next may go (the dispatcher asks again then without
	// spending a re-check). Several processes on one account share the
	// limit; SendGrid's 429 beyond it is honoured the same way. Defaults to
	// DefaultActivityRequestsPerMinute.
	ActivityRequestsPerMinute int
	// Now is the clock used to turn X-RateLimit-Reset into a RetryAfter and
	// to refuse a send_at more than MaxSendAtAhead ahead (Validate has no
	// clock of its own). Defaults to time.Now.
	Now func() time.Time
}

// String describes c with the API key masked, so that printing a Config
// never leaks it.
func (c Config) String() string {
	return fmt.Sprintf("sendgridprovider.Config{APIKey:%s BaseURL:%q Reconcile:%t}", maskedKey(c.APIKey), c.BaseURL, c.Reconcile)
}

// GoString is String, for the %#v verb.
func (c Config) GoString() string { return c.String() }

func maskedKey(k string) string {
	if k == "" {
		return `""`
	}
	return "[redacted]"
}

// Provider is the SendGrid adapter. It implements providers.Provider and is
// safe for concurrent use.
type Provider struct {
	apiKey    string
	baseURL   string
	client    *rest.Client
	reconcile bool
	now       func() time.Time
	pacer     *pacer
}

var _ providers.Provider = (*Provider)(nil)

// New returns a Provider for cfg, filling in defaults. It fails, naming the
// field, when BaseURL is not an absolute http(s) URL.
func New(cfg Config) (*Provider, error) {
	base, err := checkBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultTimeout, Transport: providers.NewUnkeyedHTTPTransport()}
	}
	// Without a key, nothing below the adapter may send a request twice
	// (DESIGN.md, invariant 6): no followed redirect (SendGrid does not
	// redirect, so a redirect is answered as it is), no net/http replay.
	httpClient = providers.UnkeyedClient(httpClient)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	perMinute := cfg.ActivityRequestsPerMinute
	switch {
	case perMinute == 0:
		perMinute = DefaultActivityRequestsPerMinute
	case perMinute < 0:
		return nil, fmt.Errorf("sendgridprovider: Config.ActivityRequestsPerMinute must be positive, got %d", perMinute)
	}
	return &Provider{
		apiKey:    cfg.APIKey,
		baseURL:   base,
		client:    &rest.Client{HTTPClient: httpClient},
		reconcile: cfg.Reconcile,
		now:       now,
		pacer:     &pacer{limit: perMinute, window: time.Minute},
	}, nil
}

func checkBaseURL(raw string) (string, error) {
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("sendgridprovider: Config.BaseURL is not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("sendgridprovider: Config.BaseURL must be an absolute http or https URL, got scheme %q", u.Scheme)
	case u.Host == "":
		return "", errors.New("sendgridprovider: Config.BaseURL has no host")
	case u.User != nil:
		return "", errors.New("sendgridprovider: Config.BaseURL must not contain credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("sendgridprovider: Config.BaseURL must not have a query or fragment")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// String describes p without its API key.
func (p *Provider) String() string {
	return fmt.Sprintf("sendgridprovider.Provider{BaseURL:%q Reconcile:%t APIKey:%s}", p.baseURL, p.reconcile, maskedKey(p.apiKey))
}

// GoString is String, for the %#v verb.
func (p *Provider) GoString() string { return p.String() }

// Name returns Name.
func (p *Provider) Name() string { return Name }

// Kinds returns KindEmail.
func (p *Provider) Kinds() []string { return []string{KindEmail} }

// Capabilities declares no idempotency keys (SendGrid has none) and
// CanReconcile as Config.Reconcile.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{IdempotencyKeys: false, CanReconcile: p.reconcile}
}

// Validate checks an Email payload strictly, without I/O. Errors are
// *providers.PayloadError naming the field by its JSON path ("to[0].email").
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	if kind != KindEmail {
		return providers.UnknownKindError(kind)
	}
	_, err := decodeEmail(payload, p.now())
	return err
}

// Redact masks recipients' addresses and names (to, cc, bcc of every
// personalization, reply_to; the sender is kept), replaces the bodies and
// each attachment's content by their size (keeping filename, type and
// disposition), replaces every value of dynamic_template_data by its size
// (keeping the keys, the template's variable names) and masks custom_args
// values whose key looks sensitive. A payload it cannot parse becomes
// {"redacted":"unparseable payload"}.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	return redactEmail(payload)
}

// Perform sends the email with one POST /v3/mail/send and classifies the
// outcome:
//   - 2xx: succeeded, ProviderRef is the X-Message-Id;
//   - 429: OutcomeRetry after X-RateLimit-Reset (at least one second);
//   - 401, and 403 except for an unverified from address: OutcomeRetry with
//     DidNotAct and Code CodeProviderAuth (a revoked or expired key, a key
//     without the mail.send scope, credits exhausted, a blocked account:
//     nothing was sent, and the queue waits for the account to be fixed);
//   - other 4xx: OutcomeFailed with SendGrid's message;
//   - 5xx, or a timeout or lost connection after the request was written:
//     OutcomeAmbiguous, since SendGrid may have queued the email;
//   - a request proven never to have left (providers.RequestNeverSent:
//     connection refused, DNS, a failed TLS handshake, no connection
//     obtained, or ctx already done): OutcomeRetry with DidNotAct.
//
// The request is sent once: see Config.HTTPClient.
//
// Errors are *providers.AttemptError.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	if req.Kind != KindEmail {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "unknown intent kind " + strconv.Quote(req.Kind), Err: providers.UnknownKindError(req.Kind)}
	}
	if p.apiKey == "" {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: msgNoAPIKey, DidNotAct: true}
	}
	email, err := decodeEmail(req.Payload, p.now())
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err, DidNotAct: true}
	}
	if len(req.Namespace)+len(req.IdempotencyKey) > MaxIdentityBytes {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, DidNotAct: true,
			Message: fmt.Sprintf("the namespace and idempotency key are %d bytes together, more than the %d custom_args can carry", len(req.Namespace)+len(req.IdempotencyKey), MaxIdentityBytes)}
	}
	body, err := json.Marshal(mailBody(email, req))
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "cannot encode the request: " + err.Error()}
	}
	if len(body) >= MaxMessageBytes {
		// Validate keeps room for the identity; this holds whatever it is.
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, DidNotAct: true,
			Message: fmt.Sprintf("the request is %d bytes; SendGrid takes less than %d per email, attachments included", len(body), MaxMessageBytes)}
	}
	if providers.ContextEndedBeforeCall(ctx) {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Message: "not sent: " + ctx.Err().Error(), Err: ctx.Err(), DidNotAct: true}
	}

	r := sendgrid.GetRequest(p.apiKey, mailSendPath, p.baseURL)
	r.Method = rest.Post
	r.Body = body
	resp, err := p.client.SendWithContext(ctx, r)
	if resp == nil {
		// No response at all. (rest returns a response along with an
		// error when only reading the body failed: the status stands.)
		if err == nil {
			err = errors.New("no response")
		}
		return providers.Result{}, p.transportError(err)
	}
	status := resp.StatusCode
	header := http.Header(resp.Headers)
	if status >= 200 && status < 300 {
		return providers.Result{ProviderRef: header.Get("X-Message-Id"), HTTPStatus: status}, nil
	}
	return providers.Result{}, p.statusError(resp)
}

// statusError classifies a non-2xx response.
func (p *Provider) statusError(resp *rest.Response) *providers.AttemptError {
	status := resp.StatusCode
	e := &providers.AttemptError{HTTPStatus: status, Message: p.scrub(errorMessage(resp))}
	switch {
	case status == http.StatusTooManyRequests:
		e.Outcome = providers.OutcomeRetry
		e.RetryAfter = p.retryAfter(http.Header(resp.Headers))
		e.DidNotAct = true
	case (status == http.StatusUnauthorized || status == http.StatusForbidden) && !senderRefused(resp):
		// The account, not the email: a revoked or expired key, a key
		// without the mail.send scope, credits exhausted, a temporary
		// block. Nothing was queued; once fixed, the same email goes out.
		e.Outcome = providers.OutcomeRetry
		e.DidNotAct = true
		e.Code = CodeProviderAuth
		e.Message = fmt.Sprintf("SendGrid refused the account (HTTP %d): fix the SendGrid credentials (Config.APIKey, its mail.send scope) or the account's standing; the email is retried. SendGrid: %s", status, e.Message)
	case status >= 400 && status < 500:
		e.Outcome = providers.OutcomeFailed
		// Refused at the door (validation, auth, size): nothing queued.
		switch status {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusRequestEntityTooLarge:
			e.DidNotAct = true
		}
	default:
		// 5xx, and anything unexpected (1xx, 3xx): SendGrid may have
		// queued the email.
		e.Outcome = providers.OutcomeAmbiguous
	}
	return e
}

// lookupError is what an Email Activity answer other than 200 says: never
// anything about the email, only what the look-up needs (PROVIDERS.md: an
// account without the add-on gets 400 "authorization required").
func (p *Provider) lookupError(resp *rest.Response) *providers.LookupError {
	status := resp.StatusCode
	le := &providers.LookupError{HTTPStatus: status, Message: p.scrub(errorMessage(resp))}
	switch {
	case status == http.StatusTooManyRequests:
		le.RetryAfter = p.retryAfter(http.Header(resp.Headers))
	case status == http.StatusBadRequest && strings.Contains(strings.ToLower(le.Message), "authorization required"):
		le.Needs = "the Email Activity History add-on on this SendGrid account"
	case status == http.StatusUnauthorized:
		le.Needs = "a valid SendGrid API key (Config.APIKey)"
	case status == http.StatusForbidden:
		le.Needs = "an API key with the email_activity.read scope"
	case le.Refused():
		le.Needs = "a look-up SendGrid accepts: " + le.Message
	}
	return le
}

// senderRefused reports whether a 403 is about the email's from address
// (not a verified Sender Identity): a problem of this email's payload,
// which fails, not of the account. SendGrid names the field "from".
func senderRefused(resp *rest.Response) bool {
	if resp.StatusCode != http.StatusForbidden {
		return false
	}
	var body struct {
		Errors []struct {
			Field *string `json:"field"`
		} `json:"errors"`
	}
	if json.Unmarshal([]byte(resp.Body), &body) != nil {
		return false
	}
	for _, e := range body.Errors {
		if e.Field != nil && (*e.Field == "from" || strings.HasPrefix(*e.Field, "from.")) {
			return true
		}
	}
	return false
}

// transportError classifies an error that ended a call without a response.
func (p *Provider) transportError(err error) *providers.AttemptError {
	e := providers.ClassifyTransport(err, false)
	e.Err = &scrub.Error{Msg: p.scrub(err.Error()), Err: err}
	return e
}

// retryAfter turns X-RateLimit-Reset (Unix seconds) into a wait, at least
// one second; Retry-After (seconds) is honoured when there is no reset.
func (p *Provider) retryAfter(h http.Header) time.Duration {
	wait := time.Duration(0)
	if reset, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 10, 64); err == nil {
		wait = time.Unix(reset, 0).Sub(p.now())
	} else if secs, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil {
		wait = time.Duration(secs) * time.Second
	}
	return max(wait, time.Second)
}

// errorMessage is errors[0].message of SendGrid's error body, or the
// status text when there is none.
func errorMessage(resp *rest.Response) string {
	var body struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal([]byte(resp.Body), &body) == nil && len(body.Errors) > 0 && body.Errors[0].Message != "" {
		return body.Errors[0].Message
	}
	if text := http.StatusText(resp.StatusCode); text != "" {
		return text
	}
	return "HTTP " + strconv.Itoa(resp.StatusCode)
}

// scrub removes the API key from s, in case a server or proxy echoed it.
func (p *Provider) scrub(s string) string {
	if p.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.apiKey, "[redacted]")
}

// Wire types of SendGrid's v3 Mail Send body, as much as Perform sends.
type (
	sgAddress struct {
		Email string `json:"email"`
		Name  string `json:"name,omitempty"`
	}
	sgPersonalization struct {
		To                  []sgAddress                `json:"to"`
		Cc                  []sgAddress                `json:"cc,omitempty"`
		Bcc                 []sgAddress                `json:"bcc,omitempty"`
		DynamicTemplateData map[string]json.RawMessage `json:"dynamic_template_data,omitempty"`
	}
	sgContent struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	sgAttachment struct {
		Content     string `json:"content"`
		Filename    string `json:"filename"`
		Type        string `json:"type,omitempty"`
		Disposition string `json:"disposition,omitempty"`
		ContentID   string `json:"content_id,omitempty"`
	}
	sgMail struct {
		Personalizations []sgPersonalization `json:"personalizations"`
		From             sgAddress           `json:"from"`
		ReplyTo          *sgAddress          `json:"reply_to,omitempty"`
		Subject          string              `json:"subject,omitempty"`
		Content          []sgContent         `json:"content,omitempty"`
		TemplateID       string              `json:"template_id,omitempty"`
		Attachments      []sgAttachment      `json:"attachments,omitempty"`
		Categories       []string            `json:"categories,omitempty"`
		CustomArgs       map[string]string   `json:"custom_args"`
		SendAt           int64               `json:"send_at,omitempty"`
	}
)

// mailBody maps an Email to SendGrid's body: its personalizations (one for
// To, Cc and Bcc), each with its effective dynamic template data (SendGrid
// has no top-level data to merge), text/plain before text/html, and the
// intent's identity in custom_args.
func mailBody(e *Email, req providers.Request) sgMail {
	conv := func(list []Address) []sgAddress {
		if len(list) == 0 {
			return nil
		}
		out := make([]sgAddress, len(list))
		for i, a := range list {
			out[i] = sgAddress(a)
		}
		return out
	}
	ps, _ := e.personalizations()
	m := sgMail{
		Personalizations: make([]sgPersonalization, len(ps)),
		From:             sgAddress(*e.From),
		Subject:          e.Subject,
		TemplateID:       e.TemplateID,
		Categories:       e.Categories,
		CustomArgs:       make(map[string]string, len(e.CustomArgs)+3),
		SendAt:           e.SendAt,
	}
	for i, p := range ps {
		m.Personalizations[i] = sgPersonalization{To: conv(p.To), Cc: conv(p.Cc), Bcc: conv(p.Bcc), DynamicTemplateData: e.templateData(p)}
	}
	if e.ReplyTo != nil {
		r := sgAddress(*e.ReplyTo)
		m.ReplyTo = &r
	}
	if e.Text != "" {
		m.Content = append(m.Content, sgContent{Type: "text/plain", Value: e.Text})
	}
	if e.HTML != "" {
		m.Content = append(m.Content, sgContent{Type: "text/html", Value: e.HTML})
	}
	for _, a := range e.Attachments {
		m.Attachments = append(m.Attachments, sgAttachment(a))
	}
	for k, v := range e.CustomArgs {
		m.CustomArgs[k] = v
	}
	if req.Namespace != "" {
		m.CustomArgs[ArgNamespace] = req.Namespace
	}
	m.CustomArgs[ArgKey] = req.IdempotencyKey
	m.CustomArgs[ArgIntentID] = strconv.FormatInt(req.IntentID, 10)
	return m
}

// Reconcile looks the intent up in the Email Activity API
// (GET /v3/messages) by the identity Perform put in custom_args:
//
//	unique_args['outbox_namespace']="NS" AND unique_args['outbox_key']="KEY"
//
// (only the key for an intent recorded before namespaces existed). Each
// row SendGrid answers is one recipient of a matching email; found=true
// needs a row whose recipient is one of the payload's (to, cc or bcc of any
// personalization), and carries the X-Message-Id part of its msg_id as
// ProviderRef. One row is enough, whatever the number of recipients:
// SendGrid accepts or refuses a request as a whole, so one recipient's
// email proves them all accepted. Rows for other recipients only are a
// *providers.MismatchError, never adopted.
//
// The activity feed is eventually consistent (an email can take minutes to
// appear) and allows 6 requests a minute, so "not found" proves nothing: it
// is an error wrapping providers.ErrAbsenceNotProven, and the intent stays
// in_doubt. A failed lookup (429, 5xx, no answer) is an
// *providers.AttemptError with OutcomeRetry. Without Config.Reconcile it
// returns providers.ErrReconcileUnsupported.
func (p *Provider) Reconcile(ctx context.Context, req providers.Request) (providers.Result, bool, error) {
	if !p.reconcile {
		return providers.Result{}, false, providers.ErrReconcileUnsupported
	}
	if p.apiKey == "" {
		return providers.Result{}, false, &providers.LookupError{Message: msgNoAPIKey, Needs: "a SendGrid API key (Config.APIKey)"}
	}
	if req.Kind != KindEmail {
		return providers.Result{}, false, providers.UnknownKindError(req.Kind)
	}
	email, err := decodeEmail(req.Payload, p.now())
	if err != nil {
		return providers.Result{}, false, fmt.Errorf("sendgridprovider: cannot reconcile an intent whose payload is invalid: %w", err)
	}
	query, err := activityQuery(req)
	if err != nil {
		return providers.Result{}, false, err
	}
	if wait := p.pacer.take(p.now()); wait > 0 {
		return providers.Result{}, false, &providers.LookupError{RetryAfter: wait,
			Message: fmt.Sprintf("not sent: paced to SendGrid's %d Email Activity requests a minute (Config.ActivityRequestsPerMinute)", p.pacer.limit)}
	}
	status, rows, err := p.fetchActivity(ctx, query)
	if err != nil {
		return providers.Result{}, false, err
	}
	return matchActivity(email, rows, status)
}

// activityQuery is the Email Activity query for the emails carrying req's
// namespace and key, refused when they cannot be quoted in it.
func activityQuery(req providers.Request) (string, error) {
	if req.IdempotencyKey == "" {
		return "", errors.New("sendgridprovider: cannot reconcile an intent without an idempotency key")
	}
	if !quotable(req.Namespace) || !quotable(req.IdempotencyKey) {
		return "", fmt.Errorf("%w: the intent's namespace or key contains a character the activity query cannot quote", providers.ErrAbsenceNotProven)
	}
	query := fmt.Sprintf(`unique_args['%s']="%s"`, ArgKey, req.IdempotencyKey)
	if req.Namespace != "" {
		query = fmt.Sprintf(`unique_args['%s']="%s" AND %s`, ArgNamespace, req.Namespace, query)
	}
	return query, nil
}

// activityRow is one recipient of an email in the activity feed.
type activityRow struct {
	MsgID   string `json:"msg_id"`
	ToEmail string `json:"to_email"`
}

// fetchActivity asks GET /v3/messages for the rows matching query. Any
// failure is a *providers.LookupError.
func (p *Provider) fetchActivity(ctx context.Context, query string) (status int, rows []activityRow, err error) {
	r := sendgrid.GetRequest(p.apiKey, messagesPath, p.baseURL)
	r.Method = rest.Get
	r.QueryParams = map[string]string{"query": query, "limit": strconv.Itoa(activityLimit)}
	resp, err := p.client.SendWithContext(ctx, r)
	if err != nil {
		if resp == nil {
			e := p.transportError(err)
			return 0, nil, &providers.LookupError{Message: e.Message, Err: e.Err}
		}
		return 0, nil, &providers.LookupError{HTTPStatus: resp.StatusCode, Message: "reading the activity response: " + p.scrub(err.Error())}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, p.lookupError(resp)
	}
	var body struct {
		Messages []activityRow `json:"messages"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
		return 0, nil, &providers.LookupError{HTTPStatus: resp.StatusCode, Message: "undecodable activity response", Err: err}
	}
	return resp.StatusCode, body.Messages, nil
}

// matchActivity is Reconcile's answer from the activity rows of the
// emails carrying the intent's namespace and key.
func matchActivity(email *Email, rows []activityRow, status int) (providers.Result, bool, error) {
	// SendGrid accepts or refuses a request whole: a row for any one of
	// its recipients, carrying this intent's namespace and key, proves
	// every email of the request was accepted. The rows of the others may
	// lag in the feed, so a missing row proves nothing.
	recipients := map[string]bool{}
	ps, _ := email.personalizations()
	for _, p := range ps {
		for _, list := range [][]Address{p.To, p.Cc, p.Bcc} {
			for _, a := range list {
				recipients[strings.ToLower(a.Email)] = true
			}
		}
	}
	var other *providers.MismatchError
	for _, m := range rows {
		if m.MsgID == "" {
			continue
		}
		ref, _, _ := strings.Cut(m.MsgID, ".")
		if recipients[strings.ToLower(m.ToEmail)] {
			return providers.Result{ProviderRef: ref, HTTPStatus: status}, true, nil
		}
		if other == nil {
			// Addresses are personal data: the error keeps them masked.
			other = &providers.MismatchError{ProviderRef: ref, Field: "recipient", Want: MaskEmail(ps[0].To[0].Email), Got: MaskEmail(m.ToEmail)}
		}
	}
	if other != nil {
		return providers.Result{}, false, other
	}
	return providers.Result{}, false, fmt.Errorf("%w: SendGrid's activity feed (eventually consistent) shows no email with this intent's namespace and key yet", providers.ErrAbsenceNotProven)
}

// activityLimit is how many activity rows Reconcile asks for: one per
// recipient of the intent's email (at most MaxRecipients).
const activityLimit = MaxRecipients

// quotable reports whether s can stand between double quotes in an
// activity query.
func quotable(s string) bool { return !strings.ContainsAny(s, "\"\\") }

// pacer keeps look-ups to at most limit in any window (SendGrid counts
// Email Activity requests a minute per account). It is safe for concurrent
// use.
type pacer struct {
	limit  int
	window time.Duration

	mu   sync.Mutex
	sent []time.Time // the last limit look-ups, oldest first
}

// take counts a look-up at now and returns 0, or returns how long until
// one may go, counting nothing.
func (pc *pacer) take(now time.Time) time.Duration {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.sent) < pc.limit {
		pc.sent = append(pc.sent, now)
		return 0
	}
	if wait := pc.sent[0].Add(pc.window).Sub(now); wait > 0 {
		return wait
	}
	pc.sent = append(pc.sent[1:], now)
	return 0
}

// CheckConfigured implements providers.Configured: without Config.APIKey
// the provider validates and redacts, but performs nothing.
func (p *Provider) CheckConfigured() error {
	if p.apiKey == "" {
		return errors.New("sendgridprovider: Config.APIKey is empty: this provider can validate and redact intents, not perform them")
	}
	return nil
}
