package jetstreamprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/providers"
)

const (
	// Name is the provider's stable name, stored with each intent.
	Name = "nats"
	// KindPublish is the intent kind that publishes one message to a
	// JetStream stream; its payload is a Payload.
	KindPublish = "nats.publish"
	// IntentIDHeader is the header that carries the outbox intent's id on
	// every published message, so a consumer or an operator can trace a
	// message back to its intent.
	IntentIDHeader = "Outbox-Intent-Id"
)

// Provider publishes KindPublish intents to NATS JetStream. It implements
// providers.Provider, is safe for concurrent use and holds one NATS
// connection, which reconnects by itself; Close releases it.
type Provider struct {
	cfg     Config
	secrets []string
	nc      *nats.Conn
	js      jetstream.JetStream
	caps    providers.Capabilities
}

var _ providers.Provider = (*Provider)(nil)

// New validates cfg, connects to the server and fixes the provider's
// capabilities (see the package doc):
//
//   - with Config.KeyWindow set: keyed with that window; New does not wait
//     for the server, which may be down (publishes are retried meanwhile);
//   - with Config.Stream set: New connects, reads the stream's duplicate
//     window within Config.Timeout (or ctx's deadline) and declares it as
//     the key window. An unreachable server or a missing stream fails with
//     an error wrapping ErrStreamLookup; a stream without a duplicate
//     window is logged as a warning and declared unkeyed;
//   - with neither: unkeyed, with a warning; the server may be down.
//
// Invalid fields fail with an error wrapping ErrInvalidConfig that names
// the field.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, secrets: secretsIn(cfg.URL)}
	log := cfg.Logger.With("provider", Name, "server", RedactURL(cfg.URL))
	mustLookUp := cfg.KeyWindow == 0 && cfg.Stream != ""

	opts := []nats.Option{
		nats.Name("outbox jetstream provider"),
		nats.Timeout(cfg.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(DefaultReconnectWait),
		// A publish made while disconnected fails at once instead of being
		// buffered and sent after its attempt was given up.
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(!mustLookUp),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", "error", scrubErr(err, p.secrets))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("reconnected to NATS") }),
		nats.ConnectHandler(func(*nats.Conn) { log.Info("connected to NATS") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("NATS connection error", "error", scrubErr(err, p.secrets))
		}),
	}
	nc, err := nats.Connect(cfg.URL, append(opts, cfg.Options...)...)
	if err != nil {
		err = scrubErr(err, p.secrets)
		if mustLookUp {
			return nil, fmt.Errorf("%w %q: connect to %s: %w", ErrStreamLookup, cfg.Stream, RedactURL(cfg.URL), err)
		}
		return nil, fmt.Errorf("jetstreamprovider: connect to %s: %w", RedactURL(cfg.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstreamprovider: %w", err)
	}
	p.nc, p.js = nc, js

	switch {
	case cfg.KeyWindow > 0:
		p.caps = providers.Capabilities{IdempotencyKeys: true, KeyWindow: cfg.KeyWindow}
	case cfg.Stream != "":
		window, err := p.duplicateWindow(ctx)
		if err != nil {
			nc.Close()
			return nil, err
		}
		p.caps = capabilitiesFor(window, cfg.Stream, log)
	default:
		log.Warn("neither Config.Stream nor Config.KeyWindow is set: the duplicate window is unknown, so the provider declares no idempotency keys; ambiguous publishes will be held in_doubt")
	}
	return p, nil
}

// duplicateWindow reads Config.Stream's duplicate window.
func (p *Provider) duplicateWindow(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	stream, err := p.js.Stream(ctx, p.cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrStreamLookup, p.cfg.Stream, scrubErr(err, p.secrets))
	}
	return stream.CachedInfo().Config.Duplicates, nil
}

// capabilitiesFor declares a stream's duplicate window as the key window,
// or no keys (with a warning) when the stream has none.
func capabilitiesFor(window time.Duration, stream string, log *slog.Logger) providers.Capabilities {
	if window <= 0 {
		log.Warn("the stream has no duplicate window: JetStream will not drop a repeated Nats-Msg-Id, so the provider declares no idempotency keys; ambiguous publishes will be held in_doubt",
			"stream", stream)
		return providers.Capabilities{}
	}
	return providers.Capabilities{IdempotencyKeys: true, KeyWindow: window}
}

// Close closes the provider's connection. Perform then fails with
// OutcomeRetry without publishing. Close is safe to call more than once.
func (p *Provider) Close() { p.nc.Close() }

// String describes p without the credentials in its URL.
func (p *Provider) String() string {
	return fmt.Sprintf("jetstreamprovider.Provider{URL:%q Stream:%q IdempotencyKeys:%t KeyWindow:%s}",
		RedactURL(p.cfg.URL), p.cfg.Stream, p.caps.IdempotencyKeys, p.caps.KeyWindow)
}

// GoString is String, for the %#v verb.
func (p *Provider) GoString() string { return p.String() }

// Name returns Name.
func (p *Provider) Name() string { return Name }

// Kinds returns KindPublish.
func (p *Provider) Kinds() []string { return []string{KindPublish} }

// Capabilities returns what New fixed: idempotency keys with the stream's
// duplicate window (or Config.KeyWindow) as the key window, or none. It
// never changes and does no I/O. CanReconcile is false: JetStream cannot be
// searched by header.
func (p *Provider) Capabilities() providers.Capabilities { return p.caps }

// Validate checks a Payload strictly, without I/O. Errors are
// *providers.PayloadError naming the field ("subject", "data",
// "headers.Nats-Msg-Id").
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	if kind != KindPublish {
		return providers.UnknownKindError(kind)
	}
	_, _, err := decodePayload(payload)
	return err
}

// Reconcile returns providers.ErrReconcileUnsupported: a stream cannot be
// searched by header without reading it whole, so the provider neither
// finds a message nor proves one absent. (Within the stream's duplicate
// window a repeat with the same Nats-Msg-Id is safe without asking.)
func (p *Provider) Reconcile(context.Context, providers.Request) (providers.Result, bool, error) {
	return providers.Result{}, false, providers.ErrReconcileUnsupported
}

// Redact keeps the subject and the header names, replaces the data by its
// size and masks the values of headers whose names look sensitive
// (authorization, token, ...). A payload it cannot parse becomes
// {"redacted":"unparseable payload"}.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	return redactPayload(payload)
}
