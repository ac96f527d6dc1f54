// Package webhookprovider delivers intents as signed HTTP POSTs to webhook
// receivers the operator configures by name.
//
// An intent of kind KindPost names an endpoint, an event and its data:
//
//	{"endpoint": "billing", "event": "invoice.paid", "data": {"invoice": "in_1"}}
//
// Perform POSTs the JSON body
//
//	{"id": "<idempotency key>", "event": "invoice.paid", "data": {...}, "created_at": "<RFC 3339>"}
//
// to the endpoint's URL with these headers:
//
//   - X-Outbox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
//     under the endpoint's secret (Stripe's scheme; see Sign and Verify);
//   - X-Outbox-Intent-Id: the outbox's intent id (for display: ids repeat
//     across databases);
//   - X-Outbox-Namespace: the deployment's namespace, when the intent has
//     one, so that a receiver shared by several deployments can tell their
//     deliveries apart (the key in "id" is already derived from it);
//   - the endpoint's IdempotencyHeader (such as Idempotency-Key), carrying
//     the same key as "id", when the receiver honours one.
//
// The id is the same on every attempt; created_at and the signature's
// timestamp are those of the attempt, so a receiver deduplicates by the key,
// never by the body's bytes. A keyed receiver says it answered from its
// idempotency store with "Idempotent-Replayed: true".
//
// How answers are classified (DESIGN.md's table) depends on whether the
// provider is keyed: see Config for when it is, and Provider.Perform. The
// provider cannot ask a receiver whether it got a delivery, so it never
// reconciles: an ambiguous delivery is held in_doubt for an operator.
//
// Package webhookdouble is a receiver to test against.
package webhookprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/internal/scrub"
	"github.com/outboxkit/outbox/providers"
)

const (
	// Name is the provider's stable name, stored with each intent.
	Name = "webhook"
	// KindPost is the intent kind that POSTs one event to one endpoint. Its
	// payload is described by Payload.
	KindPost = "webhook.post"

	// IntentIDHeader carries the outbox's intent id on every delivery.
	IntentIDHeader = "X-Outbox-Intent-Id"
	// NamespaceHeader carries the deployment's namespace
	// (providers.Request.Namespace) on every delivery of an intent that has
	// one.
	NamespaceHeader = "X-Outbox-Namespace"
	// ReplayedHeader, set to "true" on a response, says a keyed receiver
	// answered from its idempotency store instead of acting again.
	ReplayedHeader = "Idempotent-Replayed"
	// DefaultReferenceHeader is the response header recorded as the
	// provider reference when Endpoint.ReferenceHeader is empty.
	DefaultReferenceHeader = "X-Request-Id"
	// DefaultTimeout bounds one delivery when Endpoint.Timeout is 0.
	DefaultTimeout = 10 * time.Second
	// MaxMessageBytes is the longest receiver message an AttemptError
	// carries; longer ones are cut.
	MaxMessageBytes = 256
	// MaxEventLength is the longest event name a payload may carry.
	MaxEventLength = 200

	userAgent = "outboxkit-webhook/1"
	// maxErrorBody is how much of an error response is read for its message.
	maxErrorBody = 64 << 10
)

// Provider delivers KindPost intents. It is safe for concurrent use. Create
// it with New.
type Provider struct {
	endpoints    map[string]*endpoint
	names        []string // sorted, for messages
	keyed        bool
	keyWindow    time.Duration
	maxKeyLength int
	client       *http.Client
	now          func() time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New validates cfg, fills in defaults and returns a Provider. Errors wrap
// ErrInvalidConfig and name the offending field; they never contain a secret.
func New(cfg Config) (*Provider, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: Config.Endpoints is empty: configure at least one endpoint", ErrInvalidConfig)
	}
	p := &Provider{endpoints: make(map[string]*endpoint, len(cfg.Endpoints)), keyed: true, client: cfg.HTTPClient, now: cfg.Now}
	for name := range cfg.Endpoints {
		p.names = append(p.names, name)
	}
	slices.Sort(p.names)
	for _, name := range p.names {
		ep, err := checkEndpoint(name, cfg.Endpoints[name])
		if err != nil {
			return nil, err
		}
		p.endpoints[name] = ep
		if ep.keyHeader == "" {
			p.keyed = false
			continue
		}
		if p.keyWindow == 0 || ep.keyWindow < p.keyWindow {
			p.keyWindow = ep.keyWindow
		}
		if ep.maxKeyLength > 0 && (p.maxKeyLength == 0 || ep.maxKeyLength < p.maxKeyLength) {
			p.maxKeyLength = ep.maxKeyLength
		}
	}
	if !p.keyed {
		p.keyWindow, p.maxKeyLength = 0, 0
	}
	if p.client == nil {
		transport := providers.NewHTTPTransport()
		if !p.keyed {
			transport = providers.NewUnkeyedHTTPTransport()
		}
		p.client = &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if !p.keyed {
		// Without a key, nothing below the adapter may deliver twice
		// (DESIGN.md, invariant 6).
		p.client = providers.UnkeyedClient(p.client)
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// String describes p without secrets.
func (p *Provider) String() string {
	return fmt.Sprintf("webhookprovider.Provider{Endpoints:%v Keyed:%t}", p.names, p.keyed)
}

// Name returns Name.
func (p *Provider) Name() string { return Name }

// Kinds returns KindPost.
func (p *Provider) Kinds() []string { return []string{KindPost} }

// Capabilities declares idempotency keys only when every endpoint has an
// IdempotencyHeader, with the shortest of their KeyWindows and
// MaxKeyLengths; CanReconcile is always false (a receiver cannot be asked
// whether it got a delivery).
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{
		IdempotencyKeys: p.keyed,
		KeyWindow:       p.keyWindow,
		MaxKeyLength:    p.maxKeyLength,
	}
}

// Payload is the JSON payload of a KindPost intent. Unknown fields are
// refused.
type Payload struct {
	// Endpoint names one of Config.Endpoints. Required.
	Endpoint string `json:"endpoint"`
	// Event is the event's type, such as "note.created": 1 to
	// MaxEventLength printable ASCII characters without spaces. Required.
	Event string `json:"event"`
	// Data is the event's data, any JSON value but null. Required. It is
	// sent as given.
	Data json.RawMessage `json:"data"`
}

var eventRE = regexp.MustCompile(`^[\x21-\x7e]+$`)

// Validate checks a KindPost payload without doing I/O: the endpoint must be
// configured, the event well-formed and the data present. It returns a
// *providers.PayloadError naming the field, or an error wrapping
// providers.ErrUnknownKind for another kind.
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	_, _, err := p.decode(kind, payload)
	return err
}

func (p *Provider) decode(kind string, payload json.RawMessage) (*Payload, *endpoint, error) {
	if kind != KindPost {
		return nil, nil, providers.UnknownKindError(kind)
	}
	var pl Payload
	if err := providers.DecodePayload(kind, payload, &pl); err != nil {
		return nil, nil, err
	}
	bad := func(field, reason string) error {
		return &providers.PayloadError{Kind: kind, Field: field, Reason: reason}
	}
	ep, ok := p.endpoints[pl.Endpoint]
	switch {
	case pl.Endpoint == "":
		return nil, nil, bad("endpoint", "is required")
	case !ok:
		return nil, nil, bad("endpoint", fmt.Sprintf("no endpoint %q is configured (configured: %s)", pl.Endpoint, strings.Join(p.names, ", ")))
	case pl.Event == "":
		return nil, nil, bad("event", "is required")
	case len(pl.Event) > MaxEventLength:
		return nil, nil, bad("event", fmt.Sprintf("must be at most %d characters", MaxEventLength))
	case !eventRE.MatchString(pl.Event):
		return nil, nil, bad("event", "must be printable ASCII without spaces, such as \"note.created\"")
	case len(pl.Data) == 0 || bytes.Equal(bytes.TrimSpace(pl.Data), []byte("null")):
		return nil, nil, bad("data", "is required (any JSON value but null)")
	}
	return &pl, ep, nil
}

// envelope is the body of a delivery.
type envelope struct {
	ID        string          `json:"id"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	CreatedAt string          `json:"created_at"`
}

// Perform POSTs the event to its endpoint once, signed, with the intent's id
// and (for a keyed endpoint) its key, and classifies the answer. "Keyed"
// below means the provider is keyed (every endpoint has an
// IdempotencyHeader; see Config):
//
//   - 2xx: succeeded. ProviderRef is the endpoint's ReferenceHeader, or
//     "status:<code>"; Replayed is true when a keyed receiver answered
//     "Idempotent-Replayed: true".
//   - 429: retry, with RetryAfter from Retry-After (seconds or HTTP date).
//   - 409 when keyed: retry (a concurrent request holds the key).
//   - other 4xx: failed, with the receiver's message (from a JSON "message"
//     or "error" field, or the body's text), cut to MaxMessageBytes.
//   - 500: ambiguous, keyed or not. The receiver may have acted before
//     failing, and a receiver that saves its answers under the key replays
//     that 500 to every retry, so repeating cannot settle it.
//   - other 5xx: retry when keyed (a gateway's 502, 503, 504: the key makes
//     the repeat safe); ambiguous when not.
//   - 1xx, 3xx (redirects are not followed): ambiguous.
//   - no response: providers.ClassifyTransport. A request proven never to
//     have left (providers.RequestNeverSent) is retried; otherwise retry
//     when keyed, ambiguous when not.
//
// A payload that fails validation, an empty key, a key with control
// characters or longer than the endpoint's MaxKeyLength fail without sending.
// Errors are *providers.AttemptError and never contain the endpoint's secret
// or its URL's path and query.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	pl, ep, err := p.decode(req.Kind, req.Payload)
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err}
	}
	key := req.IdempotencyKey
	switch {
	case strings.TrimSpace(key) == "":
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the intent has no idempotency key; refusing to deliver without one"}
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the idempotency key contains control characters and cannot be sent in a header"}
	case strings.ContainsFunc(req.Namespace, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the namespace contains control characters and cannot be sent in a header", DidNotAct: true}
	case ep.maxKeyLength > 0 && len(key) > ep.maxKeyLength:
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the idempotency key is longer than endpoint %q's %d bytes", ep.name, ep.maxKeyLength)}
	}

	now := p.now()
	body, err := json.Marshal(envelope{ID: key, Event: pl.Event, Data: pl.Data, CreatedAt: now.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "cannot encode the body: " + err.Error()}
	}
	if providers.ContextEndedBeforeCall(ctx) {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Message: "not sent: " + ctx.Err().Error(), Err: ctx.Err()}
	}
	ctx, cancel := context.WithTimeout(ctx, ep.timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("cannot build the request to endpoint %q", ep.name)}
	}
	h := httpReq.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	h.Set(IntentIDHeader, strconv.FormatInt(req.IntentID, 10))
	if req.Namespace != "" {
		h.Set(NamespaceHeader, req.Namespace)
	}
	h.Set(SignatureHeader, Sign(ep.secret, now, body))
	if ep.keyHeader != "" {
		h.Set(ep.keyHeader, key)
	}

	resp, err := p.client.Do(httpReq)
	if err != nil {
		return providers.Result{}, p.transportError(ep, err)
	}
	defer resp.Body.Close()
	status := resp.StatusCode
	if status >= 200 && status < 300 {
		// The status proves the delivery; the body is not needed.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		ref := resp.Header.Get(ep.refHeader)
		if ref == "" {
			ref = "status:" + strconv.Itoa(status)
		}
		return providers.Result{
			ProviderRef: ref,
			HTTPStatus:  status,
			Replayed:    p.keyed && resp.Header.Get(ReplayedHeader) == "true",
		}, nil
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return providers.Result{}, p.statusError(ep, resp, raw)
}

// statusError classifies a non-2xx response.
func (p *Provider) statusError(ep *endpoint, resp *http.Response, body []byte) *providers.AttemptError {
	status := resp.StatusCode
	msg := p.scrub(ep, receiverMessage(status, body))
	ae := &providers.AttemptError{HTTPStatus: status, Message: msg}
	switch {
	case status == http.StatusTooManyRequests:
		ae.Outcome = providers.OutcomeRetry
		ae.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), p.now())
	case status == http.StatusConflict && p.keyed:
		ae.Outcome = providers.OutcomeRetry
	case status >= 400 && status < 500:
		ae.Outcome = providers.OutcomeFailed
	case status == http.StatusInternalServerError:
		ae.Outcome = providers.OutcomeAmbiguous
	case status > 500 && p.keyed:
		ae.Outcome = providers.OutcomeRetry
	default:
		ae.Outcome = providers.OutcomeAmbiguous
		if status >= 300 && status < 400 {
			ae.Message = fmt.Sprintf("endpoint %q redirected (HTTP %d); configure its final URL", ep.name, status)
		}
	}
	ae.Err = fmt.Errorf("webhook endpoint %q (%s): HTTP %d: %s", ep.name, ep.display, status, ae.Message)
	return ae
}

// transportError classifies an error that ended the call without a response.
func (p *Provider) transportError(ep *endpoint, err error) *providers.AttemptError {
	ae := providers.ClassifyTransport(err, p.keyed)
	inner := err
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		inner = urlErr.Err // url.Error's text repeats the whole URL
	}
	ae.Message = p.scrub(ep, fmt.Sprintf("POST to endpoint %q (%s): %v", ep.name, ep.display, inner))
	ae.Err = &scrub.Error{Msg: ae.Message, Err: err}
	return ae
}

// scrub removes the endpoint's secret and full URL from s, in case a
// receiver or proxy echoed them.
func (p *Provider) scrub(ep *endpoint, s string) string {
	s = strings.ReplaceAll(s, ep.secret, "[redacted]")
	if ep.url != ep.display {
		s = strings.ReplaceAll(s, ep.url, ep.display)
		if u, err := url.Parse(ep.url); err == nil {
			if u.RawQuery != "" {
				s = strings.ReplaceAll(s, u.RawQuery, "[redacted]")
			}
			if len(u.Path) > 1 {
				s = strings.ReplaceAll(s, u.Path, "/…")
			}
		}
	}
	return s
}

// receiverMessage extracts a human-readable message from an error body: a
// JSON object's "message", "error" (a string, or an object with "message")
// or "errors"[0].message, else the body's text, else the status text. It is
// cut to MaxMessageBytes.
func receiverMessage(status int, body []byte) string {
	msg := ""
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil {
		str := func(raw json.RawMessage) string {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s
			}
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(raw, &inner) == nil {
				return inner.Message
			}
			return ""
		}
		msg = str(obj["message"])
		if msg == "" {
			msg = str(obj["error"])
		}
		if msg == "" {
			var list []struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(obj["errors"], &list) == nil && len(list) > 0 {
				msg = list[0].Message
			}
		}
	} else if utf8.Valid(body) {
		msg = strings.Join(strings.Fields(string(body)), " ")
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if msg == "" {
		msg = "HTTP " + strconv.Itoa(status)
	}
	return truncate(msg, MaxMessageBytes)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// retryAfter parses Retry-After: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Reconcile returns providers.ErrReconcileUnsupported: a webhook receiver
// cannot be asked whether it got a delivery, so the provider neither finds
// a delivery nor proves one absent, and the dispatcher holds an ambiguous
// delivery in_doubt.
func (p *Provider) Reconcile(ctx context.Context, req providers.Request) (providers.Result, bool, error) {
	return providers.Result{}, false, providers.ErrReconcileUnsupported
}
