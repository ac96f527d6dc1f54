// Package amqpprovider is the outbox's adapter for publishing to RabbitMQ
// (AMQP 0-9-1), built on github.com/rabbitmq/amqp091-go. It performs
// intents of kind KindPublish, whose payload is a Publish: one message to an
// exchange, published with publisher confirms and the mandatory flag.
//
// Each message carries the intent's idempotency key as its AMQP message-id
// property and the intent's id in the HeaderIntentID header. RabbitMQ does
// not deduplicate on message-id (or anything else), so the adapter declares
// no idempotency keys: the dispatcher commits a write-ahead attempt before
// every publish and never repeats an ambiguous one. A publish whose confirm
// was lost (the connection dropped, or no confirm arrived within
// Config.ConfirmTimeout) is ambiguous: the broker may hold the message. The
// intent is then held in_doubt for an operator, since RabbitMQ cannot be
// asked. Consumers must therefore still be idempotent: consume through the
// inbox (intents.Consume, or package intents/amqpconsumer), keyed on the
// message-id, so an operator's resend of an in_doubt intent is absorbed.
//
// Outcomes of Perform:
//   - confirm ack: succeeded; ProviderRef is the message-id;
//   - confirm ack preceded by basic.return (no queue bound for the routing
//     key): failed, code "unroutable";
//   - the exchange does not exist (channel error 404): failed, code
//     "not_found";
//   - the broker unreachable, or publishing blocked by a resource alarm:
//     retry;
//   - confirm nack (a queue refused the message; the others it routes to
//     may hold it), the connection lost after the publish was written and
//     before its confirm, a confirm timeout, or ctx ending while waiting:
//     ambiguous.
//
// The provider keeps one long-lived connection and a pool of confirm-mode
// channels (one publish in flight per channel), dialled on first use and
// again after the connection is lost. It is safe for concurrent use. The
// URL's password is never logged and is removed from errors.
package amqpprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/scrub"
	"github.com/outboxkit/outbox/providers"
)

const (
	// Name is the provider's stable name, stored with each intent.
	Name = "rabbitmq"
	// KindPublish is the intent kind for one published message; its
	// payload is a Publish.
	KindPublish = "rabbitmq.publish"
	// MaxKeyLength is the longest idempotency key, in bytes: the AMQP
	// message-id property is a short string.
	MaxKeyLength = 255
	// DefaultConfirmTimeout is Config.ConfirmTimeout's default.
	DefaultConfirmTimeout = 10 * time.Second
	// DefaultDialTimeout is Config.DialTimeout's default.
	DefaultDialTimeout = 10 * time.Second

	// maxIdleChannels bounds the pool of idle publishing channels.
	maxIdleChannels = 64
	msgNoURL        = "RabbitMQ URL is not configured"
)

// ErrClosed is wrapped by the error of a Perform called after Close. The
// message was not published (OutcomeRetry).
var ErrClosed = errors.New("amqpprovider: provider is closed")

// Config configures a Provider.
type Config struct {
	// URL is the broker's AMQP URI, "amqp://user:password@host:5672/vhost"
	// (or amqps://). It holds a secret: the password is never logged and
	// is removed from errors and from fmt's output of Config and Provider.
	// It may be empty for a Provider used only to Validate and Redact;
	// Perform then fails without publishing anything.
	URL string
	// ConfirmTimeout bounds the wait for the broker's publisher confirm
	// after a message was written. A publish unconfirmed by then is
	// ambiguous. Defaults to DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
	// DialTimeout bounds connecting (TCP, TLS and the AMQP handshake) when
	// AMQPConfig.Dial is nil. Defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// AMQPConfig tunes the connection: TLS, heartbeat, client properties,
	// a custom Dial. Optional; its Recovery must be nil (the provider
	// reconnects by itself). When Properties has no "connection_name",
	// "outbox amqpprovider" is set so operators can spot the connection.
	AMQPConfig *amqp.Config
	// Logger receives connection events (connected, lost). Defaults to
	// discarding.
	Logger *slog.Logger
}

// String describes c with the URL's password masked.
func (c Config) String() string {
	return fmt.Sprintf("amqpprovider.Config{URL:%q ConfirmTimeout:%s DialTimeout:%s}", RedactURL(c.URL), c.ConfirmTimeout, c.DialTimeout)
}

// GoString is String, for the %#v verb.
func (c Config) GoString() string { return c.String() }

// RedactURL returns an AMQP URL with its password replaced by "xxxxx", for
// logs. A URL that cannot be parsed becomes "[invalid URL]".
func RedactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "[invalid URL]"
	}
	return u.Redacted()
}

// Provider publishes KindPublish intents. Create it with New; it is safe
// for concurrent use. Call Close when done.
type Provider struct {
	url            string
	redactedURL    string
	password       string
	confirmTimeout time.Duration
	amqpConfig     amqp.Config
	log            *slog.Logger

	// dialMu serialises dialling, so concurrent Performs after a lost
	// connection open one connection, not many.
	dialMu sync.Mutex
	// mu guards the fields below.
	mu     sync.Mutex
	conn   *connection
	idle   []*pubChannel
	closed bool
}

var _ providers.Provider = (*Provider)(nil)

// New returns a Provider for cfg, filling in defaults. It does not connect:
// the first Perform does. It fails, naming the field, when URL is not an
// AMQP URI, a duration is negative, or AMQPConfig.Recovery is set.
func New(cfg Config) (*Provider, error) {
	p := &Provider{
		url:            cfg.URL,
		confirmTimeout: cfg.ConfirmTimeout,
		log:            cfg.Logger,
	}
	if cfg.URL != "" {
		uri, err := amqp.ParseURI(cfg.URL)
		if err != nil {
			// ParseURI's errors can quote the URL, password included.
			return nil, errors.New("amqpprovider: Config.URL is not a valid AMQP URI (amqp://user:password@host:port/vhost)")
		}
		p.password = uri.Password
		p.redactedURL = RedactURL(cfg.URL)
	}
	switch {
	case cfg.ConfirmTimeout < 0:
		return nil, fmt.Errorf("amqpprovider: Config.ConfirmTimeout must be positive, got %s", cfg.ConfirmTimeout)
	case cfg.ConfirmTimeout == 0:
		p.confirmTimeout = DefaultConfirmTimeout
	}
	dialTimeout := cfg.DialTimeout
	switch {
	case dialTimeout < 0:
		return nil, fmt.Errorf("amqpprovider: Config.DialTimeout must be positive, got %s", dialTimeout)
	case dialTimeout == 0:
		dialTimeout = DefaultDialTimeout
	}
	if cfg.AMQPConfig != nil {
		if cfg.AMQPConfig.Recovery != nil {
			return nil, errors.New("amqpprovider: Config.AMQPConfig.Recovery must be nil: the provider reconnects by itself")
		}
		p.amqpConfig = *cfg.AMQPConfig
	}
	if p.amqpConfig.Dial == nil {
		p.amqpConfig.Dial = amqp.DefaultDial(dialTimeout)
	}
	props := amqp.NewConnectionProperties()
	for k, v := range p.amqpConfig.Properties {
		props[k] = v
	}
	if _, ok := props["connection_name"]; !ok {
		props["connection_name"] = "outbox amqpprovider"
	}
	p.amqpConfig.Properties = props
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// String describes p without the URL's password.
func (p *Provider) String() string {
	return fmt.Sprintf("amqpprovider.Provider{URL:%q ConfirmTimeout:%s}", p.redactedURL, p.confirmTimeout)
}

// GoString is String, for the %#v verb.
func (p *Provider) GoString() string { return p.String() }

// Name returns Name.
func (p *Provider) Name() string { return Name }

// Kinds returns KindPublish.
func (p *Provider) Kinds() []string { return []string{KindPublish} }

// Capabilities declares no idempotency keys (RabbitMQ does not deduplicate
// on message-id), keys of at most MaxKeyLength bytes (they become the
// message-id), and no reconciliation (a broker cannot be asked whether it
// took a message).
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{IdempotencyKeys: false, MaxKeyLength: MaxKeyLength, CanReconcile: false}
}

// Validate checks a Publish payload strictly, without I/O. Errors are
// *providers.PayloadError naming the field ("routing_key", "body").
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	if kind != KindPublish {
		return providers.UnknownKindError(kind)
	}
	_, err := decodePublish(payload)
	return err
}

// Redact masks header values whose name looks sensitive ("authorization",
// "x-session-token", "email"...) and, in a JSON body, the values of object
// keys that look sensitive, at any depth. A string body (non-JSON content
// type) is replaced by its size. A payload it cannot parse becomes
// {"redacted":"unparseable payload"}.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	return redactPublish(payload)
}

// Reconcile returns providers.ErrReconcileUnsupported: RabbitMQ cannot be
// asked whether it took a message, so the provider neither finds one nor
// proves one absent, and the dispatcher holds an ambiguous publish
// in_doubt.
func (p *Provider) Reconcile(context.Context, providers.Request) (providers.Result, bool, error) {
	return providers.Result{}, false, providers.ErrReconcileUnsupported
}

// Perform publishes the message once, with the mandatory flag, and waits
// for the broker's publisher confirm. The package documentation lists how
// each outcome is classified. Errors are *providers.AttemptError.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	if req.Kind != KindPublish {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "unknown intent kind " + strconv.Quote(req.Kind), Err: providers.UnknownKindError(req.Kind)}
	}
	if p.url == "" {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: msgNoURL}
	}
	pub, err := decodePublish(req.Payload)
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err}
	}
	if req.IdempotencyKey == "" || len(req.IdempotencyKey) > MaxKeyLength {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the idempotency key must be 1 to %d bytes: it becomes the message-id", MaxKeyLength)}
	}
	if providers.ContextEndedBeforeCall(ctx) {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Message: "not published: " + ctx.Err().Error(), Err: ctx.Err()}
	}
	pc, err := p.acquire(ctx)
	if err != nil {
		return providers.Result{}, p.notPublished("cannot reach RabbitMQ", err)
	}
	if blocked, reason := pc.conn.isBlocked(); blocked {
		p.release(pc, true)
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, Code: "blocked",
			Message: "not published: the broker is blocking publishers (resource alarm: " + reason + ")"}
	}
	return p.publish(ctx, pc, pub, req)
}

func (p *Provider) publish(ctx context.Context, pc *pubChannel, pub *decoded, req providers.Request) (providers.Result, error) {
	headers := amqp.Table{HeaderIntentID: req.IntentID}
	for k, v := range pub.Headers {
		headers[k] = v
	}
	mode := amqp.Transient
	if pub.persistent {
		mode = amqp.Persistent
	}
	dc, err := pc.ch.PublishWithDeferredConfirm(pub.Exchange, pub.RoutingKey, true, false, amqp.Publishing{
		Headers:      headers,
		ContentType:  pub.ContentType,
		DeliveryMode: mode,
		MessageId:    req.IdempotencyKey,
		Body:         pub.body,
	})
	if err != nil {
		// The channel was closed before sending, or a write failed: the
		// broker routes a message only once all its frames arrived, and a
		// failed write means they did not.
		p.release(pc, false)
		return providers.Result{}, p.notPublished("publish failed", err)
	}
	timer := time.NewTimer(p.confirmTimeout)
	defer timer.Stop()
	select {
	case <-dc.Done():
	case <-timer.C:
		p.release(pc, false)
		p.abandon(pc.conn)
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeAmbiguous, Code: "confirm_timeout",
			Message: fmt.Sprintf("no publisher confirm within %s: the broker may hold the message", p.confirmTimeout)}
	case <-ctx.Done():
		p.release(pc, false)
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeAmbiguous, Code: "confirm_timeout",
			Message: "stopped waiting for the publisher confirm (" + ctx.Err().Error() + "): the broker may hold the message", Err: ctx.Err()}
	}
	if !dc.Acked() {
		if !pc.ch.IsClosed() {
			// A real basic.nack: at least one queue refused the message,
			// and "the message will still be published to all other queues
			// which can enqueue it" (RabbitMQ, x-overflow reject-publish):
			// with several routes it may have been delivered. Ambiguous,
			// never a retry (DESIGN.md, invariant 13).
			p.release(pc, true)
			return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeAmbiguous, Code: "nack",
				Message: "the broker nacked the message: a queue refused it (full, reject-publish), and the others it routes to may hold it"}
		}
		// The channel closed under the publish, which releases the
		// pending confirm as a nack. Its close reason says why.
		var closeErr *amqp.Error
		select {
		case closeErr = <-pc.closes:
		default:
		}
		p.release(pc, false)
		if closeErr != nil && closeErr.Code == amqp.NotFound && !p.connLost(pc) {
			return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Code: "not_found",
				Message: p.scrub(closeErr.Reason), Err: closeErr}
		}
		reason, cause := "closed", error(nil)
		if closeErr != nil {
			reason, cause = p.scrub(closeErr.Error()), closeErr
		}
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeAmbiguous,
			Message: "the connection was lost before the broker confirmed the message (" + reason + "): the broker may hold it",
			Err:     &scrub.Error{Msg: reason, Err: cause}}
	}
	// A mandatory message that could not be routed comes back as
	// basic.return before its confirm; the library hands it to pc.returns
	// before it processes the confirm.
	select {
	case ret := <-pc.returns:
		p.release(pc, true)
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Code: "unroutable",
			Message: fmt.Sprintf("unroutable: no queue is bound to exchange %q for routing key %q (%d %s)", pub.Exchange, pub.RoutingKey, ret.ReplyCode, ret.ReplyText)}
	default:
	}
	p.release(pc, true)
	return providers.Result{ProviderRef: req.IdempotencyKey}, nil
}

// notPublished is OutcomeRetry for an attempt that never reached the broker.
func (p *Provider) notPublished(what string, err error) *providers.AttemptError {
	msg := p.scrub(err.Error())
	return &providers.AttemptError{Outcome: providers.OutcomeRetry, Message: "not published: " + what + ": " + msg, Err: &scrub.Error{Msg: msg, Err: err}}
}

// scrub removes the URL's password from s, in case an error quoted it.
func (p *Provider) scrub(s string) string {
	if p.password == "" {
		return s
	}
	return strings.ReplaceAll(s, p.password, "xxxxx")
}
